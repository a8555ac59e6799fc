//! The metrics of a running pipeline: `/metrics` on the admin server holds
//! every family the docs list, with values that agree with what the
//! pipeline did; JSON logs carry the pipeline and the operator.

use crate::kafka::{create_topic, produce, unique_topic};
use crate::support::*;
use std::time::{Duration, Instant};

const T0: i64 = 1_700_000_000_000;

/// Kafka (2 partitions, JSON) -> `checked` (fails on `bad`, dead letters)
/// -> key_by over 2 workers -> 10 s windows per user -> `out.txt`, with
/// checkpoints and the admin server on `port`.
fn observed_pipeline(w: &Workdir, input: &str, port: u16) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "observed"
batch_size = 64

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}"
format = "json"
key_field = "user"
timestamp_field = "ts"

[watermark]
max_out_of_orderness = "0s"

[[operators]]
name = "checked"
type = "map"
plugin = "{{plugin:test-error}}"
on_error = "dead-letter"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "per-user"
type = "window"
window = "tumbling"
size = "10s"

[sink]
type = "file"
path = "out.txt"
format = "value"

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"

[checkpoint]
interval = "200ms"
path = "checkpoints"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
listen = "127.0.0.1:{port}"
"#
    ))
}

/// One sample of the Prometheus text: the value of `name` whose labels
/// include every `labels` pair.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name && labels.iter().all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .map(|(_, v)| v.parse().unwrap())
}

fn all_samples(text: &str, name: &str) -> Vec<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect()
}

#[test]
fn metrics_during_a_run_cover_every_family_with_values_that_agree() {
    let w = Workdir::new();
    let input = unique_topic("metrics-in");
    create_topic(&input, 2);
    let main: Vec<(String, String)> = (0..400)
        .map(|i| {
            let user = format!("u{}", i % 10);
            let note = if i % 80 == 7 { "bad" } else { "ok" };
            let value = format!(r#"{{"user":"{user}","ts":{},"note":"{note}"}}"#, T0 + i * 250);
            (user, value)
        })
        .collect();
    produce(&input, &main);

    let port = free_port();
    let mut child = spawn_manifest(&observed_pipeline(&w, &input, port));
    let addr = format!("127.0.0.1:{port}");
    wait_for(&addr);
    let url = format!("http://{addr}/metrics");
    let scrape = || {
        let (status, body) = get_text(&url, None);
        assert_eq!(status, 200, "metrics need no token by default");
        body
    };

    // Once the pipeline read the first records, three for a window that
    // fired long ago.
    let deadline = Instant::now() + Duration::from_secs(60);
    while sample(
        &scrape(),
        "mailer_stage_records_out_total",
        &[("stage", "source")],
    ) != Some(400.0)
    {
        assert!(Instant::now() < deadline, "the pipeline did not read its input");
        std::thread::sleep(Duration::from_millis(200));
    }
    let late: Vec<(String, String)> = (0..3)
        .map(|i| {
            let user = format!("u{i}");
            (
                user.clone(),
                format!(r#"{{"user":"{user}","ts":{T0},"note":"late"}}"#),
            )
        })
        .collect();
    produce(&input, &late);

    // Scrape until the pipeline read everything and stopped writing.
    let (mut text, mut previous) = (String::new(), None);
    loop {
        assert!(Instant::now() < deadline, "the pipeline did not settle:\n{text}");
        std::thread::sleep(Duration::from_millis(500));
        text = scrape();
        let read = sample(&text, "mailer_stage_records_out_total", &[("stage", "source")]);
        let written = sample(&text, "mailer_stage_records_out_total", &[("stage", "sink")]);
        let checkpoints = sample(&text, "mailer_checkpoints_total", &[]).unwrap_or(0.0);
        if read == Some(403.0) && checkpoints >= 2.0 && previous == written {
            break;
        }
        previous = written;
    }
    let lines = w.read("out.txt").lines().count() as f64;
    let p = [("pipeline", "observed")];
    fn stage(s: &str) -> [(&str, &str); 2] {
        [("pipeline", "observed"), ("stage", s)]
    }
    fn op(o: &str) -> [(&str, &str); 2] {
        [("pipeline", "observed"), ("operator", o)]
    }

    // Stages.
    assert!(lines > 0.0);
    assert_eq!(
        sample(&text, "mailer_stage_records_out_total", &stage("sink")),
        Some(lines),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mailer_stage_records_in_total", &stage("stage-1")),
        Some(403.0)
    );
    assert_eq!(
        sample(&text, "mailer_stage_records_out_total", &stage("stage-1")),
        Some(398.0)
    );
    assert_eq!(
        sample(&text, "mailer_stage_errors_total", &stage("stage-1")),
        Some(5.0)
    );
    assert_eq!(
        sample(&text, "mailer_stage_workers", &stage("keyed-2")),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "mailer_stage_records_out_total", &stage("dead-letter")),
        Some(5.0)
    );
    // Each worker of the keyed stage counts its share; the shares add up.
    let keyed_in = sample(&text, "mailer_stage_records_in_total", &stage("keyed-2")).unwrap();
    let shares: Vec<f64> = ["0", "1"]
        .iter()
        .map(|w| {
            let labels = [("stage", "keyed-2"), ("worker", *w)];
            sample(&text, "mailer_stage_worker_records_in_total", &labels).expect("a worker's count")
        })
        .collect();
    assert!(shares.iter().all(|&s| s > 0.0), "{shares:?}");
    assert_eq!(shares.iter().sum::<f64>(), keyed_in, "{text}");
    let window_shares: f64 = ["0", "1"]
        .iter()
        .map(|w| {
            let labels = [("operator", "per-user"), ("worker", *w)];
            sample(&text, "mailer_operator_worker_records_total", &labels).expect("a worker's count")
        })
        .sum();
    assert_eq!(
        Some(window_shares),
        sample(&text, "mailer_operator_records_total", &op("per-user")),
        "{text}"
    );

    // Edges: source -> stage-1 -> keyed-2 -> sink.
    for (from, to) in [("source", "stage-1"), ("stage-1", "keyed-2"), ("keyed-2", "sink")] {
        let e = [("from", from), ("to", to)];
        let capacity = sample(&text, "mailer_edge_capacity_messages", &e).expect("capacity");
        let queued = sample(&text, "mailer_edge_queued_messages", &e).expect("queue size");
        assert!(
            capacity > 0.0 && (0.0..=capacity).contains(&queued),
            "{from}->{to}"
        );
        assert!(sample(&text, "mailer_edge_blocked_seconds_total", &e).unwrap() >= 0.0);
    }
    assert_eq!(
        sample(&text, "mailer_edge_records_total", &[("from", "source")]),
        Some(403.0)
    );

    // Operators.
    let calls = sample(&text, "mailer_operator_call_seconds_count", &op("checked")).unwrap();
    assert!(calls >= 1.0, "one call per batch at least");
    assert!(sample(&text, "mailer_operator_call_seconds_sum", &op("checked")).unwrap() > 0.0);
    assert!(
        sample(
            &text,
            "mailer_operator_call_seconds_bucket",
            &[("operator", "checked"), ("le", "+Inf")]
        )
        .is_some()
    );
    assert_eq!(
        sample(&text, "mailer_operator_records_total", &op("checked")),
        Some(403.0)
    );
    assert_eq!(
        sample(&text, "mailer_operator_failures_total", &op("checked")),
        Some(5.0)
    );
    assert_eq!(
        sample(&text, "mailer_operator_dead_lettered_total", &op("checked")),
        Some(5.0)
    );
    assert_eq!(
        sample(&text, "mailer_operator_traps_total", &op("checked")),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "mailer_operator_deadline_hits_total", &op("checked")),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "mailer_operator_late_records_total", &op("per-user")),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &text,
            "mailer_plugin_info",
            &[
                ("operator", "checked"),
                ("name", "test-error"),
                ("version", "0.1.0")
            ]
        ),
        Some(1.0),
        "{text}"
    );

    // Checkpoints.
    assert!(sample(&text, "mailer_checkpoints_total", &p).unwrap() >= 2.0);
    assert_eq!(sample(&text, "mailer_checkpoint_failures_total", &p), Some(0.0));
    assert!(sample(&text, "mailer_checkpoint_duration_seconds_count", &p).unwrap() >= 2.0);
    assert!(sample(&text, "mailer_checkpoint_size_bytes", &p).unwrap() > 0.0);
    let since = sample(&text, "mailer_checkpoint_seconds_since_success", &p).unwrap();
    assert!((0.0..30.0).contains(&since), "{since}");

    // The source: both partitions read to their end; the watermark is
    // near the last event time (the smaller of the partitions' last).
    let lag = all_samples(&text, "mailer_source_lag_records");
    assert_eq!(lag, vec![0.0, 0.0], "{text}");
    let watermark = sample(&text, "mailer_source_watermark_timestamp_seconds", &p).unwrap();
    let last = (T0 + 399 * 250) as f64 / 1000.0;
    assert!((last - 5.0..=last).contains(&watermark), "{watermark}");

    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

