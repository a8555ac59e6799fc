//! Cluster mode through what only a real broker does: a member frozen past
//! its session and transaction timeouts (a zombie) while its partitions
//! move; the group's committed offsets gone while the pipeline is stopped
//! (as `offsets.retention.minutes` deletes them). Every check reads the output with an independent `read_committed`
//! consumer: each word's counts 1..n exactly once, nothing else.

use crate::cluster_runs::{
    Member, assert_exact_counts, held_by_each, input_and_output, keyed_tasks_of, lines, settled_status,
    word_count, word_count_with,
};
use crate::kafka::{admin, bootstrap, produce, topic_exists, transaction_left_open, unique_topic};
use crate::support::*;
use rdkafka::ClientConfig;
use rdkafka::TopicPartitionList;
use rdkafka::admin::AdminOptions;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use std::time::Duration;

/// Stops `members`, then checks that the output counts each word of
/// `input` exactly once and that no member panicked.
fn stop_and_check(output: &str, input: &[(String, String)], members: impl IntoIterator<Item = Member>) {
    let logs: Vec<String> = members.into_iter().map(Member::stop).collect();
    assert_exact_counts(output, input, &mut []);
    assert!(
        !logs.iter().any(|l| l.contains("panicked")),
        "{}",
        logs.join("\n----\n")
    );
}

#[test]
fn a_member_frozen_past_its_session_and_transaction_timeouts_is_fenced_and_rejoins() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-zombie");
    // session_timeout 6 s; commit_interval 300 ms, so a transaction times
    // out after 10 s (4 x commit_interval, at least 10 s).
    let m = word_count(&w, &input, &output);
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    let mut b = Member::start(&w, &m, "b");
    settled_status(&m, &input, 2);

    // `a` freezes with work in an open transaction: records keep coming
    // for 20 s, past its session (the group hands its partitions to `b`)
    // and its transaction timeout (the brokers abort what it left open).
    a.signal(libc::SIGSTOP);
    for round in 1..=10 {
        let more = lines(300 * round, 60, 30);
        produce(&input, &more);
        input_so_far.extend(more);
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_exact_counts(&output, &input_so_far, &mut [&mut b]);

    // Woken, the zombie writes nothing of what it held: its transaction
    // was aborted and its producer fenced; it rejoins and gets a share
    // again, its tasks restored from their changelogs.
    a.signal(libc::SIGCONT);
    let more = lines(3300, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    // A cooperative rebalance moves partitions in two rounds: the second
    // may come after the group first looks settled.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = settled_status(&m, &input, 2);
        let held_by_a = text
            .lines()
            .filter(|l| {
                l.starts_with(&input) && l.split_whitespace().nth(4).is_some_and(|c| c.ends_with("-a"))
            })
            .count();
        if held_by_a > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the woken member holds partitions again:\n{text}\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let more = lines(3600, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    stop_and_check(&output, &input_so_far, [a, b]);
}

#[test]
fn a_member_frozen_past_its_session_but_not_its_transaction_commits_nothing_the_group_gave_away() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-expired");
    // session_timeout 6 s; commit_interval 5 s, so a transaction lives up
    // to 20 s: the member wakes with its transaction still open, after
    // the group gave its partitions to the other and forgot its member id.
    let m = word_count(&w, &input, &output);
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("commit_interval = \"300ms\"", "commit_interval = \"5s\"");
    std::fs::write(&m, text).unwrap();
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    let mut b = Member::start(&w, &m, "b");
    settled_status(&m, &input, 2);
    let mut feed = |from: usize, n: usize| {
        let more = lines(from, n, 30);
        produce(&input, &more);
        input_so_far.extend(more);
    };
    // `a` reads records into its open transaction, then freezes for 10 s
    // while records keep coming.
    feed(300, 300);
    std::thread::sleep(Duration::from_secs(1));
    a.signal(libc::SIGSTOP);
    for round in 0..5 {
        feed(600 + 60 * round, 60);
        std::thread::sleep(Duration::from_secs(2));
    }
    // Woken, it must not commit what it held: the other member counted
    // those records from the group's committed offsets already.
    a.signal(libc::SIGCONT);
    feed(900, 300);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    stop_and_check(&output, &input_so_far, [a, b]);
}

#[test]
fn a_member_given_tasks_with_records_in_its_transaction_commits_before_a_restore_longer_than_its_timeout() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-slow-restore");
    // commit_interval 300 ms: a transaction the brokers abort after 10 s;
    // restoring the keyed tasks a process is given takes 12 s here.
    let m = word_count_with(&w, &input, &output, "repartition_partitions = 4\n");
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let slow = [("MAILER_TEST_PAUSE_BEFORE_RESTORE_MS", "12000")];
    let a = Member::start_with(&w, &m, "a", &slow);
    let b = Member::start_with(&w, &m, "b", &slow);
    // A cooperative rebalance moves partitions in two rounds: once both
    // hold some, the one holding more keyed tasks is stopped (the group
    // balances partitions, not keyed tasks).
    let text = held_by_each(&m, &input, &["a", "b"]);
    let (stopped, mut survivor) = match keyed_tasks_of(&text, "a") > keyed_tasks_of(&text, "b") {
        true => (a, b),
        false => (b, a),
    };
    // Records keep coming while the survivor is given the stopped one's
    // keyed tasks: its transaction holds some as it starts restoring.
    let feeding = feed_in_background(&input, 40, Duration::from_millis(100));
    std::thread::sleep(Duration::from_secs(1));
    let before = survivor.log().len();
    stopped.stop();
    input_so_far.extend(feeding.join().unwrap());
    assert_exact_counts(&output, &input_so_far, &mut [&mut survivor]);
    let log = survivor.stop();
    assert!(log[before..].contains("test hook: restoring"), "{log}");
    assert_exact_counts(&output, &input_so_far, &mut []);
}

