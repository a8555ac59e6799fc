//! Checkpoints in an S3 bucket. A checkpoint is first written whole into
//! the local folder (see `store.rs`); its files are then uploaded, and its
//! metadata last:
//!
//! ```text
//! <prefix>/files/<sha-256>            each snapshot file and swapped-in plugin
//!                                     (see `plugins.rs`), named by its content
//! <prefix>/chk-<id>/_metadata.json    checkpoint <id>: it exists once this does
//! <prefix>/_lease.json                 who writes here now (see `lease.rs`)
//! ```
//!
//! Named by its content, a file that several checkpoints hold (RocksDB's
//! snapshot files never change) is uploaded once: each checkpoint uploads
//! only what the ones before it did not. A file's reference count is the
//! number of kept checkpoints whose metadata lists it: pruning deletes a
//! checkpoint's metadata first (the checkpoint is then gone, in one step),
//! then the files no kept checkpoint lists. Files that a failed checkpoint
//! or a crash left unlisted are deleted when the store is next opened, once
//! older than [`GRACE`].
//!
//! One instance writes a prefix: opening the store takes the prefix's lease
//! first (before it lists or deletes anything), and every write checks it.
//!
//! A savepoint in a bucket has the same layout, with its metadata at
//! `<prefix>/_metadata.json`.

use super::lease::{Lease, LeaseError, LeaseTiming};
use super::location::BucketUrl;
use super::metadata::Metadata;
use super::s3::{S3Settings, wait_for};
use super::store::{METADATA, StoreError, read_metadata};
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

/// Bytes buffered per file upload; a larger file goes up in parts of this
/// size, two at a time (at most `concurrency` × 3 × 8 MiB in memory).
const PART_BYTES: usize = 8 << 20;

/// How old a file no checkpoint lists must be before opening the store
/// deletes it: a younger one may be an upload of a checkpoint still being
/// written (by a holder whose lease lapsed, or whose clock is off), not
/// what a failed one left.
pub(super) const GRACE: Duration = Duration::from_secs(60 * 60);

/// The checkpoints under one bucket prefix.
pub struct RemoteCheckpoints {
    url: BucketUrl,
    client: Arc<dyn ObjectStore>,
    concurrency: usize,
    known: Mutex<Known>,
    /// The prefix's lease, held while checkpoints are written here (none
    /// for a savepoint, written or read once).
    lease: Option<Lease>,
    /// How old an unlisted file must be to be deleted at open.
    grace: Duration,
}

impl std::fmt::Debug for RemoteCheckpoints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteCheckpoints")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// What the store knows of the bucket and of the local files.
#[derive(Default)]
struct Known {
    /// The digests under `files/` that are in the bucket.
    uploaded: HashSet<String>,
    /// The digests each complete checkpoint lists, by id.
    kept: BTreeMap<u64, BTreeSet<String>>,
    /// The digests of the last checkpoint's local files, by identity: a
    /// file linked into the next checkpoint is not read again.
    hashed: HashMap<FileId, String>,
    /// A checkpoint failed since `uploaded` was last checked against a
    /// listing: a file it names may be gone (deleted by a run that shared
    /// the prefix, or a PUT that did not land), so the next checkpoint
    /// lists `files/` first and uploads again what is missing.
    stale: bool,
}

/// A local file's identity: the same inode, size and time are the same
/// bytes (snapshot files are never written in place).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The object key of a file with content digest `digest`.
fn file_key(digest: &str) -> String {
    format!("files/{digest}")
}

/// A metadata write that failed: why, and whether the key is known to hold
/// nothing (the write did not land).
struct PutFailed {
    error: StoreError,
    key_empty: bool,
}

/// The object key of checkpoint `id`'s metadata.
fn metadata_key(id: u64) -> String {
    format!("chk-{id:020}/{METADATA}")
}

/// Every file digest `metadata` lists: its snapshots' files and its
/// swapped-in plugins.
fn digests(metadata: &Metadata) -> BTreeSet<String> {
    let snapshots = metadata.snapshots.iter().flat_map(|s| s.digests.values());
    snapshots.chain(metadata.plugins.keys()).cloned().collect()
}

/// The SHA-256 of the file at `path`, in hex.
fn sha256_of(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0; 1 << 20];
    loop {
        match file.read(&mut buf)? {
            0 => return Ok(hex::encode(hasher.finalize())),
            n => hasher.update(&buf[..n]),
        }
    }
}

impl RemoteCheckpoints {
    /// A client of the prefix `url`, knowing nothing of it yet.
    fn connect(url: &BucketUrl, settings: &S3Settings) -> Result<Self, StoreError> {
        let client = settings
            .client(&url.bucket)
            .map_err(|message| StoreError::Remote {
                url: url.to_string(),
                what: "connecting".into(),
                message,
            })?;
        Ok(Self::with_client(url, client, settings.concurrency))
    }

    fn with_client(url: &BucketUrl, client: Arc<dyn ObjectStore>, concurrency: usize) -> Self {
        Self {
            url: url.clone(),
            client,
            concurrency: concurrency.max(1),
            known: Mutex::default(),
            lease: None,
            grace: GRACE,
        }
    }

