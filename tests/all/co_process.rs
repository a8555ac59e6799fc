//! Plugins of two inputs from manifests: the `rules.toml` example (a
//! co-process of orders and spending limits) against a brute-force check of
//! its data; a join whose output a `join`-world plugin makes, in both call
//! modes, against a brute-force join; bad settings refused with located
//! errors.

use crate::support::*;
use mailer::connectors::splitmix64;
use serde_json::{Value, json};

fn read_docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("pipelines/data").join(file)).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// An alert with its numbers as floats (`90` and `90.0` alike).
fn alert(doc: &Value) -> String {
    let mut doc = doc.clone();
    for field in ["amount", "limit"] {
        doc[field] = json!(doc[field].as_f64().unwrap());
    }
    doc.to_string()
}

/// `rules.toml`: every order above its customer's limit as it was at the
/// order's time (the newest change at or before it; none before the
/// first) leaves as one alert; the same with the plugin in Python and in
/// JavaScript.
#[test]
fn rules_alerts_each_order_above_the_limit_of_its_time_in_every_language() {
    let want = rules_expected();
    let example = std::fs::read_to_string(repo().join("pipelines/rules.toml")).unwrap();
    for plugin in ["spend-limits", "py-spend-limits", "js-spend-limits"] {
        let w = Workdir::new();
        let data = repo().join("pipelines/data");
        let text = example
            .replace(
                "../plugins/dist/spend-limits.wasm",
                &format!("{{plugin:{plugin}}}"),
            )
            .replace("data/", &format!("{}/", data.display()));
        let out = run(&["run", w.manifest(&text).to_str().unwrap()]);
        assert!(out.status.success(), "{plugin}: {}", stderr(&out));
        let mut got: Vec<String> = stdout(&out)
            .lines()
            .map(|l| alert(&serde_json::from_str(l).unwrap()))
            .collect();
        got.sort();
        assert_eq!(got, want, "{plugin}");
    }
    let out = run(&["run", repo().join("pipelines/rules.toml").to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The alerts of `rules.toml`, by brute force, sorted.
fn rules_expected() -> Vec<String> {
    let limits = read_docs("spend-limits.jsonl");
    let mut want = Vec::new();
    let mut limits_used = std::collections::BTreeSet::new();
    for o in read_docs("shop-orders.jsonl") {
        let t = o["ts"].as_i64().unwrap();
        let in_force = limits
            .iter()
            .enumerate()
            .filter(|(_, l)| l["customer"] == o["customer"] && l["ts"].as_i64().unwrap() <= t)
            .max_by_key(|(i, l)| (l["ts"].as_i64().unwrap(), *i));
        let Some((i, limit)) = in_force else { continue };
        let limit = limit["limit"].as_f64().unwrap();
        if o["amount"].as_f64().unwrap() > limit {
            limits_used.insert(i);
            let doc = json!({"order": o["order"], "customer": o["customer"], "amount": o["amount"], "limit": limit});
            want.push(alert(&doc));
        }
    }
    want.sort();
    assert!(
        want.len() >= 8 && limits_used.len() >= 5,
        "the data alert under several limits: {want:?}"
    );
    want
}

const PAIRS_RECORDS: u64 = 3_000;
const PAIRS_KEYS: u64 = 40;

/// Two generated streams of W4's shape (B's keys mixed with 2^40), keyed,
/// interval-joined within `±5 ms` by the `bench-pair-sum` plugin called
/// per `call`; a left join, so unmatched left records pass alone.
fn pair_sum_manifest(w: &Workdir, call: &str) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "pair-sums"

[[sources]]
name = "a"
type = "generator"
count = {PAIRS_RECORDS}
keys = {PAIRS_KEYS}

[[sources]]
name = "b"
type = "generator"
count = {PAIRS_RECORDS}
keys = {PAIRS_KEYS}
seed = 1099511627776

[[operators]]
name = "ka"
type = "key_by"
input = "a"
parallelism = 2

[[operators]]
name = "kb"
type = "key_by"
input = "b"
parallelism = 2

[[operators]]
name = "sums"
type = "interval_join"
left = "ka"
right = "kb"
lower = "-5ms"
upper = "5ms"
join = "left"
plugin = {{ path = "{{plugin:bench-pair-sum}}", call = "{call}" }}

[[sinks]]
name = "out"
type = "stdout"
format = "text"
"#
    ))
}

/// Every pair of equal keys within 5 ms as `key<TAB>ga+gb`, and each left
/// record without one as `key<TAB>ga`, sorted.
fn pair_sums_expected() -> Vec<String> {
    let key = |g: u64, seed: u64| (splitmix64(g ^ seed) % PAIRS_KEYS).to_string();
    let mut want = Vec::new();
    for a in 0..PAIRS_RECORDS {
        let ka = key(a, 0);
        let partners: Vec<u64> = (a.saturating_sub(5)..=(a + 5).min(PAIRS_RECORDS - 1))
            .filter(|&b| key(b, 1 << 40) == ka)
            .collect();
        if partners.is_empty() {
            want.push(format!("{ka}\t{a}"));
        }
        want.extend(partners.iter().map(|b| format!("{ka}\t{}", a + b)));
    }
    want.sort();
    want
}

