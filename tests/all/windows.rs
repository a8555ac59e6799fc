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
