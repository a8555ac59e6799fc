//! Graph pipelines from manifests: several named sources, unions, fan-out
//! and several sinks. Exact counts from two sources into two sinks; a
//! stalled branch of a fan-out holds back the other and loses nothing;
//! killed runs of a graph end with exactly one run's output, on both
//! backends; a graph's savepoint restores at another parallelism.

use crate::checkpoints::{kills, run_and_kill_at, run_until_savepoint};
use crate::support::*;
use mailer::connectors::splitmix64;
use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::PathBuf;
use std::time::Duration;

/// `lines` JSON lines whose key `k` (one of `keys`) mixes the line number
/// with `seed`.
fn keyed_lines(lines: u64, keys: u64, seed: u64) -> String {
    (0..lines)
        .map(|i| format!("{{\"k\":\"{}\",\"i\":{i}}}\n", splitmix64(i ^ seed) % keys))
        .collect()
}

/// The keys of `keyed_lines`, counted.
fn count_keys(lines: u64, keys: u64, seed: u64, counts: &mut BTreeMap<String, u64>) {
    for i in 0..lines {
        *counts
            .entry((splitmix64(i ^ seed) % keys).to_string())
            .or_default() += 1;
    }
}

/// The largest count written per key (`key<TAB>count` lines).
fn final_counts(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let (key, count) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("not key<TAB>count: {line:?}"));
        let c: &mut u64 = counts.entry(key.to_owned()).or_default();
        *c = (*c).max(count.parse().unwrap());
    }
    counts
}

fn sorted_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().collect();
    lines.sort_unstable();
    lines
}

#[test]
fn two_sources_into_a_union_counted_by_key_reach_two_sinks_with_exact_counts() {
    const LINES: u64 = 3_000;
    const GENERATED: u64 = 5_000;
    let w = Workdir::new();
    w.write("words.jsonl", &keyed_lines(LINES, 25, 7));
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "graph-count"
batch_size = 100

[[sources]]
name = "words"
type = "file"
path = "words.jsonl"
format = "json_lines"
key_field = "k"

[[sources]]
name = "numbers"
type = "generator"
count = {GENERATED}
keys = 20

[[operators]]
type = "key_by"
inputs = ["words", "numbers"]
parallelism = 2

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[[sinks]]
name = "file"
type = "file"
path = "counts.txt"

[[sinks]]
name = "screen"
type = "stdout"
"#
    ));
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut expected = BTreeMap::new();
    count_keys(LINES, 25, 7, &mut expected);
    for g in 0..GENERATED {
        *expected.entry((splitmix64(g) % 20).to_string()).or_default() += 1;
    }
    let (file, screen) = (w.read("counts.txt"), stdout(&out));
    assert_eq!(final_counts(&file), expected, "the file sink");
    assert_eq!(final_counts(&screen), expected, "the stdout sink");
    assert_eq!(
        file.lines().count() as u64,
        LINES + GENERATED,
        "one update per record"
    );
    assert_eq!(
        sorted_lines(&file),
        sorted_lines(&screen),
        "both sinks get every update"
    );
    let log = stderr(&out);
    assert_eq!(finished_field(&log, "source_records"), LINES + GENERATED, "{log}");
    assert_eq!(
        finished_field(&log, "sink_records"),
        2 * (LINES + GENERATED),
        "{log}"
    );
}

