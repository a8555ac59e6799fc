//! Trials of a new version of a keyed process operator while the pipeline
//! runs. A canary handles a quarter of the key groups, each key's records
//! and state staying with one version; it is promoted for every key once it
//! passed its probation, rolled back when it fails too often. A shadow
//! handles the same records on the same state, its changes dropped.

use crate::support::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// An endless generator (20k records/s over 500 keys, values
/// `<value_prefix><n>`) -> key_by -> process `counts` (`counter-v1`) on 2
/// workers -> `out.txt`, failed records handled by `on_error`; probation
/// of 3000 records at most 1% failing.
fn counting(w: &Workdir, addr: &str, value_prefix: &str, on_error: &str) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "canary"
batch_size = 64
max_parallelism = 128

[source]
type = "generator"
rate = 20000
keys = 500
value_prefix = "{value_prefix}"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "counts"
type = "process"
plugin = "{{plugin:counter-v1}}"
on_error = "{on_error}"

[sink]
type = "file"
path = "out.txt"
format = "value"

[admin]
listen = "{addr}"
token = "${{MAILER_ADMIN_TOKEN}}"
probation_records = 3000
rollback_failure_share = 0.01
"#
    ))
}

/// Starts the pipeline, runs `counter-next` as a canary on 25% of the key
/// groups until it is no longer running, lets the pipeline run on for a
/// while, stops it; the canary's view, each output line as (key, count,
/// by the canary's version) and the records the source read.
fn run_canary(value_prefix: &str, on_error: &str) -> (serde_json::Value, Vec<(String, u64, bool)>, u64) {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let m = counting(&w, &addr, value_prefix, on_error);
    let mut running = Running(spawn_with_token(&m, &[]));
    wait_for(&addr);
    std::thread::sleep(Duration::from_millis(300));
    let next = plugin("counter-next");
    let started = mailer_plugin(&m, &["swap", "--canary", "25%", "counts", next.to_str().unwrap()]);
    assert!(started.status.success(), "{}", stderr(&started));
    let swap: serde_json::Value = serde_json::from_slice(&started.stdout).unwrap();
    let id = swap["id"].as_u64().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    let canary = loop {
        let shown = mailer_plugin(&m, &["show", &id]);
        assert!(shown.status.success(), "{}", stderr(&shown));
        let swap: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
        if swap["canary"]["state"] != "running" {
            break swap["canary"].clone();
        }
        assert!(Instant::now() < deadline, "the canary never ended: {swap}");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(500));
    sigterm(&running.0);
    let mut log = String::new();
    std::io::Read::read_to_string(&mut running.0.stderr.take().unwrap(), &mut log).unwrap();
    assert!(running.0.wait().unwrap().success(), "{log}");
    let read = finished_field(&log, "source_records");
    let lines = w
        .read("out.txt")
        .lines()
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            let next = match fields.get(2) {
                None => false,
                Some(&"next") => true,
                Some(other) => panic!("{l}: {other}"),
            };
            (fields[0].to_owned(), fields[1].parse().unwrap(), next)
        })
        .collect();
    (canary, lines, read)
}

/// Whether `key` is in the canary's key groups (the first 32 of 128).
fn canary_key(key: &str) -> bool {
    mailer::key_group::of_key(key.as_bytes(), 128) < 32
}

/// Per key, the counts go 1, 2, 3, … whichever version counted: the state
/// stayed with its key.
fn assert_counted_once(lines: &[(String, u64, bool)]) {
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, (key, count, _)) in lines.iter().enumerate() {
        let before = last.insert(key, *count).unwrap_or(0);
        assert_eq!(
            *count,
            before + 1,
            "line {i}: key {key} counted {before} then {count}"
        );
    }
}

#[test]
fn a_canary_of_a_quarter_of_the_key_groups_touches_only_their_keys_and_is_promoted() {
    let (canary, lines, _) = run_canary("", "skip");
    assert_eq!(canary["state"], "promoted", "{canary}");
    assert_eq!(canary["key_groups_canary"], 32);
    assert_eq!(canary["failures"], 0);
    let handled = canary["records"].as_u64().unwrap();
    assert!(handled >= 3000, "{canary}");
    assert!(canary["current_records"].as_u64().unwrap() > handled, "{canary}");
    assert_counted_once(&lines);
    // Until the promotion (the first line of another key by the new
    // version), the new version counted only the canary's keys: at least
    // its probation's records of them.
    let promoted = lines
        .iter()
        .position(|(key, _, next)| *next && !canary_key(key))
        .expect("promoted for every key");
    let before: Vec<_> = lines[..promoted].iter().filter(|(_, _, next)| *next).collect();
    assert!(before.iter().all(|(key, _, _)| canary_key(key)));
    // (Up to a batch of each worker's may land after the first line of the
    // other's past the promotion.)
    assert!(before.len() >= 2900, "{} lines by the canary", before.len());
    // Per key, once the new version counted it, it goes on counting it.
    let mut moved: BTreeMap<&str, bool> = BTreeMap::new();
    for (i, (key, _, next)) in lines.iter().enumerate() {
        let was = moved.insert(key, *next).unwrap_or(false);
        assert!(!was || *next, "line {i}: key {key} went back to the old version");
    }
    assert!(
        moved.values().filter(|next| **next).count() > 400,
        "after the promotion, every key runs the new version"
    );
}

