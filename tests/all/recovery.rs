//! Recovery that never guesses, end to end, with files: the file sink's
//! output after killed and resumed runs equals one uninterrupted run's byte
//! for byte, dead letters too; one running instance per pipeline state; a
//! savepoint that cannot be written fails alone; a damaged RocksDB
//! checkpoint is never opened.

use crate::checkpoints::{kills, run_and_kill_at};
use crate::support::*;
use mailer::connectors::splitmix64;
use std::path::{Path, PathBuf};
use std::time::Duration;

const LINES: u64 = 200_000;
const KEYS: u64 = 40;

/// Writes the input: JSON lines whose key `k` mixes the line number; every
/// `bad_every`-th line (when not 0) holds `bad`, which `test-error` fails.
fn input(w: &Workdir, bad_every: u64) {
    let mut text = String::with_capacity(LINES as usize * 32);
    for i in 0..LINES {
        let mark = if bad_every > 0 && i % bad_every == 0 {
            "bad"
        } else {
            "ok"
        };
        text.push_str(&format!(
            "{{\"k\":\"k{}\",\"i\":{i},\"m\":\"{mark}\"}}\n",
            splitmix64(i) % KEYS
        ));
    }
    w.write("input.jsonl", &text);
}

/// file -> (test-error map, dead letters to a file) -> key_by (one worker:
/// the output's order is the input's) -> Wasm count -> file (the default
/// `append = false`), checkpointed every 100 ms, reading at `rate` records
/// per second (`0`: as fast as it can).
fn manifest(w: &Workdir, name: &str, backend: &str, rate: u64, dead_letters: bool) -> PathBuf {
    let rate = if rate > 0 {
        format!("rate = {rate}")
    } else {
        String::new()
    };
    let failing = if dead_letters {
        r#"
[[operators]]
name = "check"
type = "map"
plugin = "{plugin:test-error}"
on_error = "dead-letter"

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"
"#
    } else {
        ""
    };
    w.manifest_as(
        &format!("{name}.toml"),
        &format!(
            r#"
[pipeline]
name = "{name}"
batch_size = 200

[source]
type = "file"
path = "input.jsonl"
format = "json_lines"
key_field = "k"
timestamp_field = "i"
{rate}
{failing}
[[operators]]
type = "key_by"
parallelism = 1

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[sink]
type = "file"
path = "{name}.out"

[state]
backend = "{backend}"
path = "{name}-state"

[checkpoint]
interval = "100ms"
path = "{name}-checkpoints"
"#
        ),
    )
}