#[test]
fn a_join_plugin_makes_each_pairs_output_in_both_call_modes() {
    let want = pair_sums_expected();
    assert!(want.len() > PAIRS_RECORDS as usize / 2);
    for call in ["batch", "record"] {
        let w = Workdir::new();
        let out = run(&["run", pair_sum_manifest(&w, call).to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        let mut got: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
        got.sort();
        assert_eq!(got.len(), want.len(), "call = {call}");
        assert_eq!(got, want, "call = {call}");
        let described = stdout(&run(&["describe", pair_sum_manifest(&w, call).to_str().unwrap()]));
        assert!(described.contains("output by plugin"), "{described}");
        assert!(described.contains("world `join`"), "{described}");
    }
}

/// A pair the plugin fails on (a value that is not a number) goes to the
/// dead letters as the join's JSON document with the reason.
#[test]
fn a_pair_the_join_plugin_fails_on_is_dead_lettered_as_its_document() {
    let w = Workdir::new();
    w.write("a.jsonl", "{\"k\":\"0\",\"ts\":5}\n{\"k\":\"0\",\"ts\":6}\n");
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "bad-pairs"

[[sources]]
name = "a"
type = "file"
path = "{dir}/a.jsonl"
format = "json_lines"
key_field = "k"
timestamp_field = "ts"

[[sources]]
name = "b"
type = "generator"
count = 1
keys = 1

[watermark]
max_out_of_orderness = "0s"

[[operators]]
name = "ka"
type = "key_by"
input = "a"

[[operators]]
name = "kb"
type = "key_by"
input = "b"

[[operators]]
name = "j"
type = "interval_join"
left = "ka"
right = "kb"
lower = "-10ms"
upper = "0ms"
join = "left"
plugin = "{{plugin:bench-pair-sum}}"
on_error = "dead-letter"

[[sinks]]
name = "out"
type = "stdout"

[dead_letter]
type = "file"
path = "{dir}/dead.jsonl"
format = "json"
"#,
        dir = w.path("").display()
    ));
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "nothing passes: no value is a number");
    let dead = dead_letters(&w, "dead.jsonl");
    assert_eq!(dead.len(), 2, "{dead:?}");
    let doc = r#"{"left":{"k":"0","ts":5},"right":0}"#;
    assert!(dead.iter().any(|(value, _)| value == doc), "{dead:?}");
    assert!(
        dead.iter().all(|(_, why)| why.contains("not a 64-bit integer")),
        "{dead:?}"
    );
}

#[test]
fn a_co_process_reads_two_keyed_streams_and_a_join_plugin_has_the_join_world() {
    let w = Workdir::new();
    let manifest = |operator: &str| {
        format!(
            r#"
[pipeline]
name = "bad-co"

[[sources]]
name = "a"
type = "generator"
count = 1
keys = 2

[[sources]]
name = "b"
type = "generator"
count = 1
keys = 2

[[operators]]
name = "ka"
type = "key_by"
input = "a"

[[operators]]
name = "kb"
type = "key_by"
input = "b"

[[operators]]
name = "c"
{operator}

[[sinks]]
name = "out"
type = "stdout"
"#
        )
    };
    let co = "type = \"co_process\"\nplugin = \"{plugin:spend-limits}\"";
    let cases = [
        (format!("{co}\nleft = \"ka\""), "`right` is missing"),
        (format!("{co}\nleft = \"a\"\nright = \"kb\""), "`co_process` needs keyed streams: `a` is not keyed"),
        (format!("{co}\nleft = \"ka\"\nright = \"kb\"\ninput = \"ka\""), "remove `input`"),
        (
            "type = \"process\"\nplugin = \"{plugin:card-declines}\"\ninput = \"ka\"\nleft = \"ka\"".to_owned(),
            "`left` and `right` are the inputs of a `co_process`",
        ),
        (
            "type = \"co_process\"\nplugin = \"{plugin:card-declines}\"\nleft = \"ka\"\nright = \"kb\"".to_owned(),
            "implements the `process` world, but operator `c` is a `co-process` operator",
        ),
        (
            "type = \"interval_join\"\nleft = \"ka\"\nright = \"kb\"\nlower = \"0s\"\nupper = \"1s\"\nplugin = \"{plugin:bench-sum}\"".to_owned(),
            "implements the `reduce` world, but operator `c` is a `join` operator",
        ),
        (
            "type = \"interval_join\"\nleft = \"ka\"\nright = \"kb\"\nlower = \"0s\"\nupper = \"1s\"\nplugin = { path = \"{plugin:bench-pair-sum}\", timeout = \"soon\" }".to_owned(),
            "soon",
        ),
    ];
    for (operator, expected) in cases {
        assert_refused(
            &w.manifest_as("bad.toml", &manifest(&operator)),
            expected,
            &operator,
        );
    }
}
