//! Where checkpoints live: one folder per checkpoint under the pipeline's
//! checkpoint directory, made visible only when complete.
//!
//! ```text
//! <dir>/chk-00000000000000000007/      a complete checkpoint
//!        _metadata.json                what it holds (written last)
//!        <stage>-<operator>-<worker>/  one snapshot per stateful worker
//!        plugins/<digest>.wasm         each swapped-in plugin it ran
//! <dir>/chk-….tmp/                     one being written (never read)
//! <dir>/LATEST                         the id of the newest complete one
//! ```
//!
//! A checkpoint is written into `chk-<id>.tmp`, every file fsynced, its
//! metadata written last, the folder renamed to `chk-<id>`, and then
//! `LATEST` replaced by an atomic rename. Reading starts from `LATEST` and
//! falls back, newest first, to any other complete folder whose metadata
//! reads back; a partial or corrupt one is skipped with a log line.
//!
//! Old checkpoints are pruned by renaming them to `chk-<id>.del` first (one
//! atomic step: a checkpoint is whole or gone) and deleting the renamed
//! folder after; what a crash left half-deleted is removed at the next
//! open. The checkpoint whose output the sink committed last is never
//! pruned, however many checkpoints after it failed to commit.
//!
//! With a bucket (`[checkpoint] path = "s3://…"`), the local folder is the
//! staging area: a checkpoint is complete once its files and then its
//! metadata are in the bucket (see `remote.rs`), before it is renamed into
//! place locally; the bucket says which checkpoints exist, and one the
//! local folder does not hold whole is downloaded before it is read.

use super::CheckpointSettings;
use super::metadata::Metadata;
use super::remote::RemoteCheckpoints;
use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    /// A request to the bucket failed.
    #[error("checkpoint store `{url}`: {what}: {message}")]
    Remote {
        /// The bucket prefix.
        url: String,
        /// What was being done.
        what: String,
        /// What failed.
        message: String,
    },
    /// The bucket prefix's lease is held by another instance, or was lost
    /// (its message names the prefix; shown once, not as a chained source).
    #[error(transparent)]
    Lease(#[from] super::lease::LeaseError),
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
    /// The checkpoint whose output the sink committed last (0: none), which
    /// pruning keeps: a restart resumes from exactly that one.
    committed: Arc<AtomicU64>,
    /// The bucket the checkpoints go to, if not only the folder.
    remote: Option<Arc<RemoteCheckpoints>>,
}

/// A checkpoint made visible.
#[derive(Debug)]
pub struct Completed {
    /// Its local folder.
    pub path: PathBuf,
    /// Bytes uploaded to the bucket for it (`None`: no bucket).
    pub uploaded_bytes: Option<u64>,
}

/// A checkpoint's metadata file (object) name.
pub(super) const METADATA: &str = "_metadata.json";
const LATEST: &str = "LATEST";
const DELETING: &str = ".del";

impl CheckpointStore {
    /// The store in `dir` (created when missing), keeping the newest `keep`
    /// complete checkpoints; removes what an interrupted prune left.
    pub fn open(dir: &Path, keep: usize) -> Result<Self, StoreError> {
        fs::create_dir_all(dir).map_err(io(dir, "creating"))?;
        for entry in fs::read_dir(dir).map_err(io(dir, "listing"))?.flatten() {
            let path = entry.path();
            if path.to_string_lossy().ends_with(DELETING) {
                fs::remove_dir_all(&path).map_err(io(&path, "removing a pruned checkpoint"))?;
            }
        }
        Ok(Self {
            dir: dir.to_owned(),
            keep: keep.max(1),
            committed: Arc::default(),
            remote: None,
        })
    }

    /// The store `settings` describe: the folder, and the bucket when the
    /// checkpoints go to one (whose checkpoints are listed, and whose
    /// unlisted files are deleted).
    pub fn open_settings(settings: &CheckpointSettings) -> Result<Self, StoreError> {
        let mut store = Self::open(&settings.dir, settings.keep)?;
        if let Some(url) = &settings.bucket {
            store.remote = Some(Arc::new(RemoteCheckpoints::open(url, &settings.s3)?));
        }
        Ok(store)
    }