#[test]
fn a_member_the_group_moved_on_without_during_its_revoke_drops_its_work_and_joins_again() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-moved-on");
    // The group waits 6 s (`max.poll.interval.ms`, the rebalance timeout)
    // for a member to join a rebalance; a's first revoke takes 10 s, so a
    // rebalance started meanwhile ends without it and its commit is
    // refused. Commits every 4 s: the brokers abort a transaction only
    // after 16 s, so the refusal is the group's, not a timeout's.
    let m = word_count_with(&w, &input, &output, "repartition_partitions = 4\n");
    let text = std::fs::read_to_string(&m).unwrap();
    let text = text
        .replace("commit_interval = \"300ms\"", "commit_interval = \"4s\"")
        .replace(
            "format = \"string\"",
            "format = \"string\"\noptions = { \"max.poll.interval.ms\" = \"6000\" }",
        );
    std::fs::write(&m, text).unwrap();
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start_with(&w, &m, "a", &[("MAILER_TEST_PAUSE_IN_REVOKE_MS", "10000")]);
    settled_status(&m, &input, 1);
    // Records keep coming: a's transaction holds some when b's arrival
    // makes the group take partitions from it.
    let feeding = feed_in_background(&input, 60, Duration::from_millis(200));
    let mut b = Member::start(&w, &m, "b");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !a.log().contains("test hook: in a revoke") {
        assert!(
            std::time::Instant::now() < deadline,
            "a never revoked:\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // c's arrival starts a rebalance a cannot join in time.
    let mut c = Member::start(&w, &m, "c");
    input_so_far.extend(feeding.join().unwrap());
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b, &mut c]);
    let log = a.log();
    assert!(
        log.contains("the group moved on without this process"),
        "a's commit was not refused by the group:\n{log}"
    );
    // It joined again and goes on: records fed now are counted exactly too.
    let more = lines(300 + 30 * 60, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b, &mut c]);
    for member in [a, b, c] {
        let log = member.stop();
        assert!(!log.contains("panicked"), "{log}");
    }
}

