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
    manifest_at(w, backend, 2)
}

fn manifest_at(w: &Workdir, backend: &str, parallelism: usize) -> std::path::PathBuf {
    manifest_with(w, backend, parallelism, "100ms", 100_000)
}

fn manifest_with(
    w: &Workdir,
    backend: &str,
    parallelism: usize,
    interval: &str,
    rate: u64,
) -> std::path::PathBuf {
    counting_manifest(
        w,
        backend,
        parallelism,
        rate,
        &format!("interval = \"{interval}\"\npath = \"checkpoints\""),
    )
}

/// The generator's keys counted by a keyed Wasm reduce into `out.txt`, with
/// `checkpoint` as the body of its `[checkpoint]` table (and whatever
/// tables follow it).
pub(crate) fn counting_manifest(
    w: &Workdir,
    backend: &str,
    parallelism: usize,
    rate: u64,
    checkpoint: &str,
) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "crash-{backend}"
batch_size = 500

[source]
type = "generator"
count = {RECORDS}
keys = {KEYS}
rate = {rate}

[[operators]]
type = "key_by"
parallelism = {parallelism}

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
{checkpoint}
"#
    ))
}

/// Each key's count in one uninterrupted run of the generator.
pub(crate) fn expected_counts() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for g in 0..RECORDS {
        *counts.entry((splitmix64(g) % KEYS).to_string()).or_insert(0) += 1;
    }
    counts
}

/// The largest count the sink saw per key: the final state of each key,
/// whatever was replayed after a restart.
pub(crate) fn final_counts(w: &Workdir) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (key, count) in count_lines(w) {
        let c: &mut u64 = counts.entry(key).or_default();
        *c = (*c).max(count);
    }
    counts
}

/// The sink's `key<TAB>count` lines, in the order written.
pub(crate) fn count_lines(w: &Workdir) -> Vec<(String, u64)> {
    w.read("out.txt")
        .lines()
        .map(|l| {
            let (key, count) = l.split_once('\t').unwrap();
            (key.to_owned(), count.parse().unwrap())
        })
        .collect()
}

/// Runs `m` until it completed a checkpoint of its own, then kills it with
/// SIGKILL after up to `max_wait_ms` more; whether it resumed from a
/// checkpoint when it started.
pub(crate) fn run_and_kill(w: &Workdir, m: &std::path::Path, seed: u64, max_wait_ms: u64) -> bool {
    run_and_kill_at(&w.path("checkpoints"), m, seed, max_wait_ms)
}

/// [`run_and_kill`] of a pipeline whose checkpoints go to `checkpoints`
/// (its kill counted toward the thread's [`Sweep`]).
pub(crate) fn run_and_kill_at(
    checkpoints: &std::path::Path,
    m: &std::path::Path,
    seed: u64,
    max_wait_ms: u64,
) -> bool {
    let latest = || std::fs::read_to_string(checkpoints.join("LATEST")).ok();
    let before = latest();
    let mut child = spawn_run(m);
    while latest() == before && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(splitmix64(seed ^ 0xC0FFEE) % max_wait_ms));
    sigkill(&mut child);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stderr).contains("resuming from a checkpoint")
}

/// The moments `MAILER_TEST_KILL_AT` aims a sink's SIGKILL at: its
/// output staged, the checkpoint durable, the output committed.
pub(crate) const KILL_MOMENTS: [&str; 3] = ["staged", "durable", "committed"];

/// Runs `m` until it kills itself at `moment` of its `n`-th checkpoint (a
/// debug build's test hook) or ends; whether it was killed there (counted
/// toward the thread's [`Sweep`]).
pub(crate) fn run_killed_at(m: &std::path::Path, moment: &str, n: u64) -> bool {
    let out = mailer()
        .env("MAILER_TEST_KILL_AT", format!("{moment}:{n}"))
        .arg("run")
        .arg(m)
        .output()
        .unwrap();
    let killed = String::from_utf8_lossy(&out.stderr).contains(&format!("test hook: killed {moment}"));
    if killed {
        count_kill();
    }
    killed
}

