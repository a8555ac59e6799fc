//! One exactly-once process against what only a real broker does: a
//! checkpoint stalled past the transaction timeout, so the brokers abort the
//! open transaction themselves; the output partition's leader and the
//! transaction coordinator killed mid-run on a cluster of three. Checked with an independent `read_committed`
//! reader: each key's counts 1..n exactly once, nothing else.

use crate::kafka::{assert_counts_once, bootstrap, pipeline, records};
use crate::support::*;
use mailer_test_support::kafka::{consume_all_at, create_topic_at, produce_at, unique_topic};
use mailer_test_support::kafka_cluster::KafkaCluster;
use std::process::{Child, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Reads `output` at `brokers` until it holds `total` records, or 120 s
/// pass.
fn output_of(brokers: &str, output: &str, total: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let got = consume_all_at(brokers, output, 1);
        if got.len() >= total || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Each round, `KEYS` keys get `PER_ROUND` records each.
const KEYS: usize = 10;
const PER_ROUND: usize = 20;

/// An exactly-once counting run at `brokers` from a fresh input topic of 3
/// partitions to a fresh output topic, unbounded, with sink `options` and a
/// checkpoint every `interval`; its input fed `rounds` rounds, one every
/// `pause` by the thread returned (all at once before the run starts when
/// `pause` is zero). Once the output holds records (a transaction
/// committed), the run's process, the thread and the output topic are
/// returned.
fn counting_run(
    w: &Workdir,
    brokers: &str,
    options: &str,
    interval: &str,
    (rounds, pause): (usize, Duration),
) -> (Child, JoinHandle<()>, String) {
    let (input, output) = (unique_topic("faults-in"), unique_topic("faults-out"));
    create_topic_at(brokers, &input, 3, &[]);
    create_topic_at(brokers, &output, 1, &[]);
    let text = std::fs::read_to_string(pipeline(w, &input, &output, true))
        .unwrap()
        .replace("bounded = true\n", "")
        .replace("interval = \"200ms\"", &format!("interval = \"{interval}\""))
        .replace(
            "topic = \"",
            &format!("exactly_once = true\noptions = {{ {options} }}\ntopic = \""),
        );
    let m = w.write("pipeline.toml", &text);
    if pause.is_zero() {
        produce_at(brokers, &input, &records(KEYS, PER_ROUND * rounds));
    }
    let child = mailer()
        .arg("run")
        .arg(&m)
        .env("KAFKA_BOOTSTRAP", brokers)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let feed = {
        let brokers = brokers.to_owned();
        std::thread::spawn(move || {
            if pause.is_zero() {
                return;
            }
            for _ in 0..rounds {
                produce_at(&brokers, &input, &records(KEYS, PER_ROUND));
                std::thread::sleep(pause);
            }
        })
    };
    output_of(brokers, &output, 1);
    (child, feed, output)
}

/// Waits for the feed's whole output, drains the run, and checks that it
/// ran until then and each key was counted once per record — also when
/// read again after the run stopped. Returns the run's log.
fn finish(mut child: Child, feed: JoinHandle<()>, brokers: &str, output: &str, rounds: usize) -> String {
    feed.join().unwrap();
    let per_key = PER_ROUND * rounds;
    let got = output_of(brokers, output, KEYS * per_key);
    let still_running = child.try_wait().unwrap().is_none();
    if still_running {
        sigterm(&child);
    }
    let out = child.wait_with_output().unwrap();
    let log = stderr(&out);
    assert!(still_running, "the run went on:\n{log}");
    assert!(out.status.success(), "{log}");
    assert_counts_once(&got, KEYS, per_key, &log);
    assert_counts_once(&consume_all_at(brokers, output, 1), KEYS, per_key, &log);
    log
}

#[test]
fn a_checkpoint_stalled_past_the_transaction_timeout_is_aborted_and_the_run_goes_on_exactly() {
    let w = Workdir::new();
    // Records all the time, a checkpoint every 800 ms (times 5 with the 3
    // failures tolerated in a row: within the 4 s timeout): a transaction
    // is open with records at almost any moment.
    let rounds = 200;
    let (child, feed, output) = counting_run(
        &w,
        &bootstrap(),
        r#""transaction.timeout.ms" = "4000""#,
        "800ms",
        (rounds, Duration::from_millis(100)),
    );
    // Frozen twice for 9 s mid-stream: the brokers abort the open
    // transaction after its 4 s timeout (they look every 2 s).
    for _ in 0..2 {
        // SAFETY: kill(2) on our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGSTOP) };
        std::thread::sleep(Duration::from_secs(9));
        unsafe { libc::kill(child.id() as i32, libc::SIGCONT) };
        std::thread::sleep(Duration::from_secs(3));
    }
    let log = finish(child, feed, &bootstrap(), &output, rounds);
    assert!(
        log.contains("the brokers aborted the open transaction")
            && log.contains("restarting from the committed checkpoint"),
        "the abort and the restart are said: {log}"
    );
}

#[test]
fn a_killed_partition_leader_and_transaction_coordinator_are_survived_exactly() {
    let cluster = KafkaCluster::start(3);
    let w = Workdir::new();
    let rounds = 150;
    let (child, feed, output) = counting_run(
        &w,
        cluster.bootstrap(),
        "",
        "1s",
        (rounds, Duration::from_millis(100)),
    );
    // The output partition's leader dies mid-transaction and comes back;
    // then the node coordinating the sink's transactions does.
    let leader = cluster.leader(&output, 0);
    cluster.kill(leader);
    std::thread::sleep(Duration::from_secs(4));
    cluster.restart(leader);
    std::thread::sleep(Duration::from_secs(2));
    let coordinator = cluster.transaction_coordinator(&format!("mailer.kafka-counts.{output}"));
    cluster.kill(coordinator);
    std::thread::sleep(Duration::from_secs(4));
    cluster.restart(coordinator);
    finish(child, feed, cluster.bootstrap(), &output, rounds);
}

#[test]
fn an_outage_of_every_broker_longer_than_a_flush_waits_is_ridden_out_exactly() {
    let cluster = KafkaCluster::start(3);
    let w = Workdir::new();
    // 240 000 records fed before the run starts: it has committed its first
    // transaction only and is still writing when every node freezes, so
    // records wait for acknowledgements the brokers give only 45 s later
    // (within the 2 min `delivery_timeout`, past the 30 s a single flush or
    // commit waits).
    let rounds = 1200;
    let (child, feed, output) = counting_run(&w, cluster.bootstrap(), "", "1s", (rounds, Duration::ZERO));
    for node in 1..=3 {
        cluster.signal(node, libc::SIGSTOP);
    }
    std::thread::sleep(Duration::from_secs(45));
    for node in 1..=3 {
        cluster.signal(node, libc::SIGCONT);
    }
    let log = finish(child, feed, cluster.bootstrap(), &output, rounds);
    assert!(
        log.contains("the brokers did not take every record yet; waiting"),
        "the run waited through the outage: {log}"
    );
}
