//! The RocksDB backend: state bounded by disk, not RAM.

use super::{StateBackend, StateError};
use rocksdb::{DB, Direction, IteratorMode, Options, ReadOptions, WriteOptions};
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
    pub fn open_fresh(path: &Path) -> Result<Self, StateError> {
        let err = |message: String| StateError::Storage {
            backend: "rocksdb",
            path: path.display().to_string(),
            message,
        };
        if path.exists() {
            std::fs::remove_dir_all(path).map_err(|e| err(format!("cannot clear the folder: {e}")))?;
        }
        std::fs::create_dir_all(path).map_err(|e| err(format!("cannot create the folder: {e}")))?;
        let mut options = Options::default();
        options.create_if_missing(true);
        options.set_compression_type(rocksdb::DBCompressionType::Lz4);
        let db = DB::open(&options, path).map_err(|e| err(e.into_string()))?;
        let mut write = WriteOptions::default();
        write.disable_wal(true);
        Ok(Self {
            db,
            path: path.to_owned(),
            write,
        })
    }

    fn err(&self, e: rocksdb::Error) -> StateError {
        StateError::Storage {
            backend: "rocksdb",
            path: self.path.display().to_string(),
            message: e.into_string(),
        }
    }
}

impl StateBackend for RocksBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.db.get(key).map_err(|e| self.err(e))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.db.put_opt(key, value, &self.write).map_err(|e| self.err(e))
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.db.delete_opt(key, &self.write).map_err(|e| self.err(e))
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
