//! Processing-time windows in a whole pipeline: a rate-limited generator
//! over about a second, tumbling windows of 200 ms of the wall clock.

use crate::support::*;

#[test]
fn processing_time_windows_count_every_record_once() {
    let w = Workdir::new();
    let manifest = w.manifest(
        r#"
[pipeline]
name = "processing-time"
batch_size = 50

[source]
type = "generator"
count = 3000
rate = 3000
keys = 3

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
type = "window"
window = "tumbling"
size = "200ms"
time = "processing"

[sink]
type = "file"
path = "out.txt"
format = "value"
"#,
    );
    let out = run(&["run", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let results: Vec<serde_json::Value> = w
        .read("out.txt")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let total: u64 = results.iter().map(|r| r["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 3000, "every record counted once");
    let mut windows: Vec<i64> = results.iter().map(|r| r["start"].as_i64().unwrap()).collect();
    windows.sort();
    windows.dedup();
    assert!(
        windows.len() >= 3,
        "a second of records spans several windows: {windows:?}"
    );
    for r in &results {
        let (start, end) = (r["start"].as_i64().unwrap(), r["end"].as_i64().unwrap());
        assert_eq!((start % 200, end - start), (0, 200), "{r}");
    }
    let keys: std::collections::BTreeSet<_> = results.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 3);
}

/// The clicks of `data/clicks.jsonl`, per user, in event-time order.
fn clicks_by_user() -> std::collections::BTreeMap<String, Vec<(i64, String)>> {
    let text = std::fs::read_to_string(repo().join("pipelines/data/clicks.jsonl")).unwrap();
    let mut by_user: std::collections::BTreeMap<String, Vec<(i64, String)>> = Default::default();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let click = (v["ts"].as_i64().unwrap(), v["page"].as_str().unwrap().to_owned());
        by_user
            .entry(v["user"].as_str().unwrap().to_owned())
            .or_default()
            .push(click);
    }
    for clicks in by_user.values_mut() {
        clicks.sort();
    }
    by_user
}

#[test]
fn clicks_sessions_summarise_each_session_as_a_brute_force_split_does() {
    const GAP: i64 = 30_000;
    let mut expected = Vec::new();
    for (user, clicks) in clicks_by_user() {
        // A click within the gap of the previous one (inclusive) continues its session.
        let mut sessions: Vec<Vec<(i64, String)>> = Vec::new();
        for click in clicks {
            match sessions.last_mut() {
                Some(s) if click.0 <= s.last().unwrap().0 + GAP => s.push(click),
                _ => sessions.push(vec![click]),
            }
        }
        for s in sessions {
            let pages: std::collections::BTreeSet<&String> = s.iter().map(|c| &c.1).collect();
            expected.push(serde_json::json!({
                "user": user,
                "start": s[0].0,
                "end": s.last().unwrap().0 + GAP,
                "clicks": s.len(),
                "pages": pages.len(),
                "landing": s[0].1,
                "exit": s.last().unwrap().1,
            }));
        }
    }
    let manifest = repo().join("pipelines/clicks-sessions.toml");
    let out = run(&["run", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut got: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let order = |v: &serde_json::Value| {
        (
            v["user"].as_str().unwrap().to_owned(),
            v["start"].as_i64().unwrap(),
        )
    };
    got.sort_by_key(order);
    expected.sort_by_key(order);
    assert!(expected.len() > 10, "{expected:?}");
    assert_eq!(got, expected);
}

#[test]
fn an_aggregate_plugin_gives_what_the_built_in_aggregates_give() {
    let w = Workdir::new();
    let pipeline = |function: &str| {
        format!(
            r#"
[pipeline]
name = "aggregate-plugin"
batch_size = 100

[source]
type = "generator"
count = 20000
keys = 7
time_divisor = 10

[watermark]
max_out_of_orderness = "0s"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
type = "window"
window = "tumbling"
size = "100ms"
{function}

[sink]
type = "stdout"
format = "value"
"#
        )
    };
    let plugin = format!("plugin = \"{}\"", plugin("bench-count-sum").display());
    let results = |function: &str| {
        let manifest = w.write("m.toml", &pipeline(function));
        let out = run(&["run", manifest.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let mut lines: Vec<(i64, i64)> = stdout(&out)
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                (v["count"].as_i64().unwrap(), v["sum"].as_i64().unwrap())
            })
            .collect();
        lines.sort();
        lines
    };
    let built_in = results("aggregates = [\"count\", \"sum\"]");
    assert_eq!(built_in.len(), 7 * 20, "{built_in:?}");
    assert_eq!(results(&plugin), built_in);
}