#[test]
fn a_stalled_branch_of_a_fan_out_holds_back_the_other_and_loses_nothing() {
    const N: u64 = 300_000;
    let w = Workdir::new();
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "fan-out"

[[sources]]
name = "numbers"
type = "generator"
count = {N}

[[sinks]]
name = "kept"
type = "file"
path = "kept.txt"
format = "value"

[[sinks]]
name = "stalled"
type = "stdout"
format = "value"
"#
    ));
    let mut child = spawn_run(&m);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // Once the stdout sink wrote, nobody reads it: the pipe fills, that
    // sink blocks, its edge fills, and the source waits with the file sink.
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    std::thread::sleep(Duration::from_millis(1000));
    let kept = || std::fs::metadata(w.path("kept.txt")).map_or(0, |m| m.len());
    let early = kept();
    std::thread::sleep(Duration::from_millis(1000));
    let late = kept();
    assert_eq!(
        early, late,
        "the file sink went on while the other branch was stalled"
    );
    assert!(
        late < 100_000 * 6,
        "{late} bytes reached the file sink while the other branch was stalled: the fan-out is not bounded"
    );
    let mut screen = String::from_utf8(first.to_vec()).unwrap();
    stdout.read_to_string(&mut screen).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success());
    let expected: String = (0..N).map(|i| format!("{i}\n")).collect();
    assert!(screen == expected, "the stalled branch lost or reordered records");
    assert!(
        w.read("kept.txt") == expected,
        "the waiting branch lost or reordered records"
    );
}

/// Two rate-limited files (`a`, `b`) -> union -> key_by -> Wasm count -> sink
/// `totals`; the same union also straight into sink `raw`. Both file sinks
/// rewind on restore; checkpoints every 100 ms.
fn crash_manifest(
    w: &Workdir,
    name: &str,
    backend: &str,
    parallelism: usize,
    rate: u64,
    interval: &str,
) -> PathBuf {
    let rate = match rate {
        0 => String::new(),
        r => format!("rate = {r}"),
    };
    w.manifest_as(
        &format!("{name}.toml"),
        &format!(
            r#"
[pipeline]
name = "{name}"
batch_size = 200

[[sources]]
name = "a"
type = "file"
path = "a.jsonl"
format = "json_lines"
key_field = "k"
{rate}

[[sources]]
name = "b"
type = "file"
path = "b.jsonl"
format = "json_lines"
key_field = "k"
{rate}

[[operators]]
type = "key_by"
inputs = ["a", "b"]
parallelism = {parallelism}

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[[sinks]]
name = "totals"
type = "file"
path = "counts.txt"

[[sinks]]
name = "raw"
inputs = ["a", "b"]
type = "file"
path = "raw.txt"

[state]
backend = "{backend}"
path = "state"

[checkpoint]
interval = "{interval}"
path = "checkpoints"
"#
        ),
    )
}

const CRASH_LINES: u64 = 40_000;
const CRASH_KEYS: u64 = 30;

fn crash_inputs(w: &Workdir) {
    w.write("a.jsonl", &keyed_lines(CRASH_LINES, CRASH_KEYS, 1));
    w.write("b.jsonl", &keyed_lines(CRASH_LINES, CRASH_KEYS, 2));
}

fn crash_expected() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    count_keys(CRASH_LINES, CRASH_KEYS, 1, &mut counts);
    count_keys(CRASH_LINES, CRASH_KEYS, 2, &mut counts);
    counts
}

/// What a run writes: every update of every key exactly once (the two
/// sources interleave differently in each run, so updates are compared as
/// sorted lines), every input line exactly once.
fn assert_exactly_one_run(w: &Workdir, what: &str) {
    one_run_tally(w).assert_exactly_once(what);
}

/// The lines of both sinks (`totals ` or `raw ` before each) against one
/// run's: every update of every key once, every input line once.
fn one_run_tally(w: &Workdir) -> Tally {
    let (counts, raw) = (w.read("counts.txt"), w.read("raw.txt"));
    let got = counts.lines().map(|l| format!("totals {l}"));
    let got = got.chain(raw.lines().map(|l| format!("raw {l}")));
    let mut expected: Vec<String> = Vec::new();
    for (key, n) in crash_expected() {
        expected.extend((1..=n).map(|c| format!("totals {key}\t{c}")));
    }
    let input = format!(
        "{}{}",
        keyed_lines(CRASH_LINES, CRASH_KEYS, 1),
        keyed_lines(CRASH_LINES, CRASH_KEYS, 2)
    );
    expected.extend(input.lines().map(|l| {
        let key = l.split('"').nth(3).unwrap();
        format!("raw {key}\t{l}")
    }));
    Tally::of_items(got, expected)
}

