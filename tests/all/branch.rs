//! The `branch` operator in manifests: each record reaches exactly the
//! readers of the first branch whose predicate holds (a condition on a
//! JSON field or a `filter` plugin), or of the default output; a filter on
//! one output holds back no other; records a predicate fails on go to the
//! dead letters; `describe` names the outputs each stage and sink reads.

use crate::support::*;
use std::collections::BTreeMap;

/// Line `i` of the input: JSON objects with an `amount` and a `parity`,
/// short and long JSON numbers, and a line that is not JSON.
fn line(i: u64) -> String {
    match i % 5 {
        0 | 1 => format!("{{\"amount\":{},\"parity\":{}}}", i % 97, i % 2),
        2 => (i % 100).to_string(),
        3 => (1000 + i).to_string(),
        _ if i % 50 == 4 => format!("oops {i}"),
        _ => format!("{{\"note\":\"{i}\"}}"),
    }
}

/// Where the brute-force router sends line `i`: `big` (amount over 50),
/// `even` (parity 0), `long` (3 bytes or more, the `drop-short` plugin),
/// `default`, or the dead letters (a condition fails on text).
fn route(i: u64) -> &'static str {
    let text = line(i);
    let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) else {
        return "dead";
    };
    if doc["amount"].as_i64().is_some_and(|a| a > 50) {
        "big"
    } else if doc["parity"].as_i64() == Some(0) {
        "even"
    } else if text.len() >= 3 {
        "long"
    } else {
        "default"
    }
}

const LINES: u64 = 2_000;

fn manifest(w: &Workdir) -> std::path::PathBuf {
    w.write("in.txt", &(0..LINES).map(|i| line(i) + "\n").collect::<String>());
    w.manifest(
        r#"
[pipeline]
name = "branches"
batch_size = 64

[source]
type = "file"
path = "in.txt"

[[operators]]
name = "route"
type = "branch"
parallelism = 2
on_error = "dead-letter"

[[operators.branches]]
name = "big"
field = "amount"
op = "gt"
value = 50

[[operators.branches]]
name = "even"
field = "parity"
op = "eq"
value = 0

[[operators.branches]]
name = "long"
plugin = "{plugin:drop-short}"

[[operators]]
name = "none"
type = "field_filter"
input = "route.even"
field = "amount"
op = "lt"
value = -1

[[sinks]]
name = "big"
input = "route.big"
type = "file"
path = "big.txt"
format = "value"

[[sinks]]
name = "even"
input = "route.even"
type = "file"
path = "even.txt"
format = "value"

[[sinks]]
name = "nothing"
input = "none"
type = "file"
path = "nothing.txt"
format = "value"

[[sinks]]
name = "rest"
inputs = ["route.long", "route.default"]
type = "file"
path = "rest.txt"
format = "value"

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"
"#,
    )
}

fn sorted(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort_unstable();
    lines
}

#[test]
fn each_record_reaches_the_readers_of_the_first_branch_that_takes_it() {
    let w = Workdir::new();
    let m = manifest(&w);
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut want: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for i in 0..LINES {
        let to = match route(i) {
            "long" | "default" => "rest",
            other => other,
        };
        want.entry(to).or_default().push(line(i));
    }
    for (sink, file) in [("big", "big.txt"), ("even", "even.txt"), ("rest", "rest.txt")] {
        let mut expected = want.remove(sink).unwrap_or_default();
        expected.sort_unstable();
        assert!(!expected.is_empty(), "the data reaches `{sink}`");
        assert_eq!(sorted(&w.read(file)), expected, "sink `{sink}`");
    }
    assert_eq!(
        w.read("nothing.txt"),
        "",
        "the filter after `route.even` keeps nothing"
    );
    let mut dead: Vec<String> = dead_letters(&w, "dead.jsonl")
        .into_iter()
        .map(|(v, _)| v)
        .collect();
    dead.sort_unstable();
    let mut expected = want.remove("dead").unwrap();
    expected.sort_unstable();
    assert_eq!(dead, expected);
    assert!(want.is_empty(), "{want:?}");
    let log = stderr(&out);
    assert_eq!(finished_field(&log, "source_records"), LINES, "{log}");
}

#[test]
fn describe_names_each_output_a_stage_or_sink_reads() {
    let w = Workdir::new();
    let m = manifest(&w);
    let out = run(&["describe", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "stage `stage-1`: parallelism 2, round robin, reads `source`",
        "  - `route`: branch: `route.big` if amount gt 50, `route.even` if parity eq 0, `route.long` if plugin ",
        "else `route.default`; on error dead-letter",
        "stage `stage-2`: parallelism 1, one worker, reads `route.even`",
        "sink `big`: file `big.txt` (value), reads `route.big`",
        "sink `rest`: file `rest.txt` (value), reads the union of `route.long`, `route.default`",
    ] {
        assert!(text.contains(line), "{line:?} missing from:\n{text}");
    }
    let out = run(&["describe", "--format", "dot", m.to_str().unwrap()]);
    let dot = stdout(&out);
    for edge in [
        "\"stage-1\" -> \"big\" [label=\"route.big\"];",
        "\"stage-1\" -> \"stage-2\" [label=\"route.even\"];",
        "\"stage-2\" -> \"nothing\";",
    ] {
        assert!(dot.contains(edge), "{edge} missing from:\n{dot}");
    }
}