    /// The checkpoints at `url`, for this process to write: takes the
    /// prefix's lease (refused while another instance holds it), lists the
    /// complete checkpoints, then deletes the files none of them lists
    /// that are older than [`GRACE`] (what a failed checkpoint or a crash
    /// left).
    pub fn open(url: &BucketUrl, settings: &S3Settings) -> Result<Self, StoreError> {
        Self::connect(url, settings)?
            .leased(LeaseTiming::default())?
            .load()
    }

    /// This store, holding the prefix's lease.
    fn leased(mut self, timing: LeaseTiming) -> Result<Self, StoreError> {
        self.lease = Some(Lease::acquire(self.client.clone(), &self.url, timing)?);
        Ok(self)
    }

    /// Whether this process may write to the prefix now (always, without a
    /// lease: a savepoint).
    fn check_lease(&self) -> Result<(), StoreError> {
        match &self.lease {
            Some(lease) => lease.check().map_err(StoreError::from),
            None => Ok(()),
        }
    }

    /// Why the run must stop, once another instance took the prefix's
    /// lease over.
    pub fn lease_lost(&self) -> Option<LeaseError> {
        self.lease.as_ref().and_then(Lease::lost)
    }

    /// Lists the complete checkpoints and deletes the unlisted files.
    fn load(self) -> Result<Self, StoreError> {
        let store = self;
        let listed = {
            let (client, prefix) = (store.client.clone(), store.prefix());
            wait_for(async move { client.list_with_delimiter(prefix.as_ref()).await })
                .map_err(|e| store.failed("listing the checkpoints", e))?
        };
        let mut kept = BTreeMap::new();
        for dir in listed.common_prefixes {
            let Some(id) = dir
                .filename()
                .and_then(|n| n.strip_prefix("chk-"))
                .and_then(|n| n.parse::<u64>().ok())
            else {
                continue;
            };
            let key = metadata_key(id);
            // A metadata object is written whole or not at all: one that
            // does not read back is refused, never skipped (its files would
            // be deleted and an older checkpoint used without a word).
            let unusable = |reason: String| StoreError::Remote {
                url: store.url.to_string(),
                what: format!("reading checkpoint {id}"),
                message: format!(
                    "{reason}; delete `{}` to resume from the checkpoint before it",
                    store.url.key(&key)
                ),
            };
            match store.get_metadata(&key)? {
                Some(Ok(m)) if m.id == id => {
                    kept.insert(id, digests(&m));
                }
                Some(Ok(m)) => return Err(unusable(format!("its metadata names checkpoint {}", m.id))),
                Some(Err(reason)) => return Err(unusable(reason)),
                None => {}
            }
        }
        let listed: BTreeSet<String> = kept.values().flatten().cloned().collect();
        let present = store.delete_unlisted_files(&listed)?;
        let missing = listed.difference(&present).count();
        if missing > 0 {
            tracing::warn!(url = %store.url, files = missing,
                "complete checkpoints list files the bucket does not hold: restoring them fails; new checkpoints upload those files again");
        }
        {
            let mut known = store.known.lock().expect("known lock");
            known.uploaded = listed.intersection(&present).cloned().collect();
            known.kept = kept;
        }
        Ok(store)
    }

    /// The bucket prefix.
    pub fn url(&self) -> &BucketUrl {
        &self.url
    }

    /// The prefix as an object path (`None`: the bucket's root).
    fn prefix(&self) -> Option<ObjectPath> {
        (!self.url.prefix.is_empty()).then(|| ObjectPath::from(self.url.prefix.as_str()))
    }

    /// The object path of `name` under the prefix.
    fn object(&self, name: &str) -> ObjectPath {
        ObjectPath::from(self.url.key(name))
    }

    fn failed(&self, what: &str, e: impl std::fmt::Display) -> StoreError {
        StoreError::Remote {
            url: self.url.to_string(),
            what: what.to_owned(),
            message: e.to_string(),
        }
    }

    /// The objects under `files/`.
    fn list_files(&self) -> Result<Vec<object_store::ObjectMeta>, StoreError> {
        let (client, files) = (self.client.clone(), self.object("files"));
        wait_for(async move { client.list(Some(&files)).try_collect::<Vec<_>>().await })
            .map_err(|e| self.failed("listing the snapshot files", e))
    }

    /// Deletes the objects under `files/` whose digest is not in `listed`
    /// and that are older than the grace period; the digests of the listed
    /// ones there.
    fn delete_unlisted_files(&self, listed: &BTreeSet<String>) -> Result<BTreeSet<String>, StoreError> {
        let (kept, unlisted): (Vec<_>, Vec<_>) = self
            .list_files()?
            .into_iter()
            .partition(|m| m.location.filename().is_some_and(|name| listed.contains(name)));
        let now_ms = crate::clock::now_ms();
        let grace_ms = i64::try_from(self.grace.as_millis()).unwrap_or(i64::MAX);
        let (old, young): (Vec<_>, Vec<_>) = unlisted
            .into_iter()
            .partition(|m| now_ms.saturating_sub(m.last_modified.timestamp_millis()) >= grace_ms);
        if !young.is_empty() {
            tracing::info!(url = %self.url, files = young.len(), grace = ?self.grace,
                "keeping snapshot files no checkpoint lists yet: younger than the grace period");
        }
        if !old.is_empty() {
            tracing::info!(url = %self.url, files = old.len(), "deleting snapshot files no checkpoint lists");
        }
        self.delete_all(old.into_iter().map(|m| m.location).collect())?;
        Ok(kept
            .iter()
            .filter_map(|m| m.location.filename().map(str::to_owned))
            .collect())
    }

