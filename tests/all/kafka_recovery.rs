//! Recovery against the Kafka broker: the exactly-once sink resumes from
//! exactly the checkpoint its commit record names (whatever happens to
//! consumer groups), refuses when that record is gone, never sticks on a
//! record the topic refuses; SIGKILLs between "checkpoint durable" and
//! "transaction committed" neither lose nor repeat output; the source
//! reads partitions that get their first record after a checkpoint, and
//! partitions added while it runs.

use crate::checkpoints::{kills, run_and_kill};
use crate::kafka::{
    CRASH_KEYS, CRASH_PER_KEY, admin, bootstrap, consume_all, create_topic, create_topic_with,
    one_run_of_counts, pipeline, plain_producer, records, topics, transaction_left_open, unique_topic,
};
use crate::support::*;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminOptions, NewPartitions};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The exactly-once Kafka -> Wasm count -> Kafka pipeline of the crash
/// tests, over a fresh input of `CRASH_KEYS` x `CRASH_PER_KEY` records.
fn exactly_once(w: &Workdir) -> (PathBuf, String) {
    let (input, output) = topics("eo-in", 3, &records(CRASH_KEYS, CRASH_PER_KEY));
    let text = std::fs::read_to_string(pipeline(w, &input, &output, true))
        .unwrap()
        .replace("interval = \"200ms\"", "interval = \"100ms\"")
        .replace("topic = \"", "exactly_once = true\ntopic = \"");
    (w.write("pipeline.toml", &text), output)
}

fn sorted(mut records: Vec<(String, String)>) -> Vec<(String, String)> {
    records.sort();
    records
}

fn assert_one_run(output: &str) {
    one_run_tally(output).assert_exactly_once("the committed output");
}

/// What a `read_committed` reader sees of `output`, against one run's.
fn one_run_tally(output: &str) -> Tally {
    Tally::of_items(consume_all(output, 1), one_run_of_counts())
}

#[test]
fn deleting_consumer_group_offsets_does_not_move_an_exactly_once_restart() {
    let w = Workdir::new();
    let (m, output) = exactly_once(&w);
    assert!(!run_and_kill(&w, &m, 1, 300));
    // What expiry of idle groups' offsets does to a stopped pipeline: every
    // group it touched is gone.
    let (admin, runtime) = admin();
    let text = w.read("pipeline.toml");
    let source_group = text
        .lines()
        .find_map(|l| l.strip_prefix("group_id = "))
        .unwrap()
        .trim_matches('"')
        .to_owned();
    let groups = [
        source_group,
        format!("mailer-commits.kafka-counts.{output}"),
        "mailer-commit-reader.kafka-counts".to_owned(),
    ];
    let groups: Vec<&str> = groups.iter().map(String::as_str).collect();
    // A group that never existed is refused; that is fine.
    let _ = runtime.block_on(admin.delete_groups(&groups, &AdminOptions::new()));
    let log = run_to_end(&m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert_one_run(&output);
}

#[test]
fn a_deleted_commit_record_refuses_the_restart_until_the_user_chooses() {
    let w = Workdir::new();
    let (m, output) = exactly_once(&w);
    assert!(!run_and_kill(&w, &m, 2, 300));
    // A tombstone for the sink's key in the commit topic.
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .unwrap();
    let key = format!("kafka-counts\u{0}{output}");
    producer
        .send(
            BaseRecord::<str, [u8]>::to("mailer-commits")
                .partition(0)
                .key(key.as_str()),
        )
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();

    let refused = run(&["run", m.to_str().unwrap()]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(message.contains("no record of having committed any"), "{message}");
    assert!(
        message.contains("--from-checkpoint") && message.contains("--fresh"),
        "{message}"
    );
    // The user picks the newest checkpoint knowingly; the run goes on.
    let newest = std::fs::read_to_string(w.path("checkpoints/LATEST")).unwrap();
    let log = run_to_end(&m, &["--from-checkpoint", newest.trim()]);
    assert!(
        log.contains("resuming from the checkpoint named by --from-checkpoint"),
        "{log}"
    );
}

#[test]
fn a_record_too_large_for_the_topic_follows_on_error_instead_of_aborting_every_transaction() {
    let input = unique_topic("big-in");
    let output = unique_topic("big-out");
    create_topic(&input, 1);
    create_topic_with(&output, 1, &[("max.message.bytes", "2000")]);
    let mut input_records: Vec<(String, String)> =
        (0..300).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    input_records[150].1 = "x".repeat(5000);
    crate::kafka::produce(&input, &input_records);
    let w = Workdir::new();
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "big-record"
batch_size = 20

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}"
format = "string"
bounded = true

[sink]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topic = "{output}"
exactly_once = true
on_error = "dead-letter"

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"

[checkpoint]
interval = "100ms"
path = "checkpoints"
keep = 1
"#
    ));
    run_to_end(&m, &[]);
    let mut expected = input_records.clone();
    expected.remove(150);
    assert_eq!(sorted(consume_all(&output, 1)), sorted(expected));
    let dead = w.read("dead.jsonl");
    assert_eq!(dead.lines().count(), 1, "{dead}");
    assert!(dead.contains("k150"), "{dead}");
}