    /// Where the checkpoints are, for messages: the bucket prefix, or the
    /// folder.
    pub fn location(&self) -> String {
        match &self.remote {
            Some(r) => r.url().to_string(),
            None => self.dir.display().to_string(),
        }
    }

    /// Why the run must stop, once another instance took the bucket
    /// prefix's lease over (`None` while this run holds it, or without a
    /// bucket).
    pub fn lease_lost(&self) -> Option<super::lease::LeaseError> {
        self.remote.as_ref().and_then(|r| r.lease_lost())
    }

    /// Checkpoint `id`'s output is committed by the sink: pruning keeps it
    /// until a newer one is.
    pub fn set_committed(&self, id: u64) {
        self.committed.fetch_max(id, Ordering::AcqRel);
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
    /// visible: fsyncs its files, uploads it to the bucket (if any), writes
    /// its metadata, renames it, points `LATEST` at it, and drops the
    /// checkpoints beyond the newest `keep`.
    pub fn complete(&self, tmp: &Path, mut metadata: Metadata) -> Result<Completed, StoreError> {
        sync_tree(tmp)?;
        let uploaded_bytes = match &self.remote {
            Some(remote) => Some(remote.upload_checkpoint(tmp, &mut metadata)?),
            None => None,
        };
        let meta_path = tmp.join(METADATA);
        write_synced(
            &meta_path,
            &serde_json::to_vec_pretty(&metadata).expect("metadata serialises"),
        )?;
        sync_dir(tmp)?;
        let done = self.complete_dir(metadata.id);
        fs::rename(tmp, &done).map_err(io(&done, "renaming into place"))?;
        let latest_tmp = self.dir.join(format!("{LATEST}.tmp"));
        write_synced(&latest_tmp, metadata.id.to_string().as_bytes())?;
        fs::rename(&latest_tmp, self.dir.join(LATEST)).map_err(io(&self.dir, "replacing LATEST"))?;
        sync_dir(&self.dir)?;
        self.prune()?;
        if let Some(remote) = &self.remote {
            remote.prune(self.keep, self.committed.load(Ordering::Acquire));
        }
        Ok(Completed {
            path: done,
            uploaded_bytes,
        })
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
        let remote = self.remote.as_ref().and_then(|r| r.ids().first().copied());
        let local = fs::read_dir(&self.dir)
            .map_err(io(&self.dir, "listing"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_prefix("chk-")?;
                id.strip_suffix(".tmp").unwrap_or(id).parse().ok()
            })
            .max();
        Ok(local.max(remote).unwrap_or(0))
    }

    /// The ids of the complete checkpoints (in the bucket, if there is
    /// one), newest first.
    pub fn complete_ids(&self) -> Result<Vec<u64>, StoreError> {
        if let Some(remote) = &self.remote {
            return Ok(remote.ids());
        }
        self.local_ids()
    }

    /// The ids of the complete checkpoint folders, newest first.
    fn local_ids(&self) -> Result<Vec<u64>, StoreError> {
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

    /// Drops the complete checkpoints beyond the newest `keep`, except the
    /// committed one.
    fn prune(&self) -> Result<(), StoreError> {
        let committed = self.committed.load(Ordering::Acquire);
        for id in self.local_ids()?.into_iter().skip(self.keep) {
            if id == committed {
                continue;
            }
            let dir = self.complete_dir(id);
            let doomed = self.dir.join(format!("chk-{id:020}{DELETING}"));
            fs::rename(&dir, &doomed).map_err(io(&dir, "renaming an old checkpoint away"))?;
            sync_dir(&self.dir)?;
            fs::remove_dir_all(&doomed).map_err(io(&doomed, "removing an old checkpoint"))?;
        }
        Ok(())
    }

    /// Checkpoint `id` with its folder, when it is complete and reads back
    /// whole (downloaded from the bucket when the folder lacks it); else
    /// why not.
    pub fn read(&self, id: u64) -> Result<(PathBuf, Metadata), String> {
        let dir = self.complete_dir(id);
        if let Some(remote) = &self.remote {
            if !remote.ids().contains(&id) {
                return Err(format!("`{}` holds no complete checkpoint {id}", remote.url()));
            }
            return remote.fetch_checkpoint(id, &dir).map(|m| (dir, m));
        }
        if !dir.is_dir() {
            return Err(format!("`{}` does not exist", dir.display()));
        }
        match read_metadata(&dir)? {
            m if m.id == id => Ok((dir, m)),
            m => Err(format!("its metadata names checkpoint {}", m.id)),
        }
    }

    /// The newest complete checkpoint whose metadata reads back, with its
    /// folder; `None` when there is none.
    pub fn latest(&self) -> Result<Option<(PathBuf, Metadata)>, StoreError> {
        if let Some(remote) = &self.remote
            && remote.ids().is_empty()
            && let Some(local) = self.local_ids()?.first()
        {
            return Err(StoreError::Remote {
                url: self.location(),
                what: "resuming".into(),
                message: format!(
                    "the bucket holds no checkpoint, but the local folder `{}` does (the newest: {local}), as when `path` named that folder before: resuming from the bucket would start over. Start over knowingly with `mailer run --fresh`, or give the folder as `path` again",
                    self.dir.display()
                ),
            });
        }
        let pointed: Option<u64> = match self.remote {
            Some(_) => None,
            None => fs::read_to_string(self.dir.join(LATEST))
                .ok()
                .and_then(|s| s.trim().parse().ok()),
        };
        let mut ids = self.complete_ids()?;
        if let Some(p) = pointed {
            ids.retain(|&id| id != p);
            ids.insert(0, p);
        }
        for id in ids {
            match self.read(id) {
                Ok(found) => return Ok(Some(found)),
                // Never an older one because a download failed: the run
                // stops with the reason instead.
                Err(message) if self.remote.is_some() => {
                    return Err(StoreError::Remote {
                        url: self.location(),
                        what: format!("reading checkpoint {id}, the newest"),
                        message: format!(
                            "{message}; to resume from an older one knowingly, run with `--from-checkpoint <id>`"
                        ),
                    });
                }
                Err(reason) => tracing::warn!(path = %self.location(), checkpoint = id, %reason,
                    "skipping a partial or corrupt checkpoint; trying the one before"),
            }
        }
        Ok(None)
    }
}

/// The metadata of the checkpoint in `dir`, checked: it parses, and every
/// snapshot and plugin it lists is there.
pub fn read_metadata(dir: &Path) -> Result<Metadata, String> {
    let bytes = fs::read(dir.join(METADATA)).map_err(|e| format!("no readable {METADATA}: {e}"))?;
    let m: Metadata =
        serde_json::from_slice(&bytes).map_err(|e| format!("{METADATA} does not parse: {e}"))?;
    for s in &m.snapshots {
        let path = dir.join(&s.path);
        // Every file at its size; a memory snapshot's checksum besides.
        let complete = snapshot_files_whole(&path, &s.files).and_then(|()| match s.backend.as_str() {
            "memory" => {
                crate::state::snapshot::read_entries(&path, &mut |_, _| Ok(())).map_err(|e| e.to_string())
            }
            _ if s.files.is_empty() && !path.join("CURRENT").is_file() => {
                Err("no RocksDB `CURRENT` file".to_owned())
            }
            _ => Ok(()),
        });
        complete.map_err(|reason| format!("snapshot `{}` is incomplete: {reason}", s.path))?;
    }
    snapshot_files_whole(dir, &super::plugins::files(&m))
        .map_err(|reason| format!("a swapped-in plugin it ran is missing: {reason}"))?;
    Ok(m)
}

/// Whether every file a snapshot listed is in `dir` at its size.
fn snapshot_files_whole(dir: &Path, files: &std::collections::BTreeMap<String, u64>) -> Result<(), String> {
    for (name, size) in files {
        match fs::metadata(dir.join(name)) {
            Ok(m) if m.len() == *size => {}
            Ok(m) => return Err(format!("`{name}` has {} bytes, not {size}", m.len())),
            Err(e) => return Err(format!("`{name}`: {e}")),
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(id: u64) -> Metadata {
        Metadata::new(id, "p", "h", 128)
    }

    fn complete(store: &CheckpointStore, id: u64) {
        let tmp = store.begin(id).unwrap();
        store.complete(&tmp, metadata(id)).unwrap();
    }

    #[test]
    fn pruning_keeps_the_newest_and_the_committed_one_whatever_came_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 2).unwrap();
        complete(&store, 1);
        store.set_committed(1);
        // Commits failed from here on: checkpoints pile up after 1.
        for id in 2..=6 {
            complete(&store, id);
        }
        assert_eq!(store.complete_ids().unwrap(), [6, 5, 1]);
        assert_eq!(store.read(1).unwrap().1.id, 1);
        store.set_committed(5);
        complete(&store, 7);
        assert_eq!(store.complete_ids().unwrap(), [7, 6, 5]);
    }

    #[test]
    fn what_an_interrupted_prune_left_is_removed_and_never_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 3).unwrap();
        complete(&store, 1);
        complete(&store, 2);
        // A crash between the rename and the delete of checkpoint 1.
        let doomed = dir.path().join(format!("chk-{:020}{DELETING}", 1));
        fs::rename(store.complete_dir(1), &doomed).unwrap();
        assert_eq!(store.complete_ids().unwrap(), [2]);
        let reopened = CheckpointStore::open(dir.path(), 3).unwrap();
        assert!(!doomed.exists());
        assert_eq!(reopened.latest().unwrap().unwrap().1.id, 2);
    }