    /// After a failed checkpoint: forgets the files a listing of `files/`
    /// no longer shows, so that the next checkpoint uploads them again.
    fn recheck_uploaded(&self) -> Result<(), StoreError> {
        let present: HashSet<String> = self
            .list_files()?
            .iter()
            .filter_map(|m| m.location.filename().map(str::to_owned))
            .collect();
        let mut known = self.known.lock().expect("known lock");
        let before = known.uploaded.len();
        known.uploaded.retain(|d| present.contains(d));
        let missing = before - known.uploaded.len();
        if missing > 0 {
            tracing::warn!(url = %self.url, files = missing,
                "snapshot files uploaded before are gone from the bucket: uploading them again");
        }
        known.stale = false;
        Ok(())
    }

    /// Deletes the objects `paths` (those already gone too).
    fn delete_all(&self, paths: Vec<ObjectPath>) -> Result<(), StoreError> {
        let (client, concurrency) = (self.client.clone(), self.concurrency);
        wait_for(async move {
            futures_util::stream::iter(paths)
                .map(|p| {
                    let client = client.clone();
                    async move {
                        match client.delete(&p).await {
                            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                            Err(e) => Err(format!("`{p}`: {e}")),
                        }
                    }
                })
                .buffer_unordered(concurrency)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<()>, String>>()
        })
        .map(drop)
        .map_err(|e| self.failed("deleting", e))
    }