#[test]
fn metrics_can_require_the_token() {
    let w = Workdir::new();
    let port = free_port();
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "guarded"

[source]
type = "generator"
rate = 1000

[sink]
type = "blackhole"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
listen = "127.0.0.1:{port}"
metrics_need_token = true
"#
    ));
    let mut child = spawn_manifest(&m);
    let addr = format!("127.0.0.1:{port}");
    wait_for(&addr);
    for path in ["metrics", "dashboard/snapshot"] {
        let url = format!("http://{addr}/{path}");
        assert_eq!(get_text(&url, None).0, 401, "{path}");
        assert_eq!(get_text(&url, Some(TOKEN)).0, 200, "{path}");
    }
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

#[test]
fn json_logs_name_the_pipeline_and_the_operator() {
    let w = Workdir::new();
    w.write("in.txt", "fine\nbad one\nfine again\n");
    let m = w.manifest(
        r#"
[pipeline]
name = "logged"

[source]
type = "file"
path = "in.txt"

[[operators]]
name = "checked"
type = "map"
plugin = "{plugin:test-error}"
on_error = "skip"

[sink]
type = "blackhole"
"#,
    );
    let out = mailer()
        .args(["--log-format", "json", "run"])
        .arg(&m)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let events: Vec<serde_json::Value> = stderr(&out)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let skipped = events
        .iter()
        .find(|e| e["message"] == "record skipped")
        .unwrap_or_else(|| panic!("no skip event in {events:?}"));
    assert_eq!(skipped["operator"], "checked");
    assert_eq!(skipped["span"]["pipeline"], "logged", "{skipped}");
    assert!(skipped["reason"].as_str().unwrap().contains("is bad"));
}