/// Produces `rounds` rounds of 30 more lines (from line 300 on) into
/// `input`, `pause` apart, on a thread of its own: what it fed, once joined.
fn feed_in_background(
    input: &str,
    rounds: usize,
    pause: Duration,
) -> std::thread::JoinHandle<Vec<(String, String)>> {
    let input = input.to_owned();
    std::thread::spawn(move || {
        let mut fed = Vec::new();
        for round in 0..rounds {
            let more = lines(300 + 30 * round, 30, 30);
            produce(&input, &more);
            fed.extend(more);
            std::thread::sleep(pause);
        }
        fed
    })
}

#[test]
fn status_before_the_first_run_and_a_missing_source_make_no_topics() {
    // The brokers make a topic anyone asks about unless told not to
    // (auto.create.topics.enable is on by default): with one partition, it
    // would stop the pipeline's first start.
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-no-auto-create");
    let m = word_count(&w, &input, &output);
    let status = mailer()
        .env("KAFKA_BOOTSTRAP", bootstrap())
        .env("MAILER_INSTANCE", "status")
        .args(["cluster", "status", m.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(
        !topic_exists(&format!("{input}.counts.repartition")),
        "the status made the repartition topic"
    );
    let input_so_far = lines(0, 100, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();

    // A source topic that does not exist is refused, and not made.
    let missing = unique_topic("cluster-missing-in");
    let m = word_count(&w, &missing, &output);
    let (status, log) = Member::start(&w, &m, "b").exit(Duration::from_secs(60));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains(&format!("`{missing}`")) && log.contains("the topic does not exist"),
        "{log}"
    );
    assert!(!topic_exists(&missing), "the missing source topic was made");
}

#[test]
fn a_task_restored_past_a_transaction_open_on_its_changelog_waits_until_it_is_decided() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-undecided");
    let m = word_count(&w, &input, &output);
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    // A transaction left open on the changelog, as a commit whose markers
    // a leader failover delays: `a` commits its next state changes past it.
    let open = transaction_left_open(&format!("{input}.counts.changelog"), "undecided", "1");
    let more = lines(300, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();
    // `b` restores the task: to the changelog's end, once the brokers
    // aborted the open transaction, not to where it began.
    let mut b = Member::start(&w, &m, "b");
    let more = lines(600, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut b]);
    let log = b.stop();
    assert!(log.contains("neither committed nor aborted yet"), "{log}");
    drop(open);
}

#[test]
fn a_second_process_with_the_same_instance_id_on_one_machine_is_refused_and_unnamed_folders_go() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-same-instance");
    let m = word_count_with(
        &w,
        &input,
        &output,
        "[state]\nbackend = \"rocksdb\"\npath = \"state\"\n",
    );
    let input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    let (status, log) = Member::start(&w, &m, "a").exit(Duration::from_secs(60));
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("is locked by") && log.contains("needs its own `instance_id`"),
        "{log}"
    );
    a.assert_running();
    a.stop();
    // A process without `instance_id` works in a folder of its own, gone
    // when it ends; one a killed process left goes when the next starts.
    let unnamed = w.write(
        "unnamed.toml",
        &std::fs::read_to_string(&m)
            .unwrap()
            .replace("instance_id = \"${MAILER_INSTANCE}\"\n", ""),
    );
    let unnamed_folders = || -> Vec<String> {
        std::fs::read_dir(w.path("state"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("pid-"))
            .collect()
    };
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while !done() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: {:?}",
                unnamed_folders()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let b = Member::start(&w, &unnamed, "b");
    wait_for("the process makes its folder", &|| unnamed_folders().len() == 1);
    let left = unnamed_folders();
    b.kill();
    // Removed once a minute old (a process that just made its folder has
    // not locked it yet): this one is made older.
    let an_hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(w.path("state").join(&left[0]))
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
    let c = Member::start(&w, &unnamed, "c");
    wait_for("the next process removes the folder a killed one left", &|| {
        let now = unnamed_folders();
        now.len() == 1 && now != left
    });
    c.stop();
    assert!(unnamed_folders().is_empty(), "{:?}", unnamed_folders());
}

