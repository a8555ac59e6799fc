//! Keyed state, owned by the host: one backend per keyed worker, bytes in,
//! bytes out, in key order. Every keyed operator keeps its state and timers
//! through one service, [`KeyedState`], which lays the entries out with
//! [`keys`], key group first, so a worker's state splits by key group; a
//! process function's named states sit on top of it ([`KeyedContext`]).

mod cached;
mod changelog;
mod context;
mod keyed;
pub mod keys;
mod memory;
mod query;
mod query_answers;
#[cfg(feature = "rocksdb")]
mod rocks;
pub mod snapshot;

pub use cached::CachedBackend;
pub use changelog::{ChangelogBackend, SharedChangelog};
pub use context::{
    KeyedContext, KeyedError, MapEntries, MigrationCursor, PendingChanges, StaleValue, StateVersions,
};
pub use keyed::{KeyedState, TimeDomain, Timer};
pub use memory::MemoryBackend;
pub use query::{Answer, KeyEntries, StateRequest, answer, bytes_json};
pub use query_answers::{QueryOutcome, StateQuery};
#[cfg(feature = "rocksdb")]
pub use rocks::RocksBackend;

use std::path::{Path, PathBuf};

/// Why a state operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The storage engine failed.
    #[error("state backend `{backend}` at `{path}`: {message}")]
    Storage {
        /// Which backend.
        backend: &'static str,
        /// Where it keeps its files.
        path: String,
        /// The engine's explanation.
        message: String,
    },
    /// A checkpoint's state cannot be restored.
    #[error("{0}")]
    Restore(String),
    /// The manifest asks for a backend this build does not have.
    #[error("the `{0}` state backend is not part of this build (enable the cargo feature `{0}`)")]
    NotBuilt(&'static str),
}

/// One keyed worker's state: an ordered map of byte strings.
pub trait StateBackend: Send {
    /// The value at `key`.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError>;

    /// Calls `f` with the value at `key` (`None` when absent), read in
    /// place where the backend can: no copy.
    fn read_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), StateError> {
        f(self.get(key)?.as_deref());
        Ok(())
    }

    /// Sets `key` to `value`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError>;

    /// Removes `key` (nothing when absent).
    fn delete(&mut self, key: &[u8]) -> Result<(), StateError>;

    /// Calls `f` with each entry whose key is in `from..to`, in key order,
    /// until `f` returns false.
    fn scan(&self, from: &[u8], to: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool)
    -> Result<(), StateError>;

    /// Writes a consistent copy of everything into `dir`, a folder that
    /// does not exist yet (see [`snapshot`]).
    fn snapshot(&mut self, dir: &Path) -> Result<(), StateError>;

    /// Applies `batch` in order: a value puts, `None` deletes.
    fn write_batch(&mut self, batch: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<(), StateError> {
        for (k, v) in batch {
            match v {
                Some(v) => self.put(k, v)?,
                None => self.delete(k)?,
            }
        }
        Ok(())
    }
}

/// What is called with each entry read out of a snapshot.
pub type EntryVisitor<'a> = &'a mut dyn FnMut(&[u8], &[u8]) -> Result<(), StateError>;

/// A snapshot to restore from, as a checkpoint lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotSource {
    /// Its folder.
    pub path: PathBuf,
    /// `memory` or `rocksdb`.
    pub backend: String,
    /// Whether it holds exactly the key groups the restoring worker owns.
    pub same_key_groups: bool,
}

/// Which backend a pipeline's keyed workers use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendKind {
    /// In memory (default): fast, bounded by RAM.
    Memory,
    /// RocksDB under `dir`, one database per worker: bounded by disk;
    /// behind a write-back cache of `cache_bytes` per worker (none at 0).
    Rocks {
        /// The folder of the databases.
        dir: PathBuf,
        /// The cache of each worker, in bytes.
        cache_bytes: usize,
        /// RocksDB's block cache of each database, in bytes.
        block_cache_bytes: usize,
    },
}