/// Starts `m` with `env`, kills it with SIGKILL as soon as its standard
/// error says `marker` the `nth` time; whether it did before the run ended
/// (the kill counted toward the thread's [`Sweep`]).
fn kill_at_marker(m: &Path, env: (&str, &str), marker: &str, nth: usize) -> bool {
    kill_at_marker_seeing(m, env, marker, nth, |_| {})
}

/// [`kill_at_marker`], telling `seeing` how many times the marker was
/// said each time it is, before the kill.
fn kill_at_marker_seeing(
    m: &Path,
    env: (&str, &str),
    marker: &str,
    nth: usize,
    mut seeing: impl FnMut(usize),
) -> bool {
    let mut child = mailer()
        .arg("run")
        .arg(m)
        .env(env.0, env.1)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut seen = 0;
    for line in stderr.lines() {
        if line.unwrap().contains(marker) {
            seen += 1;
            seeing(seen);
            if seen == nth {
                child.kill().unwrap();
                break;
            }
        }
    }
    let hit = seen == nth;
    if hit {
        count_kill();
    }
    child.wait().unwrap();
    hit
}

/// SIGKILLs that land after a checkpoint is durable and before the sink
/// committed its output, again and again: the output is still one run's.
pub(crate) fn killed_between_durable_and_committed(m: &Path) {
    let mut kills_landed = 0;
    for i in 0..kills() {
        // At the first, second or third commit of a run: the runs make
        // progress, and each kill lands in the gap.
        if !kill_at_marker(
            m,
            ("MAILER_TEST_PAUSE_BEFORE_COMMIT_MS", "300"),
            "durable, not committed",
            1 + (i as usize % 3),
        ) {
            break;
        }
        kills_landed += 1;
    }
    assert!(
        kills_landed >= 3,
        "only {kills_landed} kills landed before the input ended"
    );
    run_to_end(m, &[]);
}

#[test]
fn kills_between_a_durable_checkpoint_and_its_commit_neither_lose_nor_repeat_kafka_output() {
    let sweep = Sweep::start("kafka", "memory");
    let w = Workdir::new();
    let (m, output) = exactly_once(&w);
    killed_between_durable_and_committed(&m);
    sweep.report(one_run_tally(&output));
}

#[test]
fn a_transaction_another_pipeline_left_open_in_the_commit_topic_holds_a_restart_back_not_back_in_time() {
    let w = Workdir::new();
    let (_, output) = exactly_once(&w);
    let commits = unique_topic("shared-commits");
    let text = w.read("pipeline.toml").replacen(
        "exactly_once = true\n",
        &format!("exactly_once = true\ncommit_topic = \"{commits}\"\n"),
        1,
    );
    let m = w.write("pipeline.toml", &text);
    // The sink's first record ("nothing committed yet"), the other
    // pipeline's open transaction, then this sink's commits of checkpoints
    // 1 and 2, and a SIGKILL before the commit of 3.
    let mut other = None;
    let killed = kill_at_marker_seeing(
        &m,
        ("MAILER_TEST_PAUSE_BEFORE_COMMIT_MS", "300"),
        "durable, not committed",
        3,
        |seen| {
            if seen == 1 {
                other = Some(transaction_left_open(
                    &commits,
                    "another-pipeline\u{0}its-topic",
                    r#"{"pipeline":"another-pipeline","topic":"its-topic","checkpoint":7}"#,
                ));
            }
        },
    );
    assert!(killed, "the run ended before its third commit");
    let log = run_to_end(&m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert!(log.contains("neither committed nor aborted yet"), "{log}");
    assert_one_run(&output);
    drop(other);
}

/// An unbounded Kafka source of `input` (starting at `start`) to a file,
/// checkpointed every 100 ms.
fn to_file(w: &Workdir, input: &str, start: &str) -> PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "to-file"
batch_size = 50

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}"
format = "string"
start = "{start}"
partition_discovery = "500ms"

[sink]
type = "file"
path = "out.txt"

