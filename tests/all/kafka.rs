//! Kafka against a real broker (`just test` starts one and sets
//! `KAFKA_BOOTSTRAP`): topics read and written by whole pipelines, offsets
//! resumed from checkpoints, and clear errors for what can go wrong.

use crate::support::*;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::Duration;

pub use mailer_test_support::kafka::{
    admin, bootstrap, consume_all, create_topic, create_topic_with, produce, producer, send, topic_exists,
    unique_topic,
};

/// A transaction of another producer left open in partition 0 of `topic`,
/// holding one record, `key` and `value` (as a process killed in the middle of a
/// commit leaves it, or one whose commit markers a leader failover
/// delays): the brokers abort it after 15 s.
pub(crate) fn transaction_left_open(topic: &str, key: &str, value: &str) -> BaseProducer {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique_topic("another-pipeline"))
        .set("transaction.timeout.ms", "15000")
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    let record = BaseRecord::<str, str>::to(topic)
        .partition(0)
        .key(key)
        .payload(value);
    producer.send(record).map_err(|(e, _)| e).unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
    producer
}

/// A fresh input topic of `partitions` partitions holding `records`, and a
/// fresh output topic of one partition.
pub(crate) fn topics(prefix: &str, partitions: i32, records: &[(String, String)]) -> (String, String) {
    let (input, output) = (
        unique_topic(&format!("{prefix}-in")),
        unique_topic(&format!("{prefix}-out")),
    );
    create_topic(&input, partitions);
    create_topic(&output, 1);
    produce(&input, records);
    (input, output)
}

pub(crate) fn pipeline(w: &Workdir, input: &str, output: &str, checkpoint: bool) -> std::path::PathBuf {
    let checkpoint = if checkpoint {
        "[checkpoint]\ninterval = \"200ms\"\npath = \"checkpoints\"\n"
    } else {
        ""
    };
    w.manifest(&format!(
        r#"
[pipeline]
name = "kafka-counts"
batch_size = 100

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}-group"
format = "string"
bounded = true

{KEYED_COUNT}
[sink]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topic = "{output}"

{checkpoint}"#
    ))
}

pub(crate) fn records(keys: usize, per_key: usize) -> Vec<(String, String)> {
    (0..per_key)
        .flat_map(|i| (0..keys).map(move |k| (format!("k{k}"), format!("v{i}"))))
        .collect()
}

/// Each of `keys` keys counted 1..=`per_key` exactly once in `got`.
pub(crate) fn assert_counts_once(got: &[(String, String)], keys: usize, per_key: usize, log: &str) {
    let mut got = got.to_vec();
    got.sort();
    let mut expected: Vec<(String, String)> = (0..keys)
        .flat_map(|k| (1..=per_key).map(move |c| (format!("k{k}"), c.to_string())))
        .collect();
    expected.sort();
    assert_eq!(
        got.len(),
        expected.len(),
        "records in the output; the log:\n{log}"
    );
    assert!(
        got == expected,
        "the output differs from one run's; the log:\n{log}"
    );
}

/// The largest count seen per key in the output topic.
fn counts(output: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (k, v) in consume_all(output, 1) {
        let c: &mut u64 = counts.entry(k).or_default();
        *c = (*c).max(v.parse().unwrap());
    }
    counts
}