    /// The metadata at `key` (under the prefix): `None` when it is not
    /// there, `Some(Err)` when it does not parse.
    fn get_metadata(&self, key: &str) -> Result<Option<Result<Metadata, String>>, StoreError> {
        let (client, path) = (self.client.clone(), self.object(key));
        let got = wait_for(async move {
            match client.get(&path).await {
                Ok(r) => r.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .map_err(|e| self.failed(&format!("reading `{key}`"), e))?;
        Ok(got
            .map(|bytes| serde_json::from_slice(&bytes).map_err(|e| format!("`{key}` does not parse: {e}"))))
    }

    /// The complete checkpoints, newest first.
    pub fn ids(&self) -> Vec<u64> {
        self.known
            .lock()
            .expect("known lock")
            .kept
            .keys()
            .rev()
            .copied()
            .collect()
    }

    /// Uploads checkpoint `metadata.id`, whole in the local folder `dir`:
    /// the files the bucket does not hold yet, then the metadata (with each
    /// file's digest recorded in it). Returns the bytes uploaded.
    /// Any failure makes the next checkpoint check which files the bucket
    /// still holds first.
    pub fn upload_checkpoint(&self, dir: &Path, metadata: &mut Metadata) -> Result<u64, StoreError> {
        let uploaded = self.try_upload_checkpoint(dir, metadata);
        if uploaded.is_err() {
            self.known.lock().expect("known lock").stale = true;
        }
        uploaded
    }

    fn try_upload_checkpoint(&self, dir: &Path, metadata: &mut Metadata) -> Result<u64, StoreError> {
        self.check_lease()?;
        if self.known.lock().expect("known lock").stale {
            self.recheck_uploaded()?;
        }
        let files_bytes = self.upload_files(dir, metadata)?;
        // The files took their time: the lease is checked again before the
        // commit point.
        self.check_lease()?;
        let id = metadata.id;
        // Listed as kept first: a PUT that fails here may still have been
        // stored, and its files must not be pruned meanwhile.
        self.known
            .lock()
            .expect("known lock")
            .kept
            .insert(id, digests(metadata));
        match self.put_metadata(&metadata_key(id), metadata) {
            Ok(bytes) => Ok(files_bytes + bytes),
            Err(failed) => {
                if failed.key_empty {
                    self.known.lock().expect("known lock").kept.remove(&id);
                }
                Err(failed.error)
            }
        }
    }

    /// Uploads the files of the checkpoint in `dir` that the bucket lacks,
    /// recording each one's digest in `metadata`; the bytes uploaded.
    fn upload_files(&self, dir: &Path, metadata: &mut Metadata) -> Result<u64, StoreError> {
        let todo = self.digest_files(dir, metadata)?;
        let bytes: u64 = todo.values().map(|(_, size)| size).sum();
        let jobs: Vec<(ObjectPath, PathBuf)> = todo
            .iter()
            .map(|(digest, (path, _))| (self.object(&file_key(digest)), path.clone()))
            .collect();
        let (client, concurrency) = (self.client.clone(), self.concurrency);
        // Every upload runs to its end (an abandoned one would leave parts
        // behind) before the first failure is reported.
        wait_for(async move {
            futures_util::stream::iter(jobs)
                .map(|(key, path)| upload_file(client.clone(), key, path))
                .buffer_unordered(concurrency)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<()>, String>>()
        })
        .map_err(|e| self.failed("uploading a snapshot file", e))?;
        self.known
            .lock()
            .expect("known lock")
            .uploaded
            .extend(todo.into_keys());
        Ok(bytes)
    }

    /// Writes `metadata` at `key` unless an object is there: the one
    /// commit point of a checkpoint or savepoint. When the key holds the
    /// same metadata already (a write whose answer was lost), that is it;
    /// other metadata there means another writer: refused.
    fn put_metadata(&self, key: &str, metadata: &Metadata) -> Result<u64, PutFailed> {
        let json = serde_json::to_vec_pretty(metadata).expect("metadata serialises");
        let bytes = json.len() as u64;
        let (client, path) = (self.client.clone(), self.object(key));
        let put = wait_for(async move {
            let options = object_store::PutOptions::from(object_store::PutMode::Create);
            client.put_opts(&path, PutPayload::from(json), options).await
        });
        let Err(e) = put else { return Ok(bytes) };
        let there = self.get_metadata(key);
        let error = match &there {
            Ok(Some(Ok(there))) if there == metadata => return Ok(bytes),
            Ok(Some(_)) => self.failed(
                &format!("writing `{key}`"),
                "another writer put it there first: two runs of the pipeline share this bucket prefix; stop one of them",
            ),
            _ => self.failed(&format!("writing `{key}`"), e),
        };
        Err(PutFailed {
            error,
            key_empty: matches!(there, Ok(None)),
        })
    }

    /// Records each snapshot file's digest in `metadata`, and checks each
    /// swapped-in plugin's against the one it is listed by; the files the
    /// bucket lacks, by digest, with their path and size.
    fn digest_files(
        &self,
        dir: &Path,
        metadata: &mut Metadata,
    ) -> Result<BTreeMap<String, (PathBuf, u64)>, StoreError> {
        let mut known = self.known.lock().expect("known lock");
        let mut hashed = HashMap::new();
        let mut todo = BTreeMap::new();
        let mut digest_of = |known: &Known, path: &Path| -> Result<String, StoreError> {
            let io = |e: std::io::Error| self.failed(&format!("reading `{}`", path.display()), e);
            let m = std::fs::metadata(path).map_err(io)?;
            let id = FileId {
                dev: m.dev(),
                ino: m.ino(),
                size: m.size(),
                mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            };
            let digest = match known.hashed.get(&id) {
                Some(d) => d.clone(),
                None => sha256_of(path).map_err(io)?,
            };
            hashed.insert(id, digest.clone());
            Ok(digest)
        };
        for s in &mut metadata.snapshots {
            s.digests.clear();
            for (name, size) in &s.files {
                let path = dir.join(&s.path).join(name);
                let digest = digest_of(&known, &path)?;
                if !known.uploaded.contains(&digest) {
                    todo.insert(digest.clone(), (path, *size));
                }
                s.digests.insert(name.clone(), digest);
            }
        }
        for (digest, size) in &metadata.plugins {
            let path = super::plugins::file_in(dir, digest);
            let actual = digest_of(&known, &path)?;
            if actual != *digest {
                return Err(self.failed(
                    &format!("uploading `{}`", path.display()),
                    format!("the plugin's SHA-256 is {actual}, not the {digest} it ran as: the plugin store's copy is corrupt"),
                ));
            }
            if !known.uploaded.contains(digest) {
                todo.insert(actual, (path, *size));
            }
        }
        // Only this checkpoint's files: the next one links most of them.
        known.hashed = hashed;
        Ok(todo)
    }

    /// Checkpoint `id`, downloaded into the local folder `target` unless
    /// that already holds it whole; its metadata, or why it cannot be used.
    pub fn fetch_checkpoint(&self, id: u64, target: &Path) -> Result<Metadata, String> {
        let metadata = self.fetch(&metadata_key(id), target)?;
        match metadata.id == id {
            true => Ok(metadata),
            false => Err(format!("its metadata names checkpoint {}", metadata.id)),
        }
    }

    /// The checkpoint whose metadata is at `key`, downloaded into `target`
    /// (replacing what is there unless it is the same checkpoint whole):
    /// every file (snapshot files and swapped-in plugins) checked against
    /// its size and digest before the folder is renamed into place.
    fn fetch(&self, key: &str, target: &Path) -> Result<Metadata, String> {
        let metadata = match self.get_metadata(key).map_err(|e| e.to_string())? {
            Some(parsed) => parsed?,
            None => return Err(format!("`{}` does not exist", self.url.key(key))),
        };
        if read_metadata(target).is_ok_and(|local| local == metadata) {
            return Ok(metadata);
        }
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let partial = target.with_file_name(format!("{name}.download"));
        let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} `{}`: {e}", p.display());
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| io("clearing", &partial, e))?;
        }
        // Made even when no snapshot needs a folder (no stateful operator).
        std::fs::create_dir_all(&partial).map_err(|e| io("creating", &partial, e))?;
        let mut jobs = Vec::new();
        for s in &metadata.snapshots {
            let folder = partial.join(&s.path);
            std::fs::create_dir_all(&folder).map_err(|e| io("creating", &folder, e))?;
            for (name, size) in &s.files {
                let digest = s
                    .digests
                    .get(name)
                    .ok_or_else(|| format!("snapshot `{}` lists `{name}` without its digest", s.path))?;
                let path = folder.join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io("creating", parent, e))?;
                }
                jobs.push((self.object(&file_key(digest)), path, *size, digest.clone()));
            }
        }
        for (digest, size) in &metadata.plugins {
            let path = super::plugins::file_in(&partial, digest);
            let folder = path.parent().expect("in a folder");
            std::fs::create_dir_all(folder).map_err(|e| io("creating", folder, e))?;
            jobs.push((self.object(&file_key(digest)), path, *size, digest.clone()));
        }
        let (client, concurrency) = (self.client.clone(), self.concurrency);
        wait_for(async move {
            futures_util::stream::iter(jobs)
                .map(|(key, path, size, digest)| download_file(client.clone(), key, path, size, digest))
                .buffer_unordered(concurrency)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<()>, String>>()
        })
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&partial);
            format!("downloading from `{}`: {e}", self.url)
        })?;
        let json = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
        std::fs::write(partial.join(METADATA), json).map_err(|e| io("writing into", &partial, e))?;
        if target.exists() {
            std::fs::remove_dir_all(target).map_err(|e| io("replacing", target, e))?;
        }
        std::fs::rename(&partial, target).map_err(|e| io("renaming into place", target, e))?;
        read_metadata(target)
    }

    /// Deletes the checkpoints beyond the newest `keep` except `committed`
    /// (metadata first), then the files no kept checkpoint lists. A failure
    /// is logged: what is left is deleted by the next prune or open.
    pub fn prune(&self, keep: usize, committed: u64) {
        if let Err(e) = self.check_lease() {
            tracing::warn!(error = %e, "not pruning old checkpoints without the lease");
            return;
        }
        let doomed: Vec<u64> = self
            .ids()
            .into_iter()
            .skip(keep)
            .filter(|&id| id != committed)
            .collect();
        let mut freed = BTreeSet::new();
        for id in doomed {
            if let Err(e) = self.delete_all(vec![self.object(&metadata_key(id))]) {
                tracing::warn!(checkpoint = id, error = %e, "could not delete an old checkpoint; the next prune tries again");
                return;
            }
            let mut known = self.known.lock().expect("known lock");
            freed.extend(known.kept.remove(&id).unwrap_or_default());
        }
        let unlisted: Vec<ObjectPath> = {
            let mut guard = self.known.lock().expect("known lock");
            let known = &mut *guard;
            let listed: BTreeSet<&String> = known.kept.values().flatten().collect();
            let unlisted: Vec<String> = freed.into_iter().filter(|d| !listed.contains(d)).collect();
            for d in &unlisted {
                // Forgotten before the delete: a later checkpoint uploads it
                // again rather than listing a file that may be gone.
                known.uploaded.remove(d);
            }
            unlisted.iter().map(|d| self.object(&file_key(d))).collect()
        };
        if let Err(e) = self.delete_all(unlisted) {
            tracing::warn!(error = %e, "could not delete the files of old checkpoints; the next open deletes them");
        }
    }

    /// The savepoint at the prefix `url` (written or read as a whole).
    pub fn savepoint(url: &BucketUrl, settings: &S3Settings) -> Result<Self, StoreError> {
        Self::connect(url, settings)
    }

    /// Writes the complete checkpoint in the local folder `dir` as the
    /// savepoint here: every file, then the metadata. Refused when a
    /// savepoint is here already.
    pub fn write_savepoint(&self, dir: &Path) -> Result<(), String> {
        if self.get_metadata(METADATA).map_err(|e| e.to_string())?.is_some() {
            return Err(format!("`{}` already holds a savepoint", self.url));
        }
        let mut metadata = read_metadata(dir)?;
        self.upload_files(dir, &mut metadata).map_err(|e| e.to_string())?;
        self.put_metadata(METADATA, &metadata)
            .map(drop)
            .map_err(|failed| failed.error.to_string())
    }

    /// The savepoint here, downloaded into the local folder `target`.
    pub fn read_savepoint(&self, target: &Path) -> Result<Metadata, String> {
        self.fetch(METADATA, target)
    }
}