/// Kills the run of `m` (whose checkpoints go to `<name>-checkpoints`)
/// `times` times after it completed a checkpoint, then lets it finish.
fn killed_then_finished(w: &Workdir, name: &str, m: &Path, times: u64) {
    let checkpoints = w.path(&format!("{name}-checkpoints"));
    let mut resumed = 0;
    for i in 0..times {
        resumed += u64::from(run_and_kill_at(&checkpoints, m, i, 600));
    }
    assert!(resumed + 1 >= times, "only {resumed} of {times} runs resumed");
    let log = run_to_end(m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
}

/// What one uninterrupted run writes, in a folder of its own.
fn uninterrupted(backend: &str, dead_letters: bool) -> (String, Option<String>) {
    let w = Workdir::new();
    input(&w, if dead_letters { 997 } else { 0 });
    let m = manifest(&w, "whole", backend, 0, dead_letters);
    let log = run_to_end(&m, &[]);
    assert!(!log.contains("resuming"), "{log}");
    (w.read("whole.out"), dead_letters.then(|| w.read("dead.jsonl")))
}

fn assert_same_bytes(what: &str, got: &str, expected: &str) {
    if got != expected {
        let at = got
            .bytes()
            .zip(expected.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(expected.len()));
        panic!(
            "{what}: {} bytes, an uninterrupted run writes {}; they first differ at byte {at}: {:?} against {:?}",
            got.len(),
            expected.len(),
            &got[at.min(got.len())..(at + 80).min(got.len())],
            &expected[at.min(expected.len())..(at + 80).min(expected.len())],
        );
    }
}

#[test]
fn a_resumed_file_sink_writes_what_an_uninterrupted_run_writes_byte_for_byte() {
    let (expected, _) = uninterrupted("memory", false);
    let w = Workdir::new();
    input(&w, 0);
    let m = manifest(&w, "resumed", "memory", 50_000, false);
    killed_then_finished(&w, "resumed", &m, 1);
    assert_same_bytes("resumed.out", &w.read("resumed.out"), &expected);
    // Running the finished pipeline again resumes from its last checkpoint
    // (at the end of the input): nothing is written, nothing is lost.
    run_to_end(&m, &[]);
    assert_same_bytes("resumed.out after a rerun", &w.read("resumed.out"), &expected);
}

fn file_crash_sweep(backend: &'static str) {
    let (expected, expected_dead) = uninterrupted(backend, true);
    let expected_dead = expected_dead.unwrap();
    let sweep = Sweep::start("file", backend);
    let w = Workdir::new();
    input(&w, 997);
    let m = manifest(&w, "sweep", backend, 20_000, true);
    killed_then_finished(&w, "sweep", &m, 5 * kills());
    let (out, dead) = (w.read("sweep.out"), w.read("dead.jsonl"));
    // The lines of both files, counted; then their order, byte for byte.
    let lines = |out: &str, dead: &str| -> Vec<String> {
        let out = out.lines().map(|l| format!("out {l}"));
        out.chain(dead.lines().map(|l| format!("dead {l}"))).collect()
    };
    sweep.report(Tally::of_items(
        lines(&out, &dead),
        lines(&expected, &expected_dead),
    ));
    assert_same_bytes("sweep.out", &out, &expected);
    assert_same_bytes("dead.jsonl", &dead, &expected_dead);
}

#[test]
fn killed_runs_write_exactly_one_runs_file_and_dead_letters_in_memory() {
    file_crash_sweep("memory");
}

#[test]
fn killed_runs_write_exactly_one_runs_file_and_dead_letters_on_rocksdb() {
    file_crash_sweep("rocksdb");
}

/// Starts `m`, waits until it completed a checkpoint in `checkpoints`.
fn started(m: &Path, checkpoints: &Path) -> Running {
    let running = spawn_manifest(m);
    wait_for_new_checkpoint(checkpoints);
    running
}

#[test]
fn a_second_run_of_a_running_pipeline_is_refused_naming_the_first() {
    let w = Workdir::new();
    input(&w, 0);
    let m = manifest(&w, "twice", "rocksdb", 20_000, false);
    let mut first = started(&m, &w.path("twice-checkpoints"));
    let second = run(&["run", m.to_str().unwrap()]);
    assert!(!second.status.success());
    let refusal = stderr(&second);
    assert!(
        refusal.contains(&format!("locked by process {}", first.0.id())),
        "{refusal}"
    );
    // The first run is untouched: it finishes with exactly one run's output.
    sigterm(&first.0);
    assert!(first.0.wait().unwrap().success());
    let m_fast = w.write("twice.toml", &w.read("twice.toml").replace("rate = 20000", ""));
    run_to_end(&m_fast, &[]);
    let (expected, _) = uninterrupted("rocksdb", false);
    assert_same_bytes("twice.out", &w.read("twice.out"), &expected);
}

#[test]
fn a_savepoint_that_cannot_be_written_fails_alone_and_the_pipeline_goes_on() {
    let w = Workdir::new();
    input(&w, 0);
    let m = manifest(&w, "blocked", "memory", 20_000, false);
    let checkpoints = w.path("blocked-checkpoints");
    let mut running = started(&m, &checkpoints);
    // Nothing can be written under a regular file.
    w.write("a-file", "");
    let target = w.path("a-file/savepoint");
    let mut savepoint = mailer()
        .args([
            "savepoint",
            m.to_str().unwrap(),
            "--dir",
            target.to_str().unwrap(),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while savepoint.try_wait().unwrap().is_none() {
        assert!(
            std::time::Instant::now() < deadline,
            "`mailer savepoint` did not answer within 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = savepoint.wait_with_output().unwrap();
    assert!(!answer.status.success());
    assert!(
        stderr(&answer).contains("could not write the savepoint"),
        "{}",
        stderr(&answer)
    );
    // Checkpoints go on completing; the run ends well.
    let latest = || std::fs::read_to_string(checkpoints.join("LATEST")).unwrap();
    let before = latest();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while latest() == before {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint after the failed savepoint"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(running.0.try_wait().unwrap().is_none(), "the pipeline stopped");
    sigterm(&running.0);
    assert!(running.0.wait().unwrap().success());
    assert!(!target.exists());
}

#[test]
fn a_rocksdb_checkpoint_with_a_truncated_file_is_skipped_for_the_one_before() {
    let w = Workdir::new();
    input(&w, 0);
    let m = manifest(&w, "cut", "rocksdb", 50_000, false);
    let checkpoints = w.path("cut-checkpoints");
    let mut running = started(&m, &checkpoints);
    // Let a few checkpoints complete, then stop it hard.
    std::thread::sleep(Duration::from_millis(800));
    running.0.kill().unwrap();
    running.0.wait().unwrap();
    let newest = std::fs::read_to_string(checkpoints.join("LATEST")).unwrap();
    let newest = checkpoints.join(format!("chk-{:020}", newest.trim().parse::<u64>().unwrap()));
    let snapshot = newest.join("counts-w0");
    // The newest table file is this checkpoint's own (older checkpoints
    // share older files through hard links).
    let sst = std::fs::read_dir(&snapshot)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "sst"))
        .max()
        .expect("a RocksDB snapshot holds a table file");
    let f = std::fs::OpenOptions::new().write(true).open(&sst).unwrap();
    f.set_len(f.metadata().unwrap().len() / 2).unwrap();

    let m_fast = w.write("cut.toml", &w.read("cut.toml").replace("rate = 50000", ""));
    let log = run_to_end(&m_fast, &[]);
    assert!(log.contains("skipping a partial or corrupt checkpoint"), "{log}");
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    let (expected, _) = uninterrupted("rocksdb", false);
    assert_same_bytes("cut.out", &w.read("cut.out"), &expected);
}

#[test]
fn no_checkpoint_covers_dead_letters_its_failing_dead_letter_sink_could_not_write() {
    let w = Workdir::new();
    let lines: String = (0..2000)
        .map(|i| {
            let mark = if i == 1000 { "bad" } else { "ok" };
            format!("{{\"k\":\"k{}\",\"i\":{i},\"m\":\"{mark}\"}}\n", i % 7)
        })
        .collect();
    w.write("input.jsonl", &lines);
    // The dead letters go to a device that is always full.
    let text = std::fs::read_to_string(manifest(&w, "full", "memory", 2000, true))
        .unwrap()
        .replace("path = \"dead.jsonl\"", "path = \"/dev/full\"\nappend = true");
    let m = w.write("full.toml", &text);
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(!out.status.success(), "the dead-letter sink cannot write");
    assert!(stderr(&out).contains("`/dev/full`"), "{}", stderr(&out));
    // Either no checkpoint completed, or none past the dead letter.
    let checkpoints = w.path("full-checkpoints");
    let Ok(latest) = std::fs::read_to_string(checkpoints.join("LATEST")) else {
        return;
    };
    let latest: u64 = latest.trim().parse().unwrap();
    let metadata: serde_json::Value =
        serde_json::from_str(&w.read(&format!("full-checkpoints/chk-{latest:020}/_metadata.json"))).unwrap();
    let line = metadata["source"]["line"].as_u64().unwrap();
    assert!(
        line <= 1000,
        "checkpoint {latest} covers line {line}, past the dead letter it lost"
    );
}