#[test]
fn a_manifest_that_would_read_the_state_elsewhere_or_leave_it_behind_is_refused() {
    let w = Workdir::new();
    let (m, input, output, mut input_so_far) = counted_by_one_then_stopped(&w, "cluster-plan");
    let text = std::fs::read_to_string(&m).unwrap();
    for (changed, says) in [
        (
            text.replace("batch_size = 50", "batch_size = 50\nmax_parallelism = 64"),
            "`max_parallelism` is 64".to_owned(),
        ),
        (
            text.replace("name = \"counts\"", "name = \"totals\""),
            format!("no keyed operator of this manifest writes `{input}.counts.changelog`"),
        ),
    ] {
        let changed = w.write("changed.toml", &changed);
        let (status, log) = Member::start(&w, &changed, "a").exit(Duration::from_secs(60));
        assert!(!status.success(), "{log}");
        assert!(
            log.contains("written with another plan") && log.contains(&says),
            "{says}: {log}"
        );
    }
    // The manifest the state was written with goes on counting.
    let more = lines(300, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();
}

/// A word count whose first 300 lines member `a` counted alone and
/// committed before it stopped: its manifest, input and output topics,
/// and the lines.
fn counted_by_one_then_stopped(
    w: &Workdir,
    prefix: &str,
) -> (std::path::PathBuf, String, String, Vec<(String, String)>) {
    let (input, output) = input_and_output(prefix);
    let m = word_count(w, &input, &output);
    let input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();
    (m, input, output, input_so_far)
}

/// A consumer of group `group` that is not a member: it reads and writes
/// the group's committed offsets as the tools do.
fn group_client(group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .create()
        .unwrap()
}

#[test]
fn a_group_whose_offsets_expired_is_refused_and_resumes_once_they_are_set_again() {
    let w = Workdir::new();
    let (m, input, output, mut input_so_far) = counted_by_one_then_stopped(&w, "cluster-expired");
    // The group's positions, as an operator would note them, then gone:
    // deleting the empty group is what Kafka does once
    // `offsets.retention.minutes` passed.
    let group = &input;
    let metadata = group_client(group)
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    let repartition = metadata
        .topics()
        .iter()
        .map(|t| t.name())
        .find(|t| t.starts_with(&format!("{input}.")) && t.ends_with(".repartition"))
        .expect("the repartition topic")
        .to_owned();
    let mut partitions = TopicPartitionList::new();
    for p in 0..6 {
        partitions.add_partition(&input, p);
        partitions.add_partition(&repartition, p);
    }
    let noted = group_client(group)
        .committed_offsets(partitions.clone(), Duration::from_secs(10))
        .unwrap();
    assert!(
        noted
            .elements()
            .iter()
            .all(|e| e.offset().to_raw().is_some_and(|o| o >= 0)),
        "every partition committed: {noted:?}"
    );
    let (admin, runtime) = admin();
    let deleted = runtime
        .block_on(admin.delete_groups(&[group], &AdminOptions::new()))
        .unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    assert!(
        group_client(group)
            .committed_offsets(partitions, Duration::from_secs(10))
            .unwrap()
            .elements()
            .iter()
            .all(|e| e.offset().to_raw().is_none_or(|o| o < 0)),
        "the offsets are gone"
    );

    // More input; the restart refuses to guess where it stood.
    let more = lines(300, 200, 30);
    produce(&input, &more);
    let (status, log) = Member::start(&w, &m, "a").exit(Duration::from_secs(90));
    assert!(!status.success(), "the restart refused:\n{log}");
    assert!(
        log.contains(&format!("consumer group `{group}` has no committed position for"))
            && log.contains("offsets.retention.minutes")
            && log.contains("--reset-offsets"),
        "the refusal says what is gone and what to do:\n{log}"
    );
    assert_exact_counts(&output, &input_so_far, &mut []);

    // The operator sets the noted positions again: it resumes there.
    group_client(group).commit(&noted, CommitMode::Sync).unwrap();
    input_so_far.extend(more);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();
    assert_exact_counts(&output, &input_so_far, &mut []);
}
