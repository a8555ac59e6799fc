//! Checkpoints end to end: a keyed Wasm reduce killed with SIGKILL at
//! random moments and restarted, over and over, ends with exactly the counts
//! of one uninterrupted run; a corrupt newest checkpoint is never used.

use crate::support::*;
use mailer::connectors::splitmix64;
use std::collections::BTreeMap;
use std::time::Duration;

const RECORDS: u64 = 200_000;
const KEYS: u64 = 40;

fn manifest(w: &Workdir, backend: &str) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "crash-{backend}"
batch_size = 500

[source]
type = "generator"
count = {RECORDS}
keys = {KEYS}
rate = 100000

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[sink]
type = "file"
path = "out.txt"
append = true

[state]
backend = "{backend}"
path = "state"

[checkpoint]
interval = "100ms"
path = "checkpoints"
"#
    ))
}

/// Each key's count in one uninterrupted run of the generator.
fn expected_counts() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for g in 0..RECORDS {
        *counts.entry((splitmix64(g) % KEYS).to_string()).or_insert(0) += 1;
    }
    counts
}

/// The largest count the sink saw per key: the final state of each key,
/// whatever was replayed after a restart.
fn final_counts(w: &Workdir) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in w.read("out.txt").lines() {
        let (key, count) = line.split_once('\t').unwrap();
        let c: &mut u64 = counts.entry(key.to_owned()).or_default();
        *c = (*c).max(count.parse().unwrap());
    }
    counts
}

fn run_to_end(manifest: &std::path::Path) -> String {
    let out = run(&["run", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

fn crash_sweep(backend: &str, kills: u64) {
    let w = Workdir::new();
    let m = manifest(&w, backend);
    let mut resumed = 0;
    let latest = || std::fs::read_to_string(w.path("checkpoints/LATEST")).ok();
    for i in 0..kills {
        let before = latest();
        let mut child = spawn_run(&m);
        // Once this run completed a checkpoint of its own, kill it at a
        // random moment of the next 0.8 s.
        while latest() == before && child.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(splitmix64(i ^ 0xC0FFEE) % 800));
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap(); // SIGKILL
        }
        let out = child.wait_with_output().unwrap();
        resumed += u64::from(String::from_utf8_lossy(&out.stderr).contains("resuming from a checkpoint"));
    }
    assert_eq!(
        resumed,
        kills - 1,
        "every run after the first resumes from a checkpoint"
    );
    run_to_end(&m);
    assert_eq!(final_counts(&w), expected_counts(), "{backend}");
}

#[test]
fn killed_and_restarted_runs_count_every_record_exactly_once_in_memory() {
    crash_sweep("memory", 10);
}

#[test]
fn killed_and_restarted_runs_count_every_record_exactly_once_on_rocksdb() {
    crash_sweep("rocksdb", 10);
}

#[test]
fn a_corrupt_newest_checkpoint_is_skipped_for_the_one_before() {
    let w = Workdir::new();
    let m = manifest(&w, "memory");
    run_to_end(&m);
    let dir = w.path("checkpoints");
    let mut complete: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir() && !p.to_string_lossy().ends_with(".tmp"))
        .collect();
    complete.sort();
    assert!(complete.len() >= 2, "{complete:?}");
    // Flip one byte of a snapshot of the newest checkpoint.
    let newest = complete.last().unwrap();
    let entries = newest.join("counts-w0/entries");
    let mut bytes = std::fs::read(&entries).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xFF;
    std::fs::write(&entries, bytes).unwrap();
    let log = run_to_end(&m);
    assert!(log.contains("skipping a partial or corrupt checkpoint"), "{log}");
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert_eq!(final_counts(&w), expected_counts());
    // A run with --fresh ignores them all and starts over.
    let out = run(&["run", "--fresh", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("resuming"), "{}", stderr(&out));
}
