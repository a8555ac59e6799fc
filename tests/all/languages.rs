//! Plugins written in Python (componentize-py) and JavaScript
//! (componentize-js), built by `just plugins`: a map and a keyed-state
//! process operator in each, run by whole pipelines.

use crate::support::*;
use std::collections::BTreeMap;

/// `words.jsonl` (300 records over 7 keys) -> the language's map ->
/// key_by -> its counter -> `out.txt` (`key<TAB>count`), and the map's
/// output to `mapped.txt` through a second pipeline.
fn pipelines(w: &Workdir, lang: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let words: String = (0..300)
        .map(|i| format!("{{\"k\":\"k{}\",\"v\":\"word{i}\"}}\n", i % 7))
        .collect();
    w.write("words.jsonl", &words);
    let mapped = w.write(
        "mapped.toml",
        &format!(
            r#"
[pipeline]
name = "{lang}-map"

[source]
type = "file"
path = "words.jsonl"

[[operators]]
type = "map"
plugin = "{}"
memory_limit_mb = 256

[sink]
type = "file"
path = "mapped.txt"
format = "value"
"#,
            plugin(&format!("{lang}-uppercase")).display()
        ),
    );
    let counted = w.manifest(&format!(
        r#"
[pipeline]
name = "{lang}-plugins"
batch_size = 64

[source]
type = "file"
path = "words.jsonl"
format = "json_lines"
key_field = "k"

[[operators]]
name = "upper"
type = "map"
plugin = "{{plugin:{lang}-uppercase}}"
memory_limit_mb = 256

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "counts"
type = "process"
plugin = "{{plugin:{lang}-count}}"
memory_limit_mb = 256

[sink]
type = "file"
path = "out.txt"
"#
    ));
    (mapped, counted)
}

/// Runs the pipeline of `lang`'s plugins and checks its output: every
/// key's last count is its number of records, reached in steps of one.
fn runs_both_plugins(lang: &str) {
    let w = Workdir::new();
    let (mapped, counted) = pipelines(&w, lang);
    let out = run(&["run", mapped.to_str().unwrap()]);
    assert!(out.status.success(), "{lang}: {}", stderr(&out));
    let expected: String = (0..300)
        .map(|i| format!("{{\"K\":\"K{}\",\"V\":\"WORD{i}\"}}\n", i % 7))
        .collect();
    assert_eq!(
        w.read("mapped.txt"),
        expected,
        "{lang}: the map upper-cased every value"
    );

    let out = run(&["run", counted.to_str().unwrap()]);
    assert!(out.status.success(), "{lang}: {}", stderr(&out));
    let text = w.read("out.txt");
    assert_eq!(text.lines().count(), 300, "{lang}: one count per record");
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines() {
        let (key, count) = line.split_once('\t').unwrap();
        let count: u64 = count.parse().unwrap();
        let before = last.insert(key.to_owned(), count).unwrap_or(0);
        assert_eq!(count, before + 1, "{lang}: {line}");
    }
    let expected: BTreeMap<String, u64> = (0..7)
        .map(|k| (format!("k{k}"), if k < 300 % 7 { 43 } else { 42 }))
        .collect();
    assert_eq!(last, expected, "{lang}");
}

#[test]
fn python_plugins_map_and_keep_keyed_state() {
    runs_both_plugins("py");
}

#[test]
fn javascript_plugins_map_and_keep_keyed_state() {
    runs_both_plugins("js");
}

/// `mailer plugin swap` and `rollback` through the CLI, with components
/// of 12 to 19 MB: the keyed counter goes from Python to JavaScript and
/// back while the pipeline runs, and each key's count goes on by one.
#[test]
fn python_and_javascript_counters_swap_live_and_keep_their_state() {
    let w = Workdir::new();
    let port = free_port();
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "lang-swap"
batch_size = 64

[source]
type = "generator"
keys = 5
rate = 400

[[operators]]
type = "key_by"

[[operators]]
name = "counts"
type = "process"
plugin = "{{plugin:py-count}}"
memory_limit_mb = 256

[sink]
type = "file"
path = "out.txt"

[admin]
listen = "127.0.0.1:{port}"
token = "${{MAILER_ADMIN_TOKEN}}"
"#
    ));
    let mut running = spawn_manifest(&m);
    wait_for(&format!("127.0.0.1:{port}"));
    let cli = |args: &[&str]| {
        let out = mailer()
            .env("MAILER_ADMIN_TOKEN", TOKEN)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "mailer {args:?}: {}", stderr(&out));
        stdout(&out)
    };
    let manifest = m.to_str().unwrap();
    let js = plugin("js-count");
    cli(&["plugin", "swap", manifest, "counts", js.to_str().unwrap()]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    let listed = cli(&["plugin", "list", manifest]);
    assert!(listed.contains("\"applied\""), "{listed}");
    cli(&["plugin", "rollback", manifest, "counts"]);
    std::thread::sleep(std::time::Duration::from_secs(2));
    sigterm(&running.0);
    assert!(running.0.wait().unwrap().success());

    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for line in w.read("out.txt").lines() {
        let (key, count) = line.split_once('\t').unwrap();
        let count: u64 = count.parse().unwrap();
        let before = last.insert(key.to_owned(), count).unwrap_or(0);
        assert_eq!(
            count,
            before + 1,
            "key {key}: the count goes on by one across the swaps"
        );
    }
    assert_eq!(last.len(), 5);
}