#[test]
fn a_canary_failing_one_record_in_ten_is_rolled_back_and_its_keys_go_back() {
    let (canary, lines, _) = run_canary("flaky", "skip");
    assert_eq!(canary["state"], "rolled_back", "{canary}");
    let failures = canary["failures"].as_u64().unwrap();
    assert!(failures > 30, "more than 1% of the probation failed: {canary}");
    assert!(canary["records"].as_u64().unwrap() < 3000, "{canary}");
    assert_counted_once(&lines);
    let by_next: Vec<&(String, u64, bool)> = lines.iter().filter(|(_, _, next)| *next).collect();
    assert!(!by_next.is_empty(), "the canary ran");
    assert!(
        by_next.iter().all(|(key, _, _)| canary_key(key)),
        "only the canary's keys were touched"
    );
    // After the rollback the old version counts every key again.
    let last_next = lines.iter().rposition(|(_, _, next)| *next).unwrap();
    let after = &lines[last_next + 1..];
    assert!(after.len() > 1000, "the pipeline ran on: {} lines", after.len());
    assert!(
        after.iter().filter(|(key, _, _)| canary_key(key)).count() > 100,
        "the canary's keys are counted by the old version again"
    );
}

#[test]
fn a_canary_failing_under_on_error_fail_is_rolled_back_and_the_current_version_handles_its_record() {
    let (canary, lines, read) = run_canary("flaky", "fail");
    assert_eq!(canary["state"], "rolled_back", "{canary}");
    assert!(canary["failures"].as_u64().unwrap() >= 1, "{canary}");
    assert!(canary["records"].as_u64().unwrap() < 3000, "{canary}");
    // Nothing failed for good: every record the source read was counted
    // once, the one the canary failed by the current version.
    assert_counted_once(&lines);
    assert_eq!(lines.len() as u64, read, "a line per record read");
    let by_next: Vec<_> = lines.iter().filter(|(_, _, next)| *next).collect();
    assert!(by_next.iter().all(|(key, _, _)| canary_key(key)));
    let last_next = lines.iter().rposition(|(_, _, next)| *next).unwrap_or(0);
    assert!(
        lines[last_next + 1..]
            .iter()
            .filter(|(key, _, _)| canary_key(key))
            .count()
            > 100,
        "the canary's keys are counted by the old version again"
    );
}

#[test]
fn a_process_shadow_reads_the_same_state_and_changes_none() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let m = counting(&w, &addr, "flaky", "skip");
    let mut running = Running(spawn_with_token(&m, &[]));
    wait_for(&addr);
    std::thread::sleep(Duration::from_millis(300));
    let next = plugin("counter-next");
    let started = mailer_plugin(&m, &["swap", "--shadow", "counts", next.to_str().unwrap()]);
    assert!(started.status.success(), "{}", stderr(&started));
    let swap: serde_json::Value = serde_json::from_slice(&started.stdout).unwrap();
    let id = swap["id"].as_u64().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let shown = mailer_plugin(&m, &["show", &id]);
        let swap: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
        if swap["shadow"]["compared"].as_u64().unwrap() >= 3000 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the shadow compared too little: {swap}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let aborted = mailer_plugin(&m, &["abort", "counts"]);
    assert!(aborted.status.success(), "{}", stderr(&aborted));
    let shadow: serde_json::Value = serde_json::from_slice(&aborted.stdout).unwrap();
    let shadow = &shadow["shadow"];
    sigterm(&running.0);
    assert!(running.0.wait().unwrap().success());
    // The current version's counts went on, untouched by the shadow.
    let lines: Vec<(String, u64, bool)> = w
        .read("out.txt")
        .lines()
        .map(|l| {
            let (key, count) = l.split_once('\t').unwrap();
            (key.to_owned(), count.parse().unwrap(), false)
        })
        .collect();
    assert_counted_once(&lines);
    // Every record compared differs (the shadow marks its lines), one in
    // ten fails; each difference shows the same count: the same state.
    let compared = shadow["compared"].as_u64().unwrap();
    assert_eq!(shadow["mismatches"].as_u64().unwrap(), compared, "{shadow}");
    let failures = shadow["failures"].as_u64().unwrap();
    assert!(
        failures * 12 > compared && failures * 8 < compared,
        "about one in ten: {shadow}"
    );
    for m in shadow["first_mismatches"].as_array().unwrap() {
        let current = m["current"][0]["value"].as_str().unwrap();
        match m["shadow"]["error"].as_str() {
            Some(error) => assert!(error.contains("flaky record"), "{m}"),
            None => assert_eq!(
                m["shadow"][0]["value"].as_str().unwrap(),
                format!("{current}\tnext"),
                "{m}"
            ),
        }
    }
}