fn graph_crash_sweep(backend: &'static str) {
    let sweep = Sweep::start("file", backend);
    let w = Workdir::new();
    crash_inputs(&w);
    let name = format!("graph-crash-{backend}");
    let m = crash_manifest(&w, &name, backend, 2, 5_000, "100ms");
    let times = 2 * kills();
    let mut resumed = 0;
    for i in 0..times {
        resumed += u64::from(run_and_kill_at(&w.path("checkpoints"), &m, i, 600));
    }
    assert!(resumed + 1 >= times, "only {resumed} of {times} runs resumed");
    let log = run_to_end(&m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    sweep.report(one_run_tally(&w));
    // Run again, the finished pipeline resumes from its last checkpoint, at
    // the end of both inputs: nothing is written twice.
    run_to_end(&m, &[]);
    assert_exactly_one_run(&w, &format!("{backend}, run again"));
}

#[test]
fn a_graph_killed_20_times_ends_with_exactly_one_runs_output_in_memory() {
    graph_crash_sweep("memory");
}

#[test]
fn a_graph_killed_20_times_ends_with_exactly_one_runs_output_on_rocksdb() {
    graph_crash_sweep("rocksdb");
}

#[test]
fn a_graphs_savepoint_restores_at_another_parallelism() {
    for backend in ["memory", "rocksdb"] {
        let w = Workdir::new();
        crash_inputs(&w);
        let sp = w.path("sp");
        let m = crash_manifest(&w, "graph-rescale", backend, 2, 5_000, "1h");
        run_until_savepoint(&w, &["run", m.to_str().unwrap()], &m, &sp);
        let m = crash_manifest(&w, "graph-rescale", backend, 3, 0, "1h");
        let log = run_to_end(&m, &["--from-savepoint", sp.to_str().unwrap()]);
        assert!(log.contains("resuming from a checkpoint"), "{log}");
        assert_exactly_one_run(&w, backend);
    }
}

#[test]
fn a_checkpoint_of_other_sources_is_refused() {
    let w = Workdir::new();
    crash_inputs(&w);
    let m = crash_manifest(&w, "graph-sources", "memory", 1, 0, "1h");
    run_to_end(&m, &[]);
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("name = \"b\"", "name = \"c\"")
        .replace("\"a\", \"b\"", "\"a\", \"c\"");
    std::fs::write(&m, text).unwrap();
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("it was taken with sources a, b and the pipeline now has a, c"),
        "{err}"
    );
}

#[test]
fn describe_prints_the_graph_as_text_and_as_dot() {
    let w = Workdir::new();
    crash_inputs(&w);
    let m = crash_manifest(&w, "graph-describe", "memory", 2, 0, "1h");
    let out = run(&["describe", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "source `a`: file `a.jsonl` (json_lines)",
        "stage `keyed-1`: parallelism 2, keyed by hash over 128 key groups, reads the union of `a`, `b`",
        "  - `counts`: plugin ",
        "sink `totals`: file `counts.txt` (text), reads `keyed-1`",
        "sink `raw`: file `raw.txt` (text), reads the union of `a`, `b`",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    let out = run(&["describe", "--format", "dot", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let dot = stdout(&out);
    assert!(dot.starts_with("digraph \"graph-describe\" {"), "{dot}");
    for edge in [
        "\"a\" -> \"keyed-1\";",
        "\"b\" -> \"keyed-1\";",
        "\"keyed-1\" -> \"totals\";",
        "\"a\" -> \"raw\";",
        "\"b\" -> \"raw\";",
    ] {
        assert!(dot.contains(edge), "{edge} missing from:\n{dot}");
    }
}