[checkpoint]
interval = "100ms"
path = "checkpoints"
"#
    ))
}

/// Sends `value` to `partition` of `topic`, waiting while the producer
/// does not know the partition yet (just added).
fn send_to(producer: &BaseProducer, topic: &str, partition: i32, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut record = BaseRecord::<str, str>::to(topic)
        .partition(partition)
        .key("k")
        .payload(value);
    while let Err((e, back)) = producer.send(record) {
        assert!(
            Instant::now() < deadline,
            "cannot send to partition {partition}: {e}"
        );
        producer.poll(Duration::from_millis(100));
        record = back;
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Waits until the output file holds `value`.
fn wait_for_output(w: &Workdir, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !std::fs::read_to_string(w.path("out.txt"))
        .unwrap_or_default()
        .contains(value)
    {
        assert!(Instant::now() < deadline, "`{value}` never reached the output");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_partition_whose_first_record_comes_after_a_checkpoint_is_read_after_a_crash() {
    let input = unique_topic("late-first");
    create_topic(&input, 2);
    let w = Workdir::new();
    let m = to_file(&w, &input, "latest");
    let producer = plain_producer();
    let mut running = spawn_manifest(&m);
    wait_for_new_checkpoint(&w.path("checkpoints"));
    send_to(&producer, &input, 0, "first-of-partition-0");
    wait_for_output(&w, "first-of-partition-0");
    wait_for_new_checkpoint(&w.path("checkpoints"));
    running.0.kill().unwrap();
    running.0.wait().unwrap();
    // Partition 1 gets its first record while the pipeline is down.
    send_to(&producer, &input, 1, "first-of-partition-1");
    let mut resumed = spawn_manifest(&m);
    wait_for_output(&w, "first-of-partition-1");
    sigterm(&resumed.0);
    assert!(resumed.0.wait().unwrap().success());
}

#[test]
fn partitions_added_while_running_are_read_from_their_beginning() {
    let input = unique_topic("grows");
    create_topic(&input, 1);
    let w = Workdir::new();
    let m = to_file(&w, &input, "earliest");
    let producer = plain_producer();
    let mut running = spawn_manifest(&m);
    send_to(&producer, &input, 0, "in-partition-0");
    wait_for_output(&w, "in-partition-0");
    let (admin, runtime) = admin();
    for r in runtime
        .block_on(admin.create_partitions([&NewPartitions::new(&input, 3)], &AdminOptions::new()))
        .unwrap()
    {
        r.unwrap();
    }
    // A new producer: the old one learns of new partitions only minutes later.
    let producer = plain_producer();
    send_to(&producer, &input, 1, "in-partition-1");
    send_to(&producer, &input, 2, "in-partition-2");
    wait_for_output(&w, "in-partition-1");
    wait_for_output(&w, "in-partition-2");
    // And after a crash and a restart, nothing is read twice.
    wait_for_new_checkpoint(&w.path("checkpoints"));
    running.0.kill().unwrap();
    running.0.wait().unwrap();
    let mut resumed = spawn_manifest(&m);
    send_to(&producer, &input, 2, "after-restart");
    wait_for_output(&w, "after-restart");
    sigterm(&resumed.0);
    assert!(resumed.0.wait().unwrap().success());
    let out = w.read("out.txt");
    for value in [
        "in-partition-0",
        "in-partition-1",
        "in-partition-2",
        "after-restart",
    ] {
        assert_eq!(out.matches(value).count(), 1, "{value} in {out}");
    }
}

#[test]
fn a_checkpoint_interval_the_transaction_timeout_cannot_cover_is_refused_at_validate() {
    let w = Workdir::new();
    // 4 minutes, times 5 with the 3 failed checkpoints tolerated in a row
    // by default: over the 15 minutes a transaction may stay open.
    let text = std::fs::read_to_string(pipeline(&w, "in", "out", true))
        .unwrap()
        .replace("interval = \"200ms\"", "interval = \"4m\"")
        .replace("topic = \"", "exactly_once = true\ntopic = \"");
    let m = w.write("pipeline.toml", &text);
    let out = run(&["validate", m.to_str().unwrap()]);
    assert!(!out.status.success());
    let message = stderr(&out);
    assert!(
        message.contains("times 5 must be at most the Kafka sink's transaction timeout")
            && message.contains("`tolerable_failures` = 3"),
        "{message}"
    );
    // With one failure tolerated, the same interval fits (4 minutes x 3).
    let fits = text.replace("interval = \"4m\"", "interval = \"4m\"\ntolerable_failures = 1");
    let m = w.write("pipeline.toml", &fits);
    let out = run(&["validate", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}