/// How many times each crash test kills the pipeline per backend
/// (`MAILER_SOAK_KILLS`; `just soak` makes it 100, 200 in all).
pub(crate) fn kills() -> u64 {
    std::env::var("MAILER_SOAK_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(10)
}

fn crash_sweep(backend: &'static str) {
    let sweep = Sweep::start("file", backend);
    let w = Workdir::new();
    let m = manifest(&w, backend);
    let kills = kills();
    let mut resumed = 0;
    for i in 0..kills {
        resumed += u64::from(run_and_kill(&w, &m, i, 800));
    }
    assert_eq!(
        resumed,
        kills - 1,
        "every run after the first resumes from a checkpoint"
    );
    run_to_end(&m, &[]);
    sweep.report(Tally::of_counts(&final_counts(&w), &expected_counts()));
}

#[test]
fn killed_and_restarted_runs_count_every_record_exactly_once_in_memory() {
    crash_sweep("memory");
}

#[test]
fn killed_and_restarted_runs_count_every_record_exactly_once_on_rocksdb() {
    crash_sweep("rocksdb");
}

#[test]
fn a_corrupt_newest_checkpoint_is_skipped_for_the_one_before() {
    let w = Workdir::new();
    let m = manifest(&w, "memory");
    run_to_end(&m, &[]);
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
    let log = run_to_end(&m, &[]);
    assert!(log.contains("skipping a partial or corrupt checkpoint"), "{log}");
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert_eq!(final_counts(&w), expected_counts());
    // A run with --fresh ignores them all and starts over.
    let out = run(&["run", "--fresh", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stderr(&out).contains("resuming"), "{}", stderr(&out));
}

#[test]
fn restoring_at_keyed_parallelism_1_then_3_then_2_counts_as_one_run_does() {
    for backend in ["memory", "rocksdb"] {
        let w = Workdir::new();
        assert!(!run_and_kill(&w, &manifest_at(&w, backend, 1), 1, 400));
        assert!(run_and_kill(&w, &manifest_at(&w, backend, 3), 2, 400));
        let log = run_to_end(&manifest_at(&w, backend, 2), &[]);
        assert!(log.contains("resuming from a checkpoint"), "{log}");
        assert_eq!(final_counts(&w), expected_counts(), "{backend}");
    }
}

/// Starts `mailer <args>`, waits until its pipeline runs and has worked a
/// while, then takes a savepoint in `savepoint` (a folder or an `s3://`
/// prefix) and stops it.
pub(crate) fn run_until_savepoint(
    w: &Workdir,
    args: &[&str],
    manifest: &std::path::Path,
    savepoint: impl AsRef<std::path::Path>,
) {
    let savepoint = savepoint.as_ref().to_str().unwrap();
    let mut child = mailer()
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Running: it holds the pipeline's lock.
    while mailer::checkpoint::lock_holder(&w.path("checkpoints")).unwrap() != Some(child.id()) {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the pipeline ended before its savepoint"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(400));
    let out = run(&[
        "savepoint",
        manifest.to_str().unwrap(),
        "--stop",
        "--dir",
        savepoint,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out).trim(), savepoint);
    assert!(child.wait().unwrap().success());
}

#[test]
fn stop_with_savepoint_then_resume_from_it_at_parallelism_3_then_2() {
    for backend in ["memory", "rocksdb"] {
        let w = Workdir::new();
        let (sp1, sp2) = (w.path("sp1"), w.path("sp2"));
        // Only savepoints (and the final checkpoint of each stop) are taken.
        // 20 000 records/s leave each run 10 s: `mailer savepoint` (which
        // compiles the plugins) asks long before the input ends.
        let m = manifest_with(&w, backend, 1, "1h", 20_000);
        run_until_savepoint(&w, &["run", m.to_str().unwrap()], &m, &sp1);
        let m = manifest_with(&w, backend, 3, "1h", 20_000);
        run_until_savepoint(
            &w,
            &[
                "run",
                "--from-savepoint",
                sp1.to_str().unwrap(),
                m.to_str().unwrap(),
            ],
            &m,
            &sp2,
        );
        let m = manifest_with(&w, backend, 2, "1h", 20_000);
        let out = run(&[
            "run",
            "--from-savepoint",
            sp2.to_str().unwrap(),
            m.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(final_counts(&w), expected_counts(), "{backend}");
    }
}

#[test]
fn a_savepoint_of_a_pipeline_that_is_not_running_is_refused() {
    let w = Workdir::new();
    let m = manifest(&w, "memory");
    let out = run(&["savepoint", m.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not running"), "{}", stderr(&out));
}

#[test]
fn a_checkpoint_that_does_not_fit_the_manifest_is_refused_before_anything_runs() {
    let w = Workdir::new();
    let m = manifest(&w, "memory");
    run_to_end(&m, &[]);
    let text = std::fs::read_to_string(&m).unwrap();
    for (changed, expected) in [
        (
            text.replace("name = \"counts\"", "name = \"totals\""),
            "holds state of operator `counts`, which the manifest no longer has",
        ),
        (
            text.replace("type = \"reduce\"", "type = \"process\"").replace(
                &plugin("count").display().to_string(),
                &plugin("card-declines").display().to_string(),
            ),
            "operator `counts` ran a `reduce` plugin and now runs a `process` plugin",
        ),
    ] {
        std::fs::write(&m, changed).unwrap();
        let out = run(&["run", m.to_str().unwrap()]);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains(expected), "{err}");
        assert!(err.contains("--fresh"), "{err}");
        assert!(!err.contains("pipeline started"), "{err}");
    }
}