/// The write-back cache of each RocksDB worker unless the manifest says
/// otherwise (`[state] cache_mb`).
pub const DEFAULT_CACHE_BYTES: usize = 64 << 20;

/// RocksDB's block cache of each database unless the manifest says
/// otherwise (`[state] block_cache_mb`); RocksDB's own default is 32 MiB.
pub const DEFAULT_BLOCK_CACHE_BYTES: usize = 128 << 20;

impl BackendKind {
    /// RocksDB under `dir` with the default cache.
    pub fn rocks(dir: PathBuf) -> Self {
        BackendKind::Rocks {
            dir,
            cache_bytes: DEFAULT_CACHE_BYTES,
            block_cache_bytes: DEFAULT_BLOCK_CACHE_BYTES,
        }
    }

    /// The backend's name in checkpoints.
    pub fn name(&self) -> &'static str {
        match self {
            BackendKind::Memory => "memory",
            BackendKind::Rocks { .. } => "rocksdb",
        }
    }

    /// A backend for keyed worker `worker` of stage `stage` holding the
    /// entries of `sources` whose key group `owns` accepts.
    pub fn restore(
        &self,
        stage: &str,
        worker: usize,
        sources: &[SnapshotSource],
        owns: &dyn Fn(u16) -> bool,
    ) -> Result<Box<dyn StateBackend>, StateError> {
        #[cfg(feature = "rocksdb")]
        if let (
            BackendKind::Rocks {
                dir,
                cache_bytes,
                block_cache_bytes,
            },
            [only],
        ) = (self, sources)
            && only.backend == "rocksdb"
            && only.same_key_groups
        {
            let path = dir.join(format!("{stage}-worker-{worker}"));
            let db = RocksBackend::open_copy(&only.path, &path, *block_cache_bytes)?;
            return Ok(cached(db, *cache_bytes));
        }
        let mut backend = self.open(stage, worker)?;
        for source in sources {
            let mut put = |k: &[u8], v: &[u8]| match snapshot::entry_key_group(k) {
                Some(kg) if !owns(kg) => Ok(()),
                _ => backend.put(k, v),
            };
            match source.backend.as_str() {
                #[cfg(feature = "rocksdb")]
                "rocksdb" => RocksBackend::for_each_in(&source.path, &mut put)?,
                "memory" => snapshot::read_entries(&source.path, &mut put)?,
                other => {
                    return Err(StateError::NotBuilt(if other == "rocksdb" {
                        "rocksdb"
                    } else {
                        "unknown"
                    }));
                }
            }
        }
        Ok(backend)
    }

    /// A fresh, empty backend for keyed worker `worker` of stage `stage`.
    pub fn open(&self, stage: &str, worker: usize) -> Result<Box<dyn StateBackend>, StateError> {
        match self {
            BackendKind::Memory => Ok(Box::new(MemoryBackend::default())),
            #[cfg(feature = "rocksdb")]
            BackendKind::Rocks {
                dir,
                cache_bytes,
                block_cache_bytes,
            } => {
                let path = dir.join(format!("{stage}-worker-{worker}"));
                Ok(cached(
                    RocksBackend::open_fresh(&path, *block_cache_bytes)?,
                    *cache_bytes,
                ))
            }
            #[cfg(not(feature = "rocksdb"))]
            BackendKind::Rocks { .. } => {
                let _ = (stage, worker);
                Err(StateError::NotBuilt("rocksdb"))
            }
        }
    }
}

/// `backend` behind a write-back cache of `bytes` (none at 0).
#[cfg(feature = "rocksdb")]
fn cached(backend: RocksBackend, bytes: usize) -> Box<dyn StateBackend> {
    match bytes {
        0 => Box::new(backend),
        bytes => Box::new(CachedBackend::new(backend, bytes)),
    }
}

#[cfg(test)]
mod model_tests;