/// Uploads the file at `path` to `key`: in one request, or in parts when
/// larger than [`PART_BYTES`].
async fn upload_file(client: Arc<dyn ObjectStore>, key: ObjectPath, path: PathBuf) -> Result<(), String> {
    let failed = |e: std::io::Error| format!("`{}`: {e}", path.display());
    let mut file = tokio::fs::File::open(&path).await.map_err(failed)?;
    let mut writer =
        object_store::buffered::BufWriter::with_capacity(client, key, PART_BYTES).with_max_concurrency(2);
    if let Err(e) = tokio::io::copy(&mut file, &mut writer).await {
        // No parts of a failed multipart upload are left behind. (A failed
        // `shutdown` cannot be aborted: its parts are the bucket's to
        // expire, with a lifecycle rule.)
        let _ = writer.abort().await;
        return Err(failed(e));
    }
    writer.shutdown().await.map_err(failed)
}

/// Downloads `key` into the file `path`, checking its size and digest.
async fn download_file(
    client: Arc<dyn ObjectStore>,
    key: ObjectPath,
    path: PathBuf,
    size: u64,
    digest: String,
) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("`{key}`: {e}");
    let mut stream = client.get(&key).await.map_err(|e| failed(&e))?.into_stream();
    let mut file = tokio::fs::File::create(&path).await.map_err(|e| failed(&e))?;
    let (mut hasher, mut got) = (Sha256::new(), 0u64);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| failed(&e))?;
        hasher.update(&chunk);
        got += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(|e| failed(&e))?;
    }
    file.flush().await.map_err(|e| failed(&e))?;
    if got != size {
        return Err(format!("`{key}` has {got} bytes, not {size}"));
    }
    if hex::encode(hasher.finalize()) != digest {
        return Err(format!("`{key}` does not match its digest: it is corrupt"));
    }
    file.sync_all().await.map_err(|e| failed(&e))
}

