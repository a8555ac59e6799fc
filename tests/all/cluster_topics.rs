//! The topics mailer keeps its own records in, against the real broker:
//! one that exists with settings that would lose them (a changelog or a
//! commit topic that is not compacted, a repartition topic that expires)
//! is refused at start with what to set; the repartition topics' records
//! below the committed offsets are deleted while the output stays exact;
//! the topics are made with the replication factor asked for, and an
//! existing one with fewer replicas is refused (a cluster of three
//! brokers).

use crate::cluster_runs::{
    Member, assert_counts_exact, assert_exact_counts, input_and_output, lines, occurrences, word_count,
    word_count_with,
};
use crate::kafka::{admin, bootstrap, consume_all, create_topic, create_topic_with, produce, unique_topic};
use crate::support::*;
use mailer_test_support::kafka::{admin_at, consume_all_at, create_topic_at, produce_at};
use mailer_test_support::kafka_cluster::KafkaCluster;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::time::{Duration, Instant};

/// `topic`'s setting `name` at `brokers`.
fn setting(brokers: &str, topic: &str, name: &str) -> Option<String> {
    let (admin, runtime) = admin_at(brokers);
    let described = runtime
        .block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new()))
        .unwrap();
    let config = described.into_iter().next().unwrap().unwrap();
    config.get(name).and_then(|e| e.value.clone())
}

/// The low and high watermarks of each partition of `topic` at `brokers`.
fn watermarks(brokers: &str, topic: &str, partitions: i32) -> Vec<(i64, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    (0..partitions)
        .map(|p| {
            consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
        })
        .collect()
}

/// The fewest replicas of a partition of `topic` at `brokers`.
fn replicas(brokers: &str, topic: &str) -> usize {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap();
    let listed = metadata.topics().iter().find(|t| t.name() == topic).unwrap();
    assert!(!listed.partitions().is_empty(), "{topic} is not listed");
    listed
        .partitions()
        .iter()
        .map(|p| p.replicas().len())
        .min()
        .unwrap()
}

/// A member that must stop at start: its log, which must name `topic`
/// and hold each of `says`.
fn refused_at_start(w: &Workdir, m: &std::path::Path, env: &[(&str, &str)], topic: &str, says: &[&str]) {
    let (status, log) = Member::start_with(w, m, "a", env).exit(Duration::from_secs(30));
    assert!(!status.success(), "the member ran:\n{log}");
    assert!(
        log.contains(&format!("topic `{topic}`")),
        "names the topic:\n{log}"
    );
    for said in says {
        assert!(log.contains(said), "says {said:?}:\n{log}");
    }
    assert!(!log.contains("panicked"), "{log}");
}

#[test]
fn a_changelog_or_repartition_topic_that_would_lose_records_is_refused_at_start() {
    let w = Workdir::new();
    // A changelog made by hand with Kafka's default policy: its state
    // would expire after `retention.ms`.
    let (input, output) = input_and_output("cluster-delete-changelog");
    let m = word_count(&w, &input, &output);
    let changelog = format!("{input}.counts.changelog");
    create_topic_with(
        &changelog,
        6,
        &[("cleanup.policy", "delete"), ("retention.ms", "604800000")],
    );
    let input_so_far = lines(0, 200, 20);
    produce(&input, &input_so_far);
    refused_at_start(
        &w,
        &m,
        &[],
        &changelog,
        &[
            "has `cleanup.policy=delete`",
            "needs `cleanup.policy=compact`",
            &format!("kafka-configs.sh --bootstrap-server {} --alter", bootstrap()),
        ],
    );
    assert!(consume_all(&output, 1).is_empty(), "nothing ran");
    // Set as the error says, the pipeline runs.
    let (admin, runtime) = admin();
    let compact = AlterConfig::new(ResourceSpecifier::Topic(&changelog)).set("cleanup.policy", "compact");
    for altered in runtime
        .block_on(admin.alter_configs([&compact], &AdminOptions::new()))
        .unwrap()
    {
        altered.unwrap();
    }
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();

    // A repartition topic that expires would drop records before their
    // task reads them.
    let (input, output) = input_and_output("cluster-expiring-repartition");
    let m = word_count(&w, &input, &output);
    let repartition = format!("{input}.counts.repartition");
    create_topic_with(&repartition, 6, &[("retention.ms", "86400000")]);
    refused_at_start(
        &w,
        &m,
        &[],
        &repartition,
        &["has `retention.ms=86400000`", "needs `retention.ms=-1`"],
    );
}

