//! Checkpoints to an S3 bucket on loopback (moto's server), beside the local
//! `checkpoint-5m-*` figures: one worker's backend with 5M keys, a first
//! checkpoint uploaded whole, 1 % of the keys changed and a second
//! (incremental) one, then a download of the second into an empty folder
//! (a new machine) and a restore from it.

use crate::common::{env_or, peak_rss_kib, rocks_dir};
use crate::state::key;
use mailer::checkpoint::{
    BucketUrl, CheckpointSettings, CheckpointStore, Metadata, S3Settings, SnapshotMeta, file_sizes,
};
use mailer::state::{BackendKind, SnapshotSource, StateBackend};
use mailer_test_support::s3::{ACCESS_KEY_ID, S3Server, SECRET_ACCESS_KEY};
use std::path::Path;
use std::time::{Duration, Instant};

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    vec![
        (
            "checkpoint-5m-memory-s3".to_owned(),
            Box::new(|| checkpoint("checkpoint-5m-memory-s3", BackendKind::Memory)),
        ),
        (
            "checkpoint-5m-rocksdb-s3".to_owned(),
            Box::new(|| checkpoint("checkpoint-5m-rocksdb-s3", rocks_dir("checkpoint-5m-rocksdb-s3"))),
        ),
    ]
}

const SNAPSHOT: &str = "counts-w0";

fn settings(server: &S3Server, dir: &Path) -> CheckpointSettings {
    CheckpointSettings {
        interval: Duration::from_secs(3600),
        dir: dir.to_owned(),
        bucket: BucketUrl::parse("s3://bench/checkpoints").unwrap(),
        s3: S3Settings {
            endpoint: Some(server.endpoint()),
            access_key_id: Some(ACCESS_KEY_ID.into()),
            secret_access_key: Some(SECRET_ACCESS_KEY.into()),
            ..Default::default()
        },
        keep: 3,
        tolerable_failures: 0,
        timeout: mailer::manifest::defaults::checkpoint_timeout(),
    }
}

/// Takes checkpoint `id` of `state` into `store`: the snapshot, then the
/// upload; milliseconds and bytes uploaded.
fn take(store: &CheckpointStore, state: &mut dyn StateBackend, kind: &BackendKind, id: u64) -> (f64, u64) {
    let started = Instant::now();
    let tmp = store.begin(id).unwrap();
    state.snapshot(&tmp.join(SNAPSHOT)).unwrap();
    let metadata = Metadata {
        snapshots: vec![SnapshotMeta {
            operator: "counts".into(),
            worker: 0,
            parallelism: 1,
            backend: kind.name().to_owned(),
            path: SNAPSHOT.into(),
            files: file_sizes(&tmp.join(SNAPSHOT)).unwrap(),
            digests: Default::default(),
            state_versions: None,
        }],
        ..Metadata::new(id, "bench", "", 128)
    };
    let done = store.complete(&tmp, metadata).unwrap();
    (
        started.elapsed().as_secs_f64() * 1e3,
        done.uploaded_bytes.unwrap(),
    )
}

fn checkpoint(name: &str, kind: BackendKind) {
    let n: u64 = env_or("MAILER_BENCH_KEYS", 5_000_000);
    let server = S3Server::start("bench");
    let scratch = std::env::temp_dir().join(format!("mailer-bench-{name}-checkpoints"));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut state: Box<dyn StateBackend> = kind.open("bench", 0).unwrap();
    for i in 0..n {
        state.put(&key(i), &[7u8; 16]).unwrap();
    }
    let store = CheckpointStore::open_settings(&settings(&server, &scratch.join("local"))).unwrap();
    let (first_ms, first_bytes) = take(&store, state.as_mut(), &kind, 1);
    for i in (0..n).step_by(100) {
        state.put(&key(i), &[8u8; 16]).unwrap();
    }
    let (second_ms, second_bytes) = take(&store, state.as_mut(), &kind, 2);
    drop(state);
    // Gone, as the machine it ran on: a second store on the prefix while it
    // lives would be refused (its lease).
    drop(store);

    // A new machine: nothing local.
    let started = Instant::now();
    let fresh = CheckpointStore::open_settings(&settings(&server, &scratch.join("fresh"))).unwrap();
    let (dir, _) = fresh.read(2).unwrap();
    let download_ms = started.elapsed().as_secs_f64() * 1e3;
    let sources = [SnapshotSource {
        path: dir.join(SNAPSHOT),
        backend: kind.name().to_owned(),
        same_key_groups: true,
    }];
    let restored = kind.restore("restored", 0, &sources, &|_| true).unwrap();
    let restore_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(restored.get(&key(100)).unwrap(), Some(vec![8u8; 16]));
    assert_eq!(restored.get(&key(n - 1)).unwrap().map(|v| v.len()), Some(16));
    println!(
        "bench {name} records={n} secs={:.3} rec_per_s={:.0} checkpoint_ms={first_ms:.1} checkpoint_uploaded_kib={} incremental_checkpoint_ms={second_ms:.1} incremental_uploaded_kib={} download_ms={download_ms:.1} restore_ms={restore_ms:.1} peak_rss_kib={}",
        second_ms / 1e3,
        n as f64 / (second_ms / 1e3),
        first_bytes / 1024,
        second_bytes / 1024,
        peak_rss_kib(),
    );
    let _ = std::fs::remove_dir_all(&scratch);
}