#[cfg(test)]
mod tests {
    //! Against `object_store`'s in-memory store; the S3 server is in the
    //! integration tests (tests/all/s3_checkpoints.rs).
    use super::*;
    use crate::checkpoint::SnapshotMeta;
    use object_store::memory::InMemory;

    fn store(client: &Arc<dyn ObjectStore>) -> RemoteCheckpoints {
        opened(client, GRACE, false).unwrap()
    }

    /// The store at `s3://b/p`, sparing unlisted files younger than
    /// `grace`, holding the prefix's lease if `leased`.
    fn opened(
        client: &Arc<dyn ObjectStore>,
        grace: Duration,
        leased: bool,
    ) -> Result<RemoteCheckpoints, StoreError> {
        let url = BucketUrl::parse("s3://b/p").unwrap().unwrap();
        let mut store = RemoteCheckpoints::with_client(&url, client.clone(), 2);
        store.grace = grace;
        if leased {
            store = store.leased(LeaseTiming::default())?;
        }
        store.load()
    }

    fn put_object(client: &Arc<dyn ObjectStore>, key: &str, bytes: &'static [u8]) {
        let (c, path) = (client.clone(), ObjectPath::from(key));
        wait_for(async move { c.put(&path, PutPayload::from_static(bytes)).await }).unwrap();
    }

    /// A checkpoint folder in `dir` with one snapshot of `files`.
    fn checkpoint(dir: &Path, id: u64, files: &[(&str, &[u8])]) -> (PathBuf, Metadata) {
        let folder = dir.join(format!("chk-{id}"));
        std::fs::create_dir_all(folder.join("op-w0")).unwrap();
        for (name, bytes) in files {
            std::fs::write(folder.join("op-w0").join(name), bytes).unwrap();
        }
        let metadata = Metadata {
            snapshots: vec![SnapshotMeta {
                operator: "op".into(),
                worker: 0,
                parallelism: 1,
                backend: "rocksdb".into(),
                path: "op-w0".into(),
                files: crate::checkpoint::file_sizes(&folder.join("op-w0")).unwrap(),
                digests: Default::default(),
                state_versions: None,
            }],
            ..Metadata::new(id, "p", "h", 128)
        };
        (folder, metadata)
    }

    fn objects(client: &Arc<dyn ObjectStore>) -> BTreeSet<String> {
        let client = client.clone();
        wait_for(async move { client.list(None).try_collect::<Vec<_>>().await })
            .unwrap()
            .into_iter()
            .map(|m| m.location.to_string())
            .collect()
    }

    #[test]
    fn shared_files_go_up_once_and_go_when_no_kept_checkpoint_lists_them() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let remote = store(&client);
        let dir = tempfile::tempdir().unwrap();
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa"), ("MANIFEST", b"m1")]);
        assert_eq!(
            remote.upload_checkpoint(&c1, &mut m1).unwrap() as usize,
            6 + serde_json::to_vec_pretty(&m1).unwrap().len()
        );
        let (c2, mut m2) = checkpoint(
            dir.path(),
            2,
            &[("1.sst", b"aaaa"), ("2.sst", b"bb"), ("MANIFEST", b"m2")],
        );
        let uploaded = remote.upload_checkpoint(&c2, &mut m2).unwrap() as usize;
        assert_eq!(
            uploaded,
            4 + serde_json::to_vec_pretty(&m2).unwrap().len(),
            "only 2.sst and MANIFEST"
        );
        let shared = m1.snapshots[0].digests["1.sst"].clone();
        assert_eq!(m2.snapshots[0].digests["1.sst"], shared);
        assert_eq!(objects(&client).len(), 2 + 4, "two metadata, four files");

        // Keep one: checkpoint 1 and the file only it lists go.
        remote.prune(1, 0);
        let left = objects(&client);
        assert_eq!(remote.ids(), [2]);
        assert!(!left.contains(&format!("p/{}", metadata_key(1))));
        assert!(left.contains(&format!("p/files/{shared}")));
        assert!(!left.contains(&format!("p/files/{}", m1.snapshots[0].digests["MANIFEST"])));
        assert_eq!(left.len(), 1 + 3);

        // A file pruned with its last checkpoint goes up again when needed.
        let (c4, mut m4) = checkpoint(dir.path(), 4, &[("MANIFEST", b"m1")]);
        let uploaded = remote.upload_checkpoint(&c4, &mut m4).unwrap() as usize;
        assert_eq!(uploaded, 2 + serde_json::to_vec_pretty(&m4).unwrap().len());
        assert!(objects(&client).contains(&format!("p/files/{}", m4.snapshots[0].digests["MANIFEST"])));

