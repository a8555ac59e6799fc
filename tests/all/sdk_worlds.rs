//! The Python and JavaScript SDKs against the Rust one, world by world: the
//! same manifest runs with a Rust plugin and with its ports
//! (`plugins/python/<name>`, `plugins/js/<name>`, built to `py-<name>` and
//! `js-<name>`) on the same bounded input, and the three sinks must hold
//! the same records — key, value and event time — which must be what a
//! direct computation over the input gives.

use crate::support::*;
use mailer::connectors::splitmix64;
use serde_json::Value;
use std::collections::BTreeMap;

/// Runs `manifest` — whose `{plugin:PLUGIN}` stands for the plugin, and
/// whose sink writes `out.jsonl` as JSON — with `name` and with its Python
/// and JavaScript ports; asserts the three outputs hold the same lines (in
/// any order: keyed workers interleave), and returns the records (sorted)
/// as `(key, value, timestamp)`.
fn same_records_in_every_language(name: &str, manifest: &str) -> Vec<(String, String, i64)> {
    let outputs: Vec<(String, Vec<String>)> = ["", "py-", "js-"]
        .iter()
        .map(|lang| {
            let plugin = format!("{lang}{name}");
            let w = Workdir::new();
            run_to_end(&w.manifest(&manifest.replace("PLUGIN", &plugin)), &[]);
            let mut lines: Vec<String> = w.read("out.jsonl").lines().map(str::to_owned).collect();
            lines.sort();
            (plugin, lines)
        })
        .collect();
    let (_, rust) = &outputs[0];
    for (plugin, lines) in &outputs[1..] {
        assert_eq!(lines, rust, "{plugin} against {name}");
    }
    let mut records: Vec<_> = rust.iter().map(String::as_str).map(key_value_time).collect();
    records.sort();
    records
}

/// A line of a file sink of format `json`: its key, value and event time.
fn key_value_time(line: &str) -> (String, String, i64) {
    let doc: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    let text = |v: &Value| v.as_str().unwrap_or_else(|| panic!("{line}")).to_owned();
    (
        text(&doc["key"]),
        text(&doc["value"]),
        doc["timestamp"].as_i64().unwrap(),
    )
}

/// A generator of `RECORDS` records over `KEYS` keys: record `g` has value
/// and event time `g`.
const RECORDS: u64 = 300;
const KEYS: u64 = 5;

/// The generator's key of record `g`.
fn key_of(g: u64) -> String {
    (splitmix64(g) % KEYS).to_string()
}

fn generator(name: &str) -> String {
    format!(
        r#"
[pipeline]
name = "{name}"
batch_size = 32

[source]
type = "generator"
count = {RECORDS}
keys = {KEYS}
"#
    )
}

/// The sink every manifest here ends with.
const SINK: &str = r#"
[sink]
type = "file"
path = "out.jsonl"
format = "json"
"#;

