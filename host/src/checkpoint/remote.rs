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

mod fetch;

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

#[cfg(test)]
mod tests;
