//! The RocksDB backend: state bounded by disk, not RAM.

use super::{StateBackend, StateError};
use rocksdb::{
    BlockBasedOptions, DB, Direction, IteratorMode, Options, ReadOptions, WriteBatch, WriteOptions,
};
use std::path::{Path, PathBuf};

/// State in a RocksDB database of its own (one per keyed worker).
///
/// Writes skip RocksDB's write-ahead log: the pipeline's checkpoints, not
/// the log, make state durable.
pub struct RocksBackend {
    db: DB,
    path: PathBuf,
    write: WriteOptions,
}

impl RocksBackend {
    /// Opens an empty database at `path`, removing what was there.
    pub fn open_fresh(path: &Path, block_cache_bytes: usize) -> Result<Self, StateError> {
        Self::open_filled(path, block_cache_bytes, |_| Ok(()))
    }

    /// Opens a copy of the RocksDB snapshot `snapshot` at `path` (what was
    /// there is removed): its files are hard-linked, not copied, where the
    /// file system allows.
    pub fn open_copy(snapshot: &Path, path: &Path, block_cache_bytes: usize) -> Result<Self, StateError> {
        Self::open_filled(path, block_cache_bytes, |err| {
            let files =
                std::fs::read_dir(snapshot).map_err(|e| err(format!("cannot read the snapshot: {e}")))?;
            for entry in files {
                let from = entry.map_err(|e| err(e.to_string()))?.path();
                let to = path.join(from.file_name().expect("a file in a folder has a name"));
                if std::fs::hard_link(&from, &to).is_err() {
                    std::fs::copy(&from, &to)
                        .map_err(|e| err(format!("cannot copy `{}`: {e}", from.display())))?;
                }
            }
            Ok(())
        })
    }

    /// Empties the folder `path`, lets `fill` put files in it, and opens the
    /// database there.
    fn open_filled(
        path: &Path,
        block_cache_bytes: usize,
        fill: impl FnOnce(&dyn Fn(String) -> StateError) -> Result<(), StateError>,
    ) -> Result<Self, StateError> {
        let err = |message: String| StateError::Storage {
            backend: "rocksdb",
            path: path.display().to_string(),
            message,
        };
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| err(format!("cannot clear the folder: {e}")))?;
        }
        std::fs::create_dir_all(path).map_err(|e| err(format!("cannot create the folder: {e}")))?;
        fill(&err)?;
        let db = DB::open(&tuned_options(block_cache_bytes), path).map_err(|e| err(e.into_string()))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(Self {
            db,
            path: path.to_owned(),
            write,
        })
    }

    /// Calls `f` with every entry of the RocksDB snapshot `snapshot`, read
    /// only.
    pub fn for_each_in(snapshot: &Path, f: super::EntryVisitor<'_>) -> Result<(), StateError> {
        let err = |e: rocksdb::Error| StateError::Storage {
            backend: "rocksdb",
            path: snapshot.display().to_string(),
            message: e.into_string(),
        };
        let db = DB::open_for_read_only(&Options::default(), snapshot, false).map_err(err)?;
        for item in db.iterator(IteratorMode::Start) {
            let (k, v) = item.map_err(err)?;
            f(&k, &v)?;
        }
        Ok(())
    }

    fn err(&self, e: rocksdb::Error) -> StateError {
        StateError::Storage {
            backend: "rocksdb",
            path: self.path.display().to_string(),
            message: e.into_string(),
        }
    }
}

/// RocksDB tuned for operator state behind the write-back cache: point
/// reads of keys that are mostly absent (a window's or a key's first
/// record), written in batches at checkpoints; see BENCHMARKS.md for what
/// each setting measured.
fn tuned_options(block_cache_bytes: usize) -> Options {
    let mut table = BlockBasedOptions::default();
    // A read of an absent key skips the files whose filter rules it out.
    table.set_bloom_filter(10.0, false);
    // The write-back cache's misses and the timers' scans read blocks.
    table.set_block_cache(&rocksdb::Cache::new_lru_cache(block_cache_bytes));
    let mut options = Options::default();
    options.create_if_missing(true);
    options.set_compression_type(rocksdb::DBCompressionType::Lz4);
    options.set_block_based_table_factory(&table);
    options
}

impl StateBackend for RocksBackend {
    fn snapshot(&mut self, dir: &Path) -> Result<(), StateError> {
        // RocksDB flushes the memtable (there is no log to keep) and links
        // its immutable files into `dir`.
        let checkpoint = rocksdb::checkpoint::Checkpoint::new(&self.db).map_err(|e| self.err(e))?;
        checkpoint.create_checkpoint(dir).map_err(|e| self.err(e))
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get(key).map_err(|e| self.err(e))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.db.put_opt(key, value, &self.write).map_err(|e| self.err(e))
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.db.delete_opt(key, &self.write).map_err(|e| self.err(e))
    }

    fn write_batch(&mut self, batch: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<(), StateError> {
        let mut b = WriteBatch::default();
        for (k, v) in batch {
            match v {
                Some(v) => b.put(k, v),
                None => b.delete(k),
            }
        }
        self.db.write_opt(b, &self.write).map_err(|e| self.err(e))
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        if from >= to {
            return Ok(());
        }
        let mut read = ReadOptions::default();
        read.set_iterate_upper_bound(to.to_vec());
        let iter = self
            .db
            .iterator_opt(IteratorMode::From(from, Direction::Forward), read);
        for item in iter {
            let (k, v) = item.map_err(|e| self.err(e))?;
            if !f(&k, &v) {
                break;
            }
        }
        Ok(())
    }
}
