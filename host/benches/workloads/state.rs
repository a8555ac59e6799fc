//! The state backends alone: 5M keys with 16-byte values written, then 1M
//! random point reads: writes/s, put and get latency (the backend's calls
//! alone), peak RSS, and (for RocksDB) the size on disk.

use crate::common::{env_or, peak_rss_kib, rocks_dir};
use mailer::connectors::splitmix64;
use mailer::state::{BackendKind, StateBackend, keys};
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
    ]
}

/// Keys made at a time, outside the timed part.
const CHUNK: u64 = 10_000;

fn key(i: u64) -> Vec<u8> {
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
        BackendKind::Rocks(dir) => du_kib(dir),
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
