//! Where checkpoints live: one folder per checkpoint under the pipeline's
//! checkpoint directory, made visible only when complete.
//!
//! ```text
//! <dir>/chk-00000000000000000007/      a complete checkpoint
//!        _metadata.json                what it holds (written last)
//!        <stage>-<operator>-<worker>/  one snapshot per stateful worker
//! <dir>/chk-….tmp/                     one being written (never read)
//! <dir>/LATEST                         the id of the newest complete one
//! ```
//!
//! A checkpoint is written into `chk-<id>.tmp`, every file fsynced, its
//! metadata written last, the folder renamed to `chk-<id>`, and then
//! `LATEST` replaced by an atomic rename. Reading starts from `LATEST` and
//! falls back, newest first, to any other complete folder whose metadata
//! reads back; a partial or corrupt one is skipped with a log line.

use super::metadata::Metadata;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Why the checkpoint store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("checkpoint store `{path}`: {what}: {source}")]
    Io {
        /// The file or folder.
        path: String,
        /// What was being done.
        what: &'static str,
        /// The operating system's error.
        source: std::io::Error,
    },
}

fn io(path: &Path, what: &'static str) -> impl FnOnce(std::io::Error) -> StoreError {
    let path = path.display().to_string();
    move |source| StoreError::Io { path, what, source }
}

/// The checkpoints of one pipeline.
#[derive(Debug, Clone)]
pub struct CheckpointStore {
    dir: PathBuf,
    keep: usize,
}

const METADATA: &str = "_metadata.json";
const LATEST: &str = "LATEST";

impl CheckpointStore {
    /// The store in `dir` (created when missing), keeping the newest `keep`
    /// complete checkpoints.
    pub fn open(dir: &Path, keep: usize) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(io(dir, "creating"))?;
        Ok(Self {
            dir: dir.to_owned(),
            keep: keep.max(1),
        })
    }

    /// The store's folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn complete_dir(&self, id: u64) -> PathBuf {
        self.dir.join(format!("chk-{id:020}"))
    }

    /// The folder checkpoint `id` is written into, fresh and empty.
    pub fn begin(&self, id: u64) -> Result<PathBuf, StoreError> {
        let tmp = super::pending_dir(&self.dir, id);
        if tmp.exists() {
            fs::remove_dir_all(&tmp).map_err(io(&tmp, "clearing"))?;
        }
        fs::create_dir_all(&tmp).map_err(io(&tmp, "creating"))?;
        Ok(tmp)
    }

    /// Makes checkpoint `id`, written into `tmp` by [`begin`](Self::begin),
    /// visible: fsyncs its files, writes its metadata, renames it, points
    /// `LATEST` at it, and drops the checkpoints beyond the newest `keep`.
    pub fn complete(&self, tmp: &Path, metadata: &Metadata) -> Result<PathBuf, StoreError> {
        sync_tree(tmp)?;
        let meta_path = tmp.join(METADATA);
        write_synced(
            &meta_path,
            &serde_json::to_vec_pretty(metadata).expect("metadata serialises"),
        )?;
        sync_dir(tmp)?;
        let done = self.complete_dir(metadata.id);
        fs::rename(tmp, &done).map_err(io(&done, "renaming into place"))?;
        let latest_tmp = self.dir.join(format!("{LATEST}.tmp"));
        write_synced(&latest_tmp, metadata.id.to_string().as_bytes())?;
        fs::rename(&latest_tmp, self.dir.join(LATEST)).map_err(io(&self.dir, "replacing LATEST"))?;
        sync_dir(&self.dir)?;
        self.prune()?;
        Ok(done)
    }

    /// Removes what a failed checkpoint left behind.
    pub fn abandon(&self, tmp: &Path) {
        if let Err(e) = fs::remove_dir_all(tmp) {
            tracing::warn!(path = %tmp.display(), error = %e, "could not remove a failed checkpoint's folder");
        }
    }

    /// The largest checkpoint id in the store, complete or not: a new
    /// checkpoint takes a larger one.
    pub fn newest_id(&self) -> Result<u64, StoreError> {
        Ok(fs::read_dir(&self.dir)
            .map_err(io(&self.dir, "listing"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_prefix("chk-")?;
                id.strip_suffix(".tmp").unwrap_or(id).parse().ok()
            })
            .max()
            .unwrap_or(0))
    }

    /// The ids of the complete checkpoint folders, newest first.
    fn complete_ids(&self) -> Result<Vec<u64>, StoreError> {
        let mut ids: Vec<u64> = fs::read_dir(&self.dir)
            .map_err(io(&self.dir, "listing"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_prefix("chk-")?.parse().ok()
            })
            .collect();
        ids.sort_unstable_by(|a, b| b.cmp(a));
        Ok(ids)
    }

    fn prune(&self) -> Result<(), StoreError> {
        for id in self.complete_ids()?.into_iter().skip(self.keep) {
            let dir = self.complete_dir(id);
            fs::remove_dir_all(&dir).map_err(io(&dir, "removing an old checkpoint"))?;
        }
        Ok(())
    }

    /// The newest complete checkpoint whose metadata reads back, with its
    /// folder; `None` when there is none.
    pub fn latest(&self) -> Result<Option<(PathBuf, Metadata)>, StoreError> {
        self.latest_up_to(u64::MAX)
    }

    /// The newest complete checkpoint with an id of at most `limit` whose
    /// metadata reads back.
    pub fn latest_up_to(&self, limit: u64) -> Result<Option<(PathBuf, Metadata)>, StoreError> {
        let pointed: Option<u64> = fs::read_to_string(self.dir.join(LATEST))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .filter(|&id| id <= limit);
        let mut ids = self.complete_ids()?;
        ids.retain(|&id| id <= limit);
        if let Some(p) = pointed {
            ids.retain(|&id| id != p);
            ids.insert(0, p);
        }
        for id in ids {
            let dir = self.complete_dir(id);
            match read_metadata(&dir) {
                Ok(m) if m.id == id => return Ok(Some((dir, m))),
                Ok(m) => tracing::warn!(path = %dir.display(), id = m.id,
                    "skipping checkpoint: its metadata names another id"),
                Err(reason) => tracing::warn!(path = %dir.display(), %reason,
                    "skipping a partial or corrupt checkpoint; trying the one before"),
            }
        }
        Ok(None)
    }
}

