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