/// Reduce (`bench-sum`): each key's running sum, one record per input
/// record, in both call modes.
#[test]
fn reduce_plugins_keep_the_same_running_sums() {
    let mut sums: BTreeMap<String, u64> = BTreeMap::new();
    let mut expected: Vec<(String, String, i64)> = (0..RECORDS)
        .map(|g| {
            let sum = sums.entry(key_of(g)).or_default();
            *sum += g;
            (key_of(g), sum.to_string(), g as i64)
        })
        .collect();
    expected.sort();
    assert_eq!(sums.values().sum::<u64>(), RECORDS * (RECORDS - 1) / 2);
    for call in ["batch", "record"] {
        let manifest = generator("sdk-reduce")
            + &format!(
                r#"
[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "sums"
type = "reduce"
plugin = "{{plugin:PLUGIN}}"
call = "{call}"
memory_limit_mb = 256
timeout = "10s"
"#
            )
            + SINK;
        let got = same_records_in_every_language("bench-sum", &manifest);
        assert_eq!(got, expected, "call = {call}");
    }
}

/// Process with timers and value and list state (`card-declines`, the
/// `fraud-timer` example's data): the same alerts, at the same times, in
/// both call modes.
#[test]
fn process_plugins_with_timers_flag_the_same_cards() {
    let payments = repo().join("pipelines/data/payments.jsonl");
    let t = 1_700_000_000_000i64;
    let alert = |card: &str, first: i64, last: i64| {
        let value = format!(
            r#"{{"card":"{card}","declines":3,"first":{},"last":{}}}"#,
            t + first,
            t + last
        );
        (card.to_owned(), value, t + last)
    };
    let expected = vec![
        alert("c1", 10_000, 28_000),
        alert("c3", 20_000, 30_000),
        alert("c3", 400_000, 420_000),
        alert("c5", 100_000, 120_000),
        alert("c6", 200_000, 250_000),
    ];
    for call in ["batch", "record"] {
        let manifest = format!(
            r#"
[pipeline]
name = "sdk-process"
batch_size = 8

[source]
type = "file"
path = "{}"
format = "json_lines"
key_field = "card"
timestamp_field = "ts"

[watermark]
max_out_of_orderness = "5s"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "flag-declines"
type = "process"
plugin = "{{plugin:PLUGIN}}"
call = "{call}"
memory_limit_mb = 256
timeout = "10s"
"#,
            payments.display()
        ) + SINK;
        let got = same_records_in_every_language("card-declines", &manifest);
        assert_eq!(got, expected, "call = {call}");
    }
}

/// Window (`session-summary`, the `clicks-sessions` example's data): the
/// same summary of each session, at the session's last millisecond.
#[test]
fn window_plugins_summarise_the_same_sessions() {
    let clicks = repo().join("pipelines/data/clicks.jsonl");
    let manifest = format!(
        r#"
[pipeline]
name = "sdk-window"
batch_size = 8

[source]
type = "file"
path = "{}"
format = "json_lines"
key_field = "user"
timestamp_field = "ts"

[watermark]
max_out_of_orderness = "5s"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "sessions"
type = "window"
window = "session"
gap = "30s"
plugin = "{{plugin:PLUGIN}}"
memory_limit_mb = 256
timeout = "10s"
"#,
        clicks.display()
    ) + SINK;
    let got = same_records_in_every_language("session-summary", &manifest);
    assert!(got.len() > 10, "{got:?}");
    let mut clicks_counted = 0;
    for (key, value, timestamp) in &got {
        let summary: Value = serde_json::from_str(value).unwrap();
        assert_eq!(summary["user"], key.as_str(), "{value}");
        assert_eq!(summary["end"].as_i64().unwrap() - 1, *timestamp, "{value}");
        assert!(summary["pages"].as_u64().unwrap() <= summary["clicks"].as_u64().unwrap());
        clicks_counted += summary["clicks"].as_u64().unwrap();
    }
    let lines = std::fs::read_to_string(&clicks).unwrap().lines().count();
    assert_eq!(clicks_counted, lines as u64, "every click in one session");
    let first = &got.iter().find(|r| r.0 == "u1").unwrap().1;
    assert!(
        first.starts_with(r#"{"clicks":"#) && first.ends_with(r#","user":"u1"}"#),
        "{first}"
    );
}

/// Aggregate (`bench-count-sum`) over session windows, whose accumulators
/// the host merges as sessions join: the same count and sum per session,
/// at the session's last millisecond.
#[test]
fn aggregate_plugins_count_and_sum_the_same_sessions() {
    const GAP: u64 = 10;
    // A record within the gap of its key's previous one (inclusive)
    // continues its session.
    let mut sessions: BTreeMap<String, Vec<Vec<u64>>> = BTreeMap::new();
    for g in 0..RECORDS {
        let of_key = sessions.entry(key_of(g)).or_default();
        match of_key.last_mut() {
            Some(s) if g <= s.last().unwrap() + GAP => s.push(g),
            _ => of_key.push(vec![g]),
        }
    }
    let mut expected: Vec<(String, String, i64)> = sessions
        .iter()
        .flat_map(|(key, of_key)| {
            of_key.iter().map(move |s| {
                let value = format!(r#"{{"count":{},"sum":{}}}"#, s.len(), s.iter().sum::<u64>());
                (key.clone(), value, (s.last().unwrap() + GAP - 1) as i64)
            })
        })
        .collect();
    expected.sort();
    assert!(
        expected.len() > 2 * KEYS as usize,
        "several sessions per key: {expected:?}"
    );
    let manifest = generator("sdk-aggregate")
        + &format!(
            r#"
[watermark]
max_out_of_orderness = "0s"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "sums"
type = "window"
window = "session"
gap = "{GAP}ms"
plugin = "{{plugin:PLUGIN}}"
memory_limit_mb = 256
timeout = "10s"
"#
        )
        + SINK;
    let got = same_records_in_every_language("bench-count-sum", &manifest);
    assert_eq!(got, expected);
}
