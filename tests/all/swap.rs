//! Plugin swaps under load: every worker switches at the same point of the
//! stream (records before it see the old version, after it the new one),
//! nothing is lost or repeated, and keyed state is kept.

use crate::support::*;
use mailer::manifest::Manifest;
use mailer::plugin::{PluginEngine, World};
use mailer::runtime::{Control, Shutdown, run_with};
use mailer::swap::SwapPoint;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Runs `manifest` (an endless generator into `out.txt`) at full speed,
/// swaps operator `operator` to plugin `next` of `world` while it runs,
/// drains it, and returns the output lines in order.
fn run_with_swap(w: &Workdir, manifest: &str, operator: &str, next: &str, world: World) -> Vec<String> {
    let m = Manifest::load(&w.manifest(manifest)).unwrap();
    let engine = PluginEngine::new().unwrap();
    let plan = mailer::plan::build(&m, &engine).unwrap();
    let (shutdown, control) = (Shutdown::new(), Control::new());
    let plugin = engine.load(&plugin(next), world, operator).unwrap();
    let running = {
        let (shutdown, control) = (shutdown.clone(), control.clone());
        std::thread::spawn(move || run_with(plan, &shutdown, &control))
    };
    // Full load: the generator has no rate. Swap, let the new version run,
    // then drain.
    std::thread::sleep(Duration::from_millis(500));
    control.request_swap(Arc::new(SwapPoint::new(1, operator, plugin, 1)));
    std::thread::sleep(Duration::from_millis(500));
    shutdown.cancel();
    let report = running.join().unwrap().unwrap();
    let lines: Vec<String> = w.read("out.txt").lines().map(str::to_owned).collect();
    assert_eq!(report.sink_records, lines.len() as u64);
    lines
}

/// An endless generator with `extra` source settings.
fn generator(extra: &str) -> String {
    format!(
        r#"
[pipeline]
name = "swap"
batch_size = 256

[source]
type = "generator"
{extra}
"#
    )
}

#[test]
fn a_swapped_map_switches_once_and_loses_nothing() {
    let w = Workdir::new();
    let manifest = generator(r#"value_prefix = "Order""#)
        + r#"
[[operators]]
name = "case"
type = "map"
plugin = "{plugin:uppercase}"
parallelism = 2

[sink]
type = "file"
path = "out.txt"
format = "value"
"#;
    let lines = run_with_swap(&w, &manifest, "case", "lowercase", World::Map);
    let switch = lines
        .iter()
        .position(|l| l.starts_with("order"))
        .expect("a switch");
    assert!(switch > 0, "the swap came after some records");
    assert!(
        lines[..switch].iter().all(|l| l.starts_with("ORDER")),
        "old version before the switch"
    );
    assert!(
        lines[switch..].iter().all(|l| l.starts_with("order")),
        "new version after it"
    );
    let mut numbers: Vec<u64> = lines.iter().map(|l| l[5..].parse().unwrap()).collect();
    numbers.sort_unstable();
    assert!(
        numbers.iter().copied().eq(0..lines.len() as u64),
        "each record once"
    );
}

#[test]
fn a_swapped_counter_goes_on_from_its_state() {
    let w = Workdir::new();
    let manifest = generator("keys = 7")
        + KEYED_COUNT
        + r#"
[sink]
type = "file"
path = "out.txt"
"#;
    let lines = run_with_swap(&w, &manifest, "counts", "count-by-ten", World::Reduce);
    // Per key, steps of one until the switch, then steps of ten from there.
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    let mut switched_at = None;
    for (i, line) in lines.iter().enumerate() {
        let (key, count) = line.split_once('\t').unwrap();
        let count: u64 = count.parse().unwrap();
        let before = last.insert(key.to_owned(), count).unwrap_or(0);
        match count - before {
            1 => assert!(
                switched_at.is_none(),
                "line {i}: an old step after the switch at {switched_at:?}"
            ),
            10 => {
                switched_at.get_or_insert(i);
            }
            step => panic!("line {i}: step {step}"),
        }
    }
    let switch = switched_at.expect("a switch") as u64;
    assert!(switch > 0, "switched after some records");
    let records = lines.len() as u64;
    assert!(switch < records, "and before the end");
    let total: u64 = last.values().sum();
    assert_eq!(
        total,
        switch + 10 * (records - switch),
        "every record counted once"
    );
}

#[test]
fn a_swapped_window_aggregate_finishes_open_windows_in_the_new_version() {
    let w = Workdir::new();
    let manifest = generator("keys = 5\ntime_divisor = 1")
        + r#"
[watermark]
max_out_of_orderness = "0s"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "sums"
type = "window"
window = "tumbling"
size = "1s"
plugin = "{plugin:bench-count-sum}"

[sink]
type = "file"
path = "out.txt"
format = "value"
"#;
    let plan = mailer::plan::build(
        &Manifest::load(&w.manifest(&manifest)).unwrap(),
        &PluginEngine::new().unwrap(),
    )
    .unwrap();
    let swappable: Vec<String> = plan.plugin_operators().into_iter().map(|o| o.name).collect();
    assert_eq!(
        swappable,
        ["sums"],
        "a window computed by a plugin can be swapped"
    );
    let lines = run_with_swap(&w, &manifest, "sums", "count-sum-v2", World::Aggregate);
    let switch = lines
        .iter()
        .position(|l| l.contains(r#""version":2"#))
        .expect("a switch");
    assert!(switch > 0, "windows fired before the swap");
    assert!(lines[switch..].iter().all(|l| l.contains(r#""version":2"#)));
    // Every window holds one key's records of one second: 1000 over 5 keys
    // on average, never none, and the accumulators of windows opened
    // before the swap were finished by the new version.
    let counts: Vec<u64> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["count"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert!(counts.iter().all(|&c| c > 0));
    let total: u64 = counts.iter().sum();
    assert_eq!(total % 1000, 0, "whole seconds of records: {total}");
}