/// The metadata of the checkpoint in `dir`, checked: it parses, and every
/// snapshot it lists is there.
pub fn read_metadata(dir: &Path) -> Result<Metadata, String> {
    let bytes = fs::read(dir.join(METADATA)).map_err(|e| format!("no readable {METADATA}: {e}"))?;
    let m: Metadata =
        serde_json::from_slice(&bytes).map_err(|e| format!("{METADATA} does not parse: {e}"))?;
    for s in &m.snapshots {
        let path = dir.join(&s.path);
        let complete = match s.backend.as_str() {
            "memory" => {
                crate::state::snapshot::read_entries(&path, &mut |_, _| Ok(())).map_err(|e| e.to_string())
            }
            _ if path.join("CURRENT").is_file() => Ok(()),
            _ => Err("no RocksDB `CURRENT` file".to_owned()),
        };
        complete.map_err(|reason| format!("snapshot `{}` is incomplete: {reason}", s.path))?;
    }
    Ok(m)
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut f = File::create(path).map_err(io(path, "creating"))?;
    f.write_all(bytes).map_err(io(path, "writing"))?;
    f.sync_all().map_err(io(path, "syncing"))
}

fn sync_dir(dir: &Path) -> Result<(), StoreError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io(dir, "syncing the folder"))
}

/// Fsyncs every file and folder under `dir`.
fn sync_tree(dir: &Path) -> Result<(), StoreError> {
    for entry in fs::read_dir(dir).map_err(io(dir, "listing"))? {
        let path = entry.map_err(io(dir, "listing"))?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            File::open(&path)
                .and_then(|f| f.sync_all())
                .map_err(io(&path, "syncing"))?;
        }
    }
    sync_dir(dir)
}