#[test]
fn a_pipeline_reads_every_partition_and_writes_its_results_to_kafka() {
    let (input, output) = topics("in", 3, &records(10, 300));
    let w = Workdir::new();
    let out = run(&["run", pipeline(&w, &input, &output, false).to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected: BTreeMap<String, u64> = (0..10).map(|k| (format!("k{k}"), 300)).collect();
    assert_eq!(counts(&output), expected);
    assert_eq!(consume_all(&output, 1).len(), 3000, "one output per input record");
}

#[test]
fn a_restarted_pipeline_resumes_at_its_checkpointed_offsets_not_the_groups() {
    let (input, output) = topics("in", 3, &records(5, 100));
    let w = Workdir::new();
    let m = pipeline(&w, &input, &output, true);
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The group's committed offsets go back to the start: a restart that
    // followed them would count everything twice.
    let group: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", format!("{input}-group"))
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..3 {
        list.add_partition_offset(&input, p, Offset::Offset(0)).unwrap();
    }
    group.commit(&list, CommitMode::Sync).unwrap();
    produce(&input, &records(5, 20));
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("resuming from a checkpoint"),
        "{}",
        stderr(&out)
    );
    let expected: BTreeMap<String, u64> = (0..5).map(|k| (format!("k{k}"), 120)).collect();
    assert_eq!(counts(&output), expected);
}

#[test]
fn an_unreachable_broker_and_a_missing_topic_are_clear_errors() {
    let w = Workdir::new();
    let output = unique_topic("out");
    create_topic(&output, 1);
    let missing = unique_topic("missing");
    let text = std::fs::read_to_string(pipeline(&w, &missing, &output, false)).unwrap();
    let m = w.write("missing.toml", &text);
    let out = run(&["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(&format!("topic `{missing}`")), "{err}");
    assert_eq!(
        err.matches("the topic does not exist").count(),
        1,
        "said once: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(!topic_exists(&missing), "the missing source topic was made");

    // A missing output topic is refused too, and not made with the
    // brokers' defaults (auto.create.topics.enable is on by default).
    let (input, missing_output) = (unique_topic("in"), unique_topic("missing-out"));
    create_topic(&input, 1);
    let m = w.write(
        "missing-output.toml",
        &text.replace(&missing, &input).replace(&output, &missing_output),
    );
    let out = run(&["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(&format!("topic `{missing_output}`")), "{err}");
    assert!(err.contains("the topic does not exist"), "{err}");
    assert!(
        !topic_exists(&missing_output),
        "the missing output topic was made"
    );

    let m = w.write(
        "unreachable.toml",
        &text.replace("${KAFKA_BOOTSTRAP}", "127.0.0.1:1"),
    );
    let out = run(&["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("brokers `127.0.0.1:1`"), "{err}");
    assert!(err.contains("cannot reach the brokers"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Runs a Kafka -> Wasm keyed count -> Kafka pipeline, killing it with
/// SIGKILL `kills` times before letting it finish; what a `read_committed`
/// reader then sees of the output.
fn killed_runs(exactly_once: bool, kills: u64) -> Vec<(String, String)> {
    let (input, output) = topics("crash-in", 3, &records(CRASH_KEYS, CRASH_PER_KEY));
    let w = Workdir::new();
    let mut text = std::fs::read_to_string(pipeline(&w, &input, &output, true))
        .unwrap()
        .replace("interval = \"200ms\"", "interval = \"100ms\"");
    if exactly_once {
        text = text.replace("topic = \"", "exactly_once = true\ntopic = \"");
    }
    let m = w.write("pipeline.toml", &text);
    let mut resumed = 0;
    for i in 0..kills {
        resumed += u64::from(crate::checkpoints::run_and_kill(&w, &m, i, 300));
    }
    assert!(resumed > 0, "no run resumed from a checkpoint");
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut got = consume_all(&output, 1);
    got.sort();
    got
}

pub(crate) const CRASH_KEYS: usize = 10;
pub(crate) const CRASH_PER_KEY: usize = 10_000;

/// Each key's running count 1..=CRASH_PER_KEY once.
pub(crate) fn one_run_of_counts() -> Vec<(String, String)> {
    let mut expected: Vec<(String, String)> = (0..CRASH_KEYS)
        .flat_map(|k| (1..=CRASH_PER_KEY).map(move |c| (format!("k{k}"), c.to_string())))
        .collect();
    expected.sort();
    expected
}

#[test]
fn exactly_once_output_is_read_once_after_killed_runs() {
    let sweep = Sweep::start("kafka", "memory");
    let got = killed_runs(true, 2 * crate::checkpoints::kills());
    sweep.report(Tally::of_items(got, one_run_of_counts()));
}

#[test]
fn at_least_once_output_loses_nothing_after_killed_runs() {
    // Repeated counts are counted (`duplicated`), not a failure; lost ones
    // and counts no single run writes are.
    let sweep = Sweep::start("kafka", "memory").at_least_once();
    let got = killed_runs(false, crate::checkpoints::kills());
    sweep.report(Tally::of_items(got, one_run_of_counts()));
}

/// The manifest `pipelines/<name>` with its topics renamed (`renames`), its
/// source bounded, and its relative paths made absolute.
fn shipped_pipeline(w: &Workdir, name: &str, renames: &[(&str, &str)]) -> std::path::PathBuf {
    let mut text = std::fs::read_to_string(repo().join("pipelines").join(name))
        .unwrap()
        .replace("\"../plugins/", &format!("\"{}/plugins/", repo().display()))
        .replace("group_id = ", "bounded = true\ngroup_id = ");
    for (from, to) in renames {
        text = text.replace(&format!("\"{from}\""), &format!("\"{to}\""));
    }
    w.write(name, &text)
}

#[test]
fn kafka_orders_sums_each_customers_minutes() {
    let (input, output) = (unique_topic("orders"), unique_topic("order-totals"));
    create_topic(&input, 1);
    create_topic(&output, 1);
    // The orders happened in 2023; the results carry their window's time as
    // their Kafka timestamp, and a broker deletes records older than its
    // retention: move the orders to now, by whole minutes.
    let shift = {
        let now = mailer::clock::now_ms();
        (now - 1_699_999_900_000) / 60_000 * 60_000
    };
    let csv: String = std::fs::read_to_string(repo().join("pipelines/data/orders.csv"))
        .unwrap()
        .lines()
        .map(|l| {
            let (rest, ts) = l.rsplit_once(',').unwrap();
            format!("{rest},{}\n", ts.parse::<i64>().unwrap() + shift)
        })
        .collect();
    let lines: Vec<(String, String)> = csv.lines().map(|l| (String::new(), l.to_owned())).collect();
    produce(&input, &lines);
    let w = Workdir::new();
    let m = shipped_pipeline(
        &w,
        "kafka-orders.toml",
        &[("orders", &input), ("order-totals", &output)],
    );
    // No order is late with an hour of out-of-orderness: every order counts.
    let text = std::fs::read_to_string(&m).unwrap().replace("\"5s\"", "\"1h\"");
    let m = w.write("kafka-orders.toml", &text);
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut expected: BTreeMap<(String, i64), (u64, f64)> = BTreeMap::new();
    for line in csv.lines() {
        let f: Vec<&str> = line.split(',').collect();
        let ts: i64 = f[3].parse().unwrap();
        let e = expected
            .entry((f[1].to_owned(), ts - ts.rem_euclid(60_000)))
            .or_default();
        e.0 += 1;
        e.1 += f[2].parse::<f64>().unwrap();
    }
    let mut got: BTreeMap<(String, i64), (u64, f64)> = BTreeMap::new();
    for (_, v) in consume_all(&output, 1) {
        let d: serde_json::Value = serde_json::from_str(&v).unwrap();
        let k = (
            d["key"].as_str().unwrap().to_owned(),
            d["start"].as_i64().unwrap(),
        );
        got.insert(k, (d["count"].as_u64().unwrap(), d["sum"].as_f64().unwrap()));
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (k, (count, sum)) in &expected {
        let (c, s) = got[k];
        assert_eq!(c, *count, "{k:?}");
        assert!((s - sum).abs() < 1e-6, "{k:?}: {s} vs {sum}");
    }
}

#[test]
fn the_exactly_once_pipeline_counts_each_event_once() {
    let (input, output) = topics("events", 3, &records(4, 500));
    let w = Workdir::new();
    let m = shipped_pipeline(
        &w,
        "exactly-once.toml",
        &[("events", &input), ("event-counts", &output)],
    );
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut got = consume_all(&output, 1);
    got.sort();
    let mut expected: Vec<(String, String)> = (0..4)
        .flat_map(|k| (1..=500).map(move |c| (format!("k{k}"), c.to_string())))
        .collect();
    expected.sort();
    assert!(
        got == expected,
        "{} records read, {} expected",
        got.len(),
        expected.len()
    );
}

/// Sends `{"user":"u<partition>","ts":<t>}` to `partition` of `topic` for
/// each time, and waits until the broker has them.
fn send_times(producer: &BaseProducer, topic: &str, partition: i32, times: impl IntoIterator<Item = i64>) {
    for ts in times {
        let value = format!("{{\"user\":\"u{partition}\",\"ts\":{ts}}}");
        producer
            .send(
                BaseRecord::<str, str>::to(topic)
                    .partition(partition)
                    .payload(&value),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// JSON records of `input` keyed by `user` at time `ts` -> tumbling 10 s
/// windows (firing on watermarks of no delay, plus `watermark_extra`) ->
/// stdout.
fn json_windows(w: &Workdir, input: &str, watermark_extra: &str) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "json-windows"

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
{watermark_extra}

[[operators]]
type = "key_by"

[[operators]]
type = "window"
window = "tumbling"
size = "10s"

[sink]
type = "stdout"
format = "value"
"#
    ))
}

/// Drains a running pipeline (SIGTERM) and returns what it printed.
fn drain(child: std::process::Child) -> std::process::Output {
    sigterm(&child);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    out
}

pub(crate) fn plain_producer() -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("enable.idempotence", "true")
        .create()
        .unwrap()
}

const T0: i64 = 1_700_000_000_000;

#[test]
fn each_partition_holds_the_watermark_back_so_a_slow_one_is_not_late() {
    let input = unique_topic("wm-in");
    create_topic(&input, 2);
    let producer = plain_producer();
    let w = Workdir::new();
    let m = json_windows(&w, &input, "");
    // Partition 0 is read 100 s of event time ahead; partition 1 has
    // nothing yet, so it holds the watermark back (no idle timeout) ...
    send_times(&producer, &input, 0, (0..500).map(|i| T0 + i * 200));
    let child = spawn_run(&m);
    std::thread::sleep(Duration::from_secs(3));
    // ... and its records, arriving later at earlier times, are not late.
    send_times(&producer, &input, 1, (0..10).map(|i| T0 + i * 1_000));
    std::thread::sleep(Duration::from_secs(2));
    let out = drain(child);
    assert_eq!(
        finished_field(&stderr(&out), "late_records"),
        0,
        "{}",
        stderr(&out)
    );
    assert_eq!(
        finished_field(&stderr(&out), "source_records"),
        510,
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_bounded_read_ends_at_partitions_that_end_with_a_transaction_marker() {
    let (input, output) = (unique_topic("txn-in"), unique_topic("txn-out"));
    create_topic(&input, 2);
    create_topic(&output, 1);
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", unique_topic("txn-producer"))
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer.begin_transaction().unwrap();
    for i in 0..100 {
        let value = format!("v{i}");
        producer
            .send(
                BaseRecord::<str, str>::to(&input)
                    .key("k")
                    .partition(i % 2)
                    .payload(&value),
            )
            .unwrap();
    }
    // Each partition now ends with the transaction's commit marker.
    producer.commit_transaction(Duration::from_secs(30)).unwrap();
    let w = Workdir::new();
    let mut child = spawn_run(&pipeline(&w, &input, &output, false));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the bounded read stalled at the end of a partition");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(counts(&output), BTreeMap::from([("k".to_owned(), 100)]));
}

#[test]
fn a_source_starts_from_the_groups_committed_offsets_or_a_time_when_asked() {
    let (input, output) = topics("start-in", 1, &records(1, 50));
    // The group has read the first 20.
    let group: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", format!("{input}-group"))
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&input, 0, Offset::Offset(20)).unwrap();
    group.commit(&list, CommitMode::Sync).unwrap();
    let w = Workdir::new();
    let text = std::fs::read_to_string(pipeline(&w, &input, &output, false)).unwrap();
    let m = w.write(
        "committed.toml",
        &text.replace(
            "format = \"string\"",
            "format = \"string\"\nstart = \"committed\"",
        ),
    );
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(finished_field(&stderr(&out), "source_records"), 30);
    // From a time after every record: nothing to read.
    let later = mailer::clock::now_ms() + 60_000;
    let m = w.write(
        "time.toml",
        &text.replace(
            "format = \"string\"",
            &format!("format = \"string\"\nstart = {{ timestamp = {later} }}"),
        ),
    );
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(finished_field(&stderr(&out), "source_records"), 0);
}

#[test]
fn an_idle_partition_stops_holding_the_watermark_back_after_the_idle_timeout() {
    // Windows fire on watermarks only (a drain fires none): output means
    // event time advanced while partition 1 stayed empty.
    let fired = |idle: &str| {
        let input = unique_topic("idle-in");
        create_topic(&input, 2);
        let producer = plain_producer();
        let w = Workdir::new();
        let child = spawn_run(&json_windows(&w, &input, idle));
        // Partition 0 keeps producing, 10 s of event time every 100 ms;
        // partition 1 never does.
        for i in 0..40 {
            send_times(&producer, &input, 0, [T0 + i * 10_000]);
            std::thread::sleep(Duration::from_millis(100));
        }
        stdout(&drain(child)).lines().count()
    };
    assert_eq!(
        fired(""),
        0,
        "without an idle timeout the empty partition holds event time"
    );
    assert!(
        fired("idle_timeout = \"1s\"") > 0,
        "after the idle timeout the other partition drives event time"
    );
}

/// Runs `m`, which writes records a, b and c to `output` with b failing;
/// checks a and c arrived, and returns the one dead letter.
fn dead_letters_b(w: &Workdir, m: &std::path::Path, output: &str) -> String {
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got: Vec<String> = consume_all(output, 1).into_iter().map(|(k, _)| k).collect();
    assert_eq!(got, ["a", "c"]);
    let dead = w.read("dead.jsonl");
    assert_eq!(dead.lines().count(), 1, "{dead}");
    dead
}

/// A bounded Kafka -> Kafka pipeline with `source` and `sink` settings and
/// a dead-letter file.
fn policy_pipeline(
    w: &Workdir,
    name: &str,
    input: &str,
    output: &str,
    source: &str,
    sink: &str,
) -> std::path::PathBuf {
    w.write(
        name,
        &format!(
            r#"
[pipeline]
name = "kafka-policies"

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}-group"
bounded = true
{source}

[sink]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topic = "{output}"
{sink}

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"
"#
        ),
    )
}

#[test]
fn undecodable_source_records_follow_the_failure_policy() {
    let (input, output) = topics(
        "undecodable",
        1,
        &[
            ("a".into(), r#"{"n":1}"#.into()),
            ("b".into(), "not json".into()),
            ("c".into(), r#"{"n":3}"#.into()),
        ],
    );
    let w = Workdir::new();
    let m = policy_pipeline(
        &w,
        "dl.toml",
        &input,
        &output,
        "format = \"json\"\non_error = \"dead-letter\"",
        "",
    );
    let dead = dead_letters_b(&w, &m, &output);
    assert!(dead.contains(r#""value":"not json""#), "{dead}");
    assert!(
        dead.contains(&format!(
            "topic `{input}` partition 0 offset 1: the value is not JSON"
        )),
        "{dead}"
    );

    let m = policy_pipeline(&w, "fail.toml", &input, &output, "format = \"json\"", "");
    let out = run(&["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "topic `{input}` partition 0 offset 1: the value is not JSON"
        )),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn source_records_over_max_record_bytes_follow_the_failure_policy() {
    let (input, output) = topics(
        "too-big",
        1,
        &[
            ("a".into(), "small".into()),
            ("b".into(), "x".repeat(5000)),
            ("c".into(), "small".into()),
        ],
    );
    let w = Workdir::new();
    let m = policy_pipeline(
        &w,
        "dl.toml",
        &input,
        &output,
        "max_record_bytes = 1000\non_error = \"dead-letter\"",
        "",
    );
    let dead = dead_letters_b(&w, &m, &output);
    assert!(
        dead.contains(&format!(
            "topic `{input}` partition 0 offset 1: 5001 bytes, more than `max_record_bytes` (1000)"
        )),
        "{dead}"
    );
    assert!(
        dead.len() < 3000,
        "only the record's start is kept: {} bytes",
        dead.len()
    );
}

#[test]
fn records_the_brokers_refuse_follow_the_sinks_failure_policy() {
    let big = "x".repeat(3000);
    let (input, output) = topics(
        "refused",
        1,
        &[
            ("a".into(), "small".into()),
            ("b".into(), big),
            ("c".into(), "small".into()),
        ],
    );
    let w = Workdir::new();
    let limit = "options = { \"message.max.bytes\" = \"1000\" }";
    let m = policy_pipeline(
        &w,
        "dl.toml",
        &input,
        &output,
        "",
        &format!("{limit}\non_error = \"dead-letter\""),
    );
    let dead = dead_letters_b(&w, &m, &output);
    assert!(
        dead.contains(r#""key":"b""#) && dead.contains("too large"),
        "{dead}"
    );

    let m = policy_pipeline(&w, "fail.toml", &input, &output, "", limit);
    let out = run(&["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("topic `{output}`")) && err.contains("too large"),
        "{err}"
    );
    assert!(err.contains(r#"key="b""#), "names the record: {err}");
}

/// The customers' changelog the table tests read: three rows, Bob's
/// changed, then Carol's deleted by a tombstone; flushed.
fn produce_customers(producer: &BaseProducer, topic: &str) {
    for (key, value) in [
        ("alice", r#"{"tier":"gold"}"#),
        ("bob", r#"{"tier":"silver"}"#),
        ("carol", r#"{"tier":"bronze"}"#),
        ("bob", r#"{"tier":"platinum"}"#),
    ] {
        send(producer, topic, key, value.as_bytes());
    }
    let tombstone = BaseRecord::<str, [u8]>::to(topic).key("carol");
    producer.send(tombstone).map_err(|(e, _)| e).unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// A table fed by a compacted topic: the latest row per key, a tombstone
/// (a record without a value) deletes its key. Orders written after every
/// change of the table are joined, as of their time, with the rows left.
#[test]
fn a_table_from_a_compacted_topic_keeps_the_latest_rows_and_tombstones_delete() {
    let (customers, orders) = (unique_topic("table-customers"), unique_topic("table-orders"));
    create_topic_with(&customers, 1, &[("cleanup.policy", "compact")]);
    create_topic(&orders, 1);
    let producer = producer();
    produce_customers(&producer, &customers);
    // Every order is written after the last change, so it sees all of them.
    std::thread::sleep(Duration::from_millis(20));
    for (i, who) in ["alice", "bob", "carol", "dave"].iter().enumerate() {
        send(&producer, &orders, who, format!(r#"{{"order":{i}}}"#).as_bytes());
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let w = Workdir::new();
    let kafka = |name: &str, topic: &str| {
        format!(
            "[[sources]]\nname = \"{name}\"\ntype = \"kafka\"\nbootstrap_servers = \"${{KAFKA_BOOTSTRAP}}\"\ntopics = [\"{topic}\"]\ngroup_id = \"{topic}\"\nformat = \"json\"\nbounded = true\n"
        )
    };
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "kafka-table"

{}
{}
[watermark]
max_out_of_orderness = "0s"

[[operators]]
name = "orders-by-customer"
type = "key_by"
input = "orders"

[[operators]]
name = "customers-by-id"
type = "key_by"
input = "customers"

[[operators]]
name = "enriched"
type = "lookup_join"
input = "orders-by-customer"
table = "customers-by-id"
as_of = "event_time"
join = "left"

[[sinks]]
name = "out"
type = "stdout"
format = "text"
"#,
        kafka("orders", &orders),
        kafka("customers", &customers)
    ));
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut got: Vec<&str> = text.lines().collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "alice\t{\"stream\":{\"order\":0},\"table\":{\"tier\":\"gold\"}}",
            "bob\t{\"stream\":{\"order\":1},\"table\":{\"tier\":\"platinum\"}}",
            "carol\t{\"stream\":{\"order\":2},\"table\":null}",
            "dave\t{\"stream\":{\"order\":3},\"table\":null}",
        ]
    );
}

/// A global table fed by an unbounded compacted topic: the orders, written
/// before any change of the table, are read only once the table caught up
/// with its topic, so each meets its customer's last row (a tombstone
/// deleted carol's); the join runs on two workers with no `key_by`.
#[test]
fn a_global_table_from_a_compacted_topic_is_loaded_before_the_stream_is_read() {
    let (customers, orders) = (unique_topic("global-customers"), unique_topic("global-orders"));
    create_topic_with(&customers, 2, &[("cleanup.policy", "compact")]);
    create_topic(&orders, 2);
    let producer = producer();
    for (i, who) in ["alice", "bob", "carol", "dave"].iter().enumerate() {
        send(&producer, &orders, who, format!(r#"{{"order":{i}}}"#).as_bytes());
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    produce_customers(&producer, &customers);
    let w = Workdir::new();
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "kafka-global-table"

[[sources]]
name = "orders"
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{orders}"]
group_id = "{orders}"
format = "json"

[[sources]]
name = "customers"
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{customers}"]
group_id = "{customers}"
format = "json"

[[operators]]
name = "enriched"
type = "lookup_join"
input = "orders"
table = "customers"
global = true
join = "left"
parallelism = 2

[[sinks]]
name = "out"
type = "file"
path = "out.txt"
format = "text"

[checkpoint]
interval = "100ms"
path = "checkpoints"
"#
    ));
    let child = spawn_run(&m);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let lines = || {
        std::fs::read_to_string(w.path("out.txt"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    while lines() < 4 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    sigterm(&child);
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = w.read("out.txt");
    let mut got: Vec<&str> = text.lines().collect();
    got.sort_unstable();
    assert_eq!(
        got,
        [
            "alice\t{\"stream\":{\"order\":0},\"table\":{\"tier\":\"gold\"}}",
            "bob\t{\"stream\":{\"order\":1},\"table\":{\"tier\":\"platinum\"}}",
            "carol\t{\"stream\":{\"order\":2},\"table\":null}",
            "dave\t{\"stream\":{\"order\":3},\"table\":null}",
        ],
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("the global tables are loaded"),
        "{}",
        stderr(&out)
    );
}