        // The committed checkpoint stays, however many come after it.
        let (c5, mut m5) = checkpoint(dir.path(), 5, &[("5.sst", b"c")]);
        remote.upload_checkpoint(&c5, &mut m5).unwrap();
        remote.prune(1, 2);
        assert_eq!(remote.ids(), [5, 2]);
    }

    /// [`checkpoint`] that ran the swapped-in plugin `bytes` (kept in its
    /// folder as a checkpoint keeps it); the plugin's digest.
    fn with_plugin(folder: &Path, metadata: &mut Metadata, bytes: &[u8]) -> String {
        let digest = hex::encode(Sha256::digest(bytes));
        let path = crate::checkpoint::plugin_in(folder, &digest);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, bytes).unwrap();
        metadata.plugins.insert(digest.clone(), bytes.len() as u64);
        digest
    }

    #[test]
    fn a_swapped_in_plugin_goes_up_once_comes_down_checked_and_goes_with_its_last_checkpoint() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let remote = store(&client);
        let dir = tempfile::tempdir().unwrap();
        let component: &[u8] = b"the swapped-in component";
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa")]);
        let digest = with_plugin(&c1, &mut m1, component);
        let uploaded = remote.upload_checkpoint(&c1, &mut m1).unwrap() as usize;
        assert_eq!(
            uploaded,
            4 + component.len() + serde_json::to_vec_pretty(&m1).unwrap().len()
        );
        let plugin_key = format!("p/files/{digest}");
        assert!(objects(&client).contains(&plugin_key));
        // The next checkpoint lists it too: not uploaded again.
        let (c2, mut m2) = checkpoint(dir.path(), 2, &[("1.sst", b"aaaa")]);
        with_plugin(&c2, &mut m2, component);
        let uploaded = remote.upload_checkpoint(&c2, &mut m2).unwrap() as usize;
        assert_eq!(uploaded, serde_json::to_vec_pretty(&m2).unwrap().len());

        // A new machine gets it with the checkpoint, checked like any file.
        let fresh = tempfile::tempdir().unwrap();
        let target = fresh.path().join("chk-2");
        assert_eq!(store(&client).fetch_checkpoint(2, &target).unwrap(), m2);
        assert_eq!(
            std::fs::read(crate::checkpoint::plugin_in(&target, &digest)).unwrap(),
            component
        );
        put_object(&client, &plugin_key, b"the swapped-in c0mponent");
        let e = store(&client)
            .fetch_checkpoint(2, &fresh.path().join("other"))
            .unwrap_err();
        assert!(e.contains("does not match its digest"), "{e}");
        put_object(&client, &plugin_key, b"the swapped-in component");

        // Kept while a kept checkpoint lists it; then pruned with the last.
        remote.prune(1, 0);
        assert!(objects(&client).contains(&plugin_key));
        let (c3, mut m3) = checkpoint(dir.path(), 3, &[("1.sst", b"aaaa")]);
        remote.upload_checkpoint(&c3, &mut m3).unwrap();
        remote.prune(1, 0);
        assert_eq!(remote.ids(), [3]);
        assert!(!objects(&client).contains(&plugin_key));
        // Nor is it deleted at open as a file no checkpoint lists while one
        // does.
        let (c4, mut m4) = checkpoint(dir.path(), 4, &[("1.sst", b"aaaa")]);
        with_plugin(&c4, &mut m4, component);
        remote.upload_checkpoint(&c4, &mut m4).unwrap();
        opened(&client, Duration::ZERO, false).unwrap();
        assert!(objects(&client).contains(&plugin_key));
    }

    #[test]
    fn a_plugin_whose_bytes_are_not_its_digest_is_never_uploaded() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let remote = store(&client);
        let dir = tempfile::tempdir().unwrap();
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa")]);
        let digest = with_plugin(&c1, &mut m1, b"component");
        std::fs::write(crate::checkpoint::plugin_in(&c1, &digest), b"c0mponent").unwrap();
        let e = remote.upload_checkpoint(&c1, &mut m1).unwrap_err().to_string();
        assert!(e.contains("the plugin store's copy is corrupt"), "{e}");
        assert!(remote.ids().is_empty());
        assert!(!objects(&client).iter().any(|k| k.ends_with(METADATA)));
    }

    #[test]
    fn a_savepoint_is_written_once_and_read_back_whole() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let url = BucketUrl::parse("s3://b/sp").unwrap().unwrap();
        let savepoint = RemoteCheckpoints::with_client(&url, client.clone(), 2);
        let dir = tempfile::tempdir().unwrap();
        let (c1, m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa")]);
        std::fs::write(c1.join(METADATA), serde_json::to_vec(&m1).unwrap()).unwrap();
        savepoint.write_savepoint(&c1).unwrap();
        let e = savepoint.write_savepoint(&c1).unwrap_err();
        assert!(e.contains("already holds a savepoint"), "{e}");
        let read = savepoint.read_savepoint(&dir.path().join("restored")).unwrap();
        assert_eq!(
            (read.id, read.snapshots[0].files.clone()),
            (1, m1.snapshots[0].files.clone())
        );
        assert_eq!(
            std::fs::read(dir.path().join("restored/op-w0/1.sst")).unwrap(),
            b"aaaa"
        );
    }

    #[test]
    fn metadata_another_writer_put_first_is_never_overwritten() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let (first, second) = (store(&client), store(&client));
        let dir = tempfile::tempdir().unwrap();
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa")]);
        first.upload_checkpoint(&c1, &mut m1).unwrap();
        let (c1b, mut m1b) = checkpoint(&dir.path().join("other"), 1, &[("1.sst", b"bbbb")]);
        let e = second.upload_checkpoint(&c1b, &mut m1b).unwrap_err().to_string();
        assert!(e.contains("another writer put it there first"), "{e}");
        assert_eq!(
            store(&client)
                .fetch_checkpoint(1, &dir.path().join("back"))
                .unwrap(),
            m1
        );
    }

    #[test]
    fn files_no_checkpoint_lists_are_deleted_at_open_past_the_grace_period_and_listed_ones_kept() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let dir = tempfile::tempdir().unwrap();
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa")]);
        store(&client).upload_checkpoint(&c1, &mut m1).unwrap();
        // A failed checkpoint's file, uploaded without its metadata, or one
        // of a checkpoint still being written.
        put_object(&client, "p/files/0123", b"x");
        assert_eq!(store(&client).ids(), [1]);
        assert!(
            objects(&client).contains("p/files/0123"),
            "younger than the grace period: kept"
        );
        let reopened = opened(&client, Duration::ZERO, false).unwrap();
        assert_eq!(reopened.ids(), [1]);
        assert_eq!(objects(&client).len(), 2, "the metadata and the listed file");
        // A file the bucket has is not uploaded again after a restart.
        let (c2, mut m2) = checkpoint(dir.path(), 2, &[("1.sst", b"aaaa")]);
        let uploaded = reopened.upload_checkpoint(&c2, &mut m2).unwrap() as usize;
        assert_eq!(uploaded, serde_json::to_vec_pretty(&m2).unwrap().len());
    }

    #[test]
    fn a_second_store_on_a_leased_prefix_is_refused_before_it_deletes_anything() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let first = opened(&client, GRACE, true).unwrap();
        // The first one's upload in flight: its metadata is not written yet.
        put_object(&client, "p/files/0123", b"x");
        let e = opened(&client, Duration::ZERO, true).unwrap_err().to_string();
        assert!(
            e.contains("`s3://b/p` is in use") && e.contains(&format!("process {}", std::process::id())),
            "{e}"
        );
        assert!(objects(&client).contains("p/files/0123"));
        first.check_lease().unwrap();
        assert!(first.lease_lost().is_none());
        // Released with the store: the next one opens at once.
        drop(first);
        opened(&client, GRACE, true).unwrap();
    }

    #[test]
    fn after_a_failed_checkpoint_the_files_the_bucket_lost_are_uploaded_again() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let remote = store(&client);
        let dir = tempfile::tempdir().unwrap();
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa")]);
        remote.upload_checkpoint(&c1, &mut m1).unwrap();
        // Deleted behind the store's back (as by a run sharing the prefix),
        // then a checkpoint whose metadata PUT fails.
        let digest = m1.snapshots[0].digests["1.sst"].clone();
        let c = client.clone();
        let lost = ObjectPath::from(format!("p/files/{digest}"));
        wait_for(async move { c.delete(&lost).await }).unwrap();
        put_object(&client, &format!("p/{}", metadata_key(2)), b"{}");
        let (c2, mut m2) = checkpoint(dir.path(), 2, &[("1.sst", b"aaaa")]);
        remote.upload_checkpoint(&c2, &mut m2).unwrap_err();
        // The next one uploads the file again, and restores.
        let (c3, mut m3) = checkpoint(dir.path(), 3, &[("1.sst", b"aaaa")]);
        let uploaded = remote.upload_checkpoint(&c3, &mut m3).unwrap() as usize;
        assert_eq!(uploaded, 4 + serde_json::to_vec_pretty(&m3).unwrap().len());
        let fresh = tempfile::tempdir().unwrap();
        assert_eq!(
            remote.fetch_checkpoint(3, &fresh.path().join("chk-3")).unwrap(),
            m3
        );
    }

    #[test]
    fn a_download_is_checked_file_by_file_before_it_is_used() {
        let client: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let remote = store(&client);
        let dir = tempfile::tempdir().unwrap();
        let (c1, mut m1) = checkpoint(dir.path(), 1, &[("1.sst", b"aaaa"), ("CURRENT", b"MANIFEST-1\n")]);
        remote.upload_checkpoint(&c1, &mut m1).unwrap();
        let fresh = tempfile::tempdir().unwrap();
        let target = fresh.path().join("chk-1");
        assert_eq!(remote.fetch_checkpoint(1, &target).unwrap(), m1);
        assert_eq!(std::fs::read(target.join("op-w0/1.sst")).unwrap(), b"aaaa");
        let digest = m1.snapshots[0].digests["1.sst"].clone();
        let put = |bytes: &'static [u8]| {
            let (c, path) = (client.clone(), ObjectPath::from(format!("p/files/{digest}")));
            wait_for(async move { c.put(&path, PutPayload::from_static(bytes)).await }).unwrap();
        };
        put(b"aaab");
        // Whole already: not downloaded again.
        assert_eq!(remote.fetch_checkpoint(1, &target).unwrap(), m1);
        let other = fresh.path().join("other");
        let e = remote.fetch_checkpoint(1, &other).unwrap_err();
        assert!(e.contains("does not match its digest"), "{e}");
        assert!(!other.exists(), "nothing half-downloaded is left in place");
        assert!(!fresh.path().join("other.download").exists());
        put(b"aa");
        let e = remote.fetch_checkpoint(1, &other).unwrap_err();
        assert!(e.contains("has 2 bytes, not 4"), "{e}");
        let e = remote.fetch_checkpoint(7, &other).unwrap_err();
        assert!(e.contains("does not exist"), "{e}");
    }
}