#[test]
fn an_exactly_once_sinks_commit_topic_that_is_not_compacted_is_refused() {
    let w = Workdir::new();
    let (input, output) = (unique_topic("commits-in"), unique_topic("commits-out"));
    create_topic(&input, 2);
    create_topic(&output, 1);
    produce(&input, &crate::kafka::records(5, 20));
    // Its commit records would expire after `retention.ms`: a restart
    // would then find none and could not tell what was committed.
    let commits = unique_topic("commits");
    create_topic_with(&commits, 1, &[("cleanup.policy", "delete")]);
    let text = std::fs::read_to_string(crate::kafka::pipeline(&w, &input, &output, true))
        .unwrap()
        .replace(
            "topic = \"",
            &format!("exactly_once = true\ncommit_topic = \"{commits}\"\ntopic = \""),
        );
    let m = w.write("pipeline.toml", &text);
    let out = run(&["run", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("topic `{commits}` has `cleanup.policy=delete`"))
            && err.contains("needs `cleanup.policy=compact`")
            && err.contains("kafka-configs.sh"),
        "{err}"
    );
    assert!(consume_all(&output, 1).is_empty(), "nothing was written");
}

#[test]
fn repartition_records_below_the_committed_offsets_are_purged_and_the_output_stays_exact() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-purge");
    let m = word_count_with(&w, &input, &output, "purge_interval = \"1s\"\n");
    let repartition = format!("{input}.counts.repartition");
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    // More input after the first purges: the purges lag the commits by
    // at most `purge_interval` and a commit or two.
    let more = lines(300, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    let deadline = Instant::now() + Duration::from_secs(30);
    // Each partition that holds records: purged (a purge deletes below
    // the committed offset, never past the end).
    let unpurged = |marks: &[(i64, i64)]| marks.iter().any(|&(low, high)| high > 0 && low == 0);
    let mut marks = watermarks(&bootstrap(), &repartition, 6);
    while unpurged(&marks) && Instant::now() < deadline {
        a.assert_running();
        std::thread::sleep(Duration::from_millis(500));
        marks = watermarks(&bootstrap(), &repartition, 6);
    }
    assert!(
        marks.iter().any(|&(_, high)| high > 0) && !unpurged(&marks),
        "every repartition partition holding records purged below its committed offset: (low, high) watermarks {marks:?}\n{}",
        a.log()
    );
    // A restart resumes past the purged records, exactly.
    a.stop();
    let more = lines(600, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    a.stop();
}

#[test]
fn topics_are_made_with_the_replication_factor_asked_and_fewer_replicas_are_refused() {
    let cluster = KafkaCluster::start(3);
    let brokers = cluster.bootstrap();
    let env = [("KAFKA_BOOTSTRAP", brokers)];
    let w = Workdir::new();
    let (input, output) = (unique_topic("cluster-rf-in"), unique_topic("cluster-rf-out"));
    create_topic_at(brokers, &input, 6, &[]);
    create_topic_at(brokers, &output, 1, &[]);
    let m = word_count_with(&w, &input, &output, "replication_factor = 2\n");
    let fed = lines(0, 200, 20);
    produce_at(brokers, &input, &fed);
    let mut a = Member::start_with(&w, &m, "a", &env);
    let expected = occurrences(&fed);
    let total = expected.values().sum::<u64>() as usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut got = consume_all_at(brokers, &output, 1);
    while got.len() < total && Instant::now() < deadline {
        a.assert_running();
        std::thread::sleep(Duration::from_millis(500));
        got = consume_all_at(brokers, &output, 1);
    }
    assert_counts_exact(&got, &expected, &a.log());
    let (changelog, repartition, committed) = (
        format!("{input}.counts.changelog"),
        format!("{input}.counts.repartition"),
        format!("{input}.offsets.committed"),
    );
    for topic in [&changelog, &repartition, &committed] {
        assert_eq!(replicas(brokers, topic), 2, "{topic}'s replicas");
    }
    assert_eq!(
        setting(brokers, &changelog, "cleanup.policy").as_deref(),
        Some("compact")
    );
    assert_eq!(
        setting(brokers, &committed, "cleanup.policy").as_deref(),
        Some("compact")
    );
    assert_eq!(
        setting(brokers, &repartition, "cleanup.policy").as_deref(),
        Some("delete")
    );
    assert_eq!(
        setting(brokers, &repartition, "retention.ms").as_deref(),
        Some("-1")
    );
    a.stop();

    // A changelog made with one replica: a broker lost would lose its
    // state, where the manifest asks for two.
    let (input, output) = (unique_topic("cluster-rf1-in"), unique_topic("cluster-rf1-out"));
    create_topic_at(brokers, &input, 6, &[]);
    create_topic_at(brokers, &output, 1, &[]);
    let m = word_count_with(&w, &input, &output, "replication_factor = 2\n");
    let changelog = format!("{input}.counts.changelog");
    let (admin, runtime) = admin_at(brokers);
    let new = NewTopic::new(&changelog, 6, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    for made in runtime
        .block_on(admin.create_topics([&new], &AdminOptions::new()))
        .unwrap()
    {
        made.unwrap();
    }
    refused_at_start(
        &w,
        &m,
        &env,
        &changelog,
        &["has 1 replica(s) of a partition, but `[cluster] replication_factor = 2`"],
    );
}