    #[test]
    fn a_checkpoint_reads_back_only_with_the_swapped_in_plugins_it_lists() {
        let dir = tempfile::tempdir().unwrap();
        let store = CheckpointStore::open(dir.path(), 3).unwrap();
        let tmp = store.begin(1).unwrap();
        let plugin = crate::checkpoint::plugin_in(&tmp, "d1");
        fs::create_dir_all(plugin.parent().unwrap()).unwrap();
        fs::write(&plugin, b"wasm").unwrap();
        let mut m = metadata(1);
        m.plugins.insert("d1".into(), 4);
        let done = store.complete(&tmp, m).unwrap().path;
        assert_eq!(store.read(1).unwrap().1.plugins["d1"], 4);
        let plugin = crate::checkpoint::plugin_in(&done, "d1");
        fs::write(&plugin, b"was").unwrap();
        let e = store.read(1).unwrap_err();
        assert!(
            e.contains("a swapped-in plugin it ran is missing") && e.contains("has 3 bytes, not 4"),
            "{e}"
        );
        fs::remove_file(&plugin).unwrap();
        assert!(store.latest().unwrap().is_none(), "never read without it");
    }

    #[test]
    fn a_snapshot_file_of_another_size_than_listed_fails_the_check() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("000007.sst"), b"abcdef").unwrap();
        let mut files = std::collections::BTreeMap::new();
        files.insert("000007.sst".to_owned(), 6);
        snapshot_files_whole(dir.path(), &files).unwrap();
        files.insert("000007.sst".to_owned(), 9);
        let e = snapshot_files_whole(dir.path(), &files).unwrap_err();
        assert!(e.contains("has 6 bytes, not 9"), "{e}");
        files.insert("MANIFEST-000001".to_owned(), 1);
        assert!(snapshot_files_whole(dir.path(), &files).is_err());
    }
}
