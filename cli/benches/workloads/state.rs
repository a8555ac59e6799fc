//! The state backends alone: 5M keys with 16-byte values written, then 1M
//! random point reads: writes/s, put and get latency (the backend's calls
//! alone), peak RSS, and (for RocksDB) the size on disk.

use crate::common::{env_or, peak_rss_kib, rocks_dir};
use mailer::connectors::splitmix64;
use mailer::state::{BackendKind, SnapshotSource, StateBackend, keys};
use std::time::Instant;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    vec![
        (
            "state-memory-5m".to_owned(),
            Box::new(|| run("state-memory-5m", BackendKind::Memory)),
        ),
        (
            "state-rocksdb-5m".to_owned(),
            Box::new(|| run("state-rocksdb-5m", rocks_dir("state-rocksdb-5m"))),
        ),
        (
            "checkpoint-5m-memory".to_owned(),
            Box::new(|| checkpoint("checkpoint-5m-memory", BackendKind::Memory)),
        ),
        (
            "checkpoint-5m-rocksdb".to_owned(),
            Box::new(|| checkpoint("checkpoint-5m-rocksdb", rocks_dir("checkpoint-5m-rocksdb"))),
        ),
    ]
}

/// 5M keys written; then a snapshot (a checkpoint's part of one worker), 1 %
/// of the keys changed and a second snapshot (incremental for RocksDB), and
/// a restore of the second: durations, and the second's size on disk.
fn checkpoint(name: &str, kind: BackendKind) {
    let n: u64 = env_or("MAILER_BENCH_KEYS", 5_000_000);
    let mut state: Box<dyn StateBackend> = kind.open("bench", 0).unwrap();
    for first in (0..n).step_by(CHUNK as usize) {
        for i in first..(first + CHUNK).min(n) {
            state.put(&key(i), &[7u8; 16]).unwrap();
        }
    }
    let dir = std::env::temp_dir().join(format!("mailer-bench-{name}-snapshots"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let started = Instant::now();
    state.snapshot(&dir.join("first")).unwrap();
    let first_ms = started.elapsed().as_secs_f64() * 1e3;
    for i in (0..n).step_by(100) {
        state.put(&key(i), &[8u8; 16]).unwrap();
    }
    let started = Instant::now();
    state.snapshot(&dir.join("second")).unwrap();
    let second_ms = started.elapsed().as_secs_f64() * 1e3;
    drop(state);
    let sources = [SnapshotSource {
        path: dir.join("second"),
        backend: kind.name().to_owned(),
        same_key_groups: true,
    }];
    let started = Instant::now();
    let restored = kind.restore("restored", 0, &sources, &|_| true).unwrap();
    let restore_ms = started.elapsed().as_secs_f64() * 1e3;
    assert_eq!(restored.get(&key(100)).unwrap(), Some(vec![8u8; 16]));
    assert_eq!(restored.get(&key(n - 1)).unwrap().map(|v| v.len()), Some(16));
    println!(
        "bench {name} records={n} secs={:.3} rec_per_s={:.0} checkpoint_ms={first_ms:.1} incremental_checkpoint_ms={second_ms:.1} restore_ms={restore_ms:.1} checkpoint_kib={} peak_rss_kib={}",
        second_ms / 1e3,
        n as f64 / (second_ms / 1e3),
        du_kib(&dir.join("second")),
        peak_rss_kib(),
    );
}

/// Keys made at a time, outside the timed part.
const CHUNK: u64 = 10_000;

pub(crate) fn key(i: u64) -> Vec<u8> {
    let k = i.to_string();
    keys::keyed((i % 128) as u16, 1, k.as_bytes())
}

fn run(name: &str, kind: BackendKind) {
    let n: u64 = env_or("MAILER_BENCH_KEYS", 5_000_000);
    let reads: u64 = n / 5;
    let mut state: Box<dyn StateBackend> = kind.open("bench", 0).unwrap();
    let value = [7u8; 16];
    // Keys are made in chunks outside the timed part, so the figures are
    // the backend's alone (and the chunks keep the benchmark's own memory
    // out of the peak RSS).
    let mut write_secs = 0.0;
    let mut chunk: Vec<Vec<u8>> = Vec::with_capacity(CHUNK as usize);
    for first in (0..n).step_by(CHUNK as usize) {
        chunk.clear();
        chunk.extend((first..(first + CHUNK).min(n)).map(key));
        let started = Instant::now();
        for k in &chunk {
            state.put(k, &value).unwrap();
        }
        write_secs += started.elapsed().as_secs_f64();
    }
    let mut read_secs = 0.0;
    let mut found = 0u64;
    for first in (0..reads).step_by(CHUNK as usize) {
        chunk.clear();
        chunk.extend((first..(first + CHUNK).min(reads)).map(|i| key(splitmix64(i) % n)));
        let started = Instant::now();
        for k in &chunk {
            found += u64::from(state.get(k).unwrap().is_some());
        }
        read_secs += started.elapsed().as_secs_f64();
    }
    assert_eq!(found, reads, "every key written is read back");
    let disk_kib = match &kind {
        BackendKind::Rocks { dir, .. } => du_kib(dir),
        BackendKind::Memory => 0,
    };
    println!(
        "bench {name} records={n} secs={write_secs:.3} rec_per_s={:.0} put_us={:.3} get_us={:.3} peak_rss_kib={} disk_kib={disk_kib}",
        n as f64 / write_secs,
        write_secs * 1e6 / n as f64,
        read_secs * 1e6 / reads as f64,
        peak_rss_kib(),
    );
}

fn du_kib(dir: &std::path::Path) -> u64 {
    fn walk(p: &std::path::Path) -> u64 {
        std::fs::read_dir(p).map_or(0, |entries| {
            entries
                .flatten()
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => walk(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
    }
    walk(dir) / 1024
}
