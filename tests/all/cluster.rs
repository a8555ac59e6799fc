//! Cluster mode's parts against the real broker: group members splitting a
//! topic's partitions by the cooperative-sticky protocol, moving only what
//! must move, and announcing a partition before it leaves.

use mailer::cluster::member::{GroupMember, MemberContext, Membership, RebalanceListener, TopicPartition};
use mailer_test_support::kafka::{bootstrap, create_topic, unique_topic};
use rdkafka::ClientConfig;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a member was told, in order.
#[derive(Clone, Default)]
struct Told(Arc<Mutex<Vec<(&'static str, TopicPartition)>>>);

impl Told {
    fn events(&self) -> Vec<(&'static str, TopicPartition)> {
        self.0.lock().unwrap().clone()
    }

    /// The partitions the events leave with the member.
    fn held(&self) -> BTreeSet<i32> {
        let mut held = BTreeSet::new();
        for (what, (_, p)) in self.events() {
            match what {
                "assigned" => held.insert(p),
                _ => held.remove(&p),
            };
        }
        held
    }
}

impl RebalanceListener for Told {
    fn revoking(
        &self,
        partitions: &[TopicPartition],
        _: &rdkafka::consumer::BaseConsumer<MemberContext<Self>>,
    ) {
        let mut events = self.0.lock().unwrap();
        events.extend(partitions.iter().map(|p| ("revoking", p.clone())));
    }
    fn lost(&self, partitions: &[TopicPartition]) {
        let mut events = self.0.lock().unwrap();
        events.extend(partitions.iter().map(|p| ("lost", p.clone())));
    }
    fn assigned(
        &self,
        partitions: &[TopicPartition],
        _: &rdkafka::consumer::BaseConsumer<MemberContext<Self>>,
    ) {
        let mut events = self.0.lock().unwrap();
        events.extend(partitions.iter().map(|p| ("assigned", p.clone())));
    }
}

fn join(group: &str, name: &str, topic: &str) -> (GroupMember<Told>, Told) {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap())
        .set("session.timeout.ms", "6000");
    let told = Told::default();
    let topics = [topic.to_owned()];
    let membership = Membership {
        group,
        instance_id: None,
        client_id: name,
        topics: &topics,
        rebalancing: Default::default(),
    };
    let member = GroupMember::join(config, &membership, told.clone()).unwrap();
    (member, told)
}

/// Polls `members` until `done` holds (or 60 s pass).
fn poll_until(members: &[&GroupMember<Told>], mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the group did not settle"
        );
        for m in members {
            let _ = m.consumer().poll(Duration::from_millis(50));
        }
    }
}

#[test]
fn members_split_the_partitions_and_hand_them_back_announcing_each_move() {
    let topic = unique_topic("cluster-members");
    create_topic(&topic, 6);
    let group = format!("{topic}-group");
    let all: BTreeSet<i32> = (0..6).collect();

    let (one, told_one) = join(&group, "one", &topic);
    poll_until(&[&one], || told_one.held() == all);

    let (two, told_two) = join(&group, "two", &topic);
    poll_until(&[&one, &two], || {
        told_two.held().len() == 3 && told_one.held().len() == 3
    });
    let (a, b) = (told_one.held(), told_two.held());
    assert!(a.is_disjoint(&b), "{a:?} {b:?}");
    assert_eq!(a.union(&b).copied().collect::<BTreeSet<_>>(), all);
    // Cooperative: the first member was told of each partition it gave up
    // before it went, and kept the others throughout (never revoked).
    let revoked: BTreeSet<i32> = told_one
        .events()
        .iter()
        .filter(|(what, _)| *what == "revoking")
        .map(|(_, (_, p))| *p)
        .collect();
    assert_eq!(revoked, b, "only what moved was revoked");
    let mut held_now: Vec<i32> = one.assignment().into_iter().map(|(_, p)| p).collect();
    held_now.sort();
    assert_eq!(held_now, a.iter().copied().collect::<Vec<_>>());

    // The group's description names both members by their client ids.
    let mut names: Vec<String> = one
        .members(Duration::from_secs(10))
        .unwrap()
        .into_iter()
        .map(|m| m.client_id)
        .collect();
    names.sort();
    assert_eq!(names, ["one", "two"]);

    // The second leaves: its partitions come back to the first.
    drop(two);
    poll_until(&[&one], || told_one.held() == all);
    assert!(told_two.events().iter().any(|(what, _)| *what == "revoking"));
}

#[test]
fn cluster_topics_are_made_once_compacted_for_changelogs_and_refused_with_other_partitions() {
    use mailer::cluster::topics::{ClusterTopics, TopicError, TopicRole, topic_name};
    use rdkafka::admin::{AdminOptions, ResourceSpecifier};

    let pipeline = unique_topic("cluster-topics");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap());
    let topics = ClusterTopics::connect(&config).unwrap();
    let changelog = topic_name(&pipeline, "counts", TopicRole::Changelog).unwrap();
    let repartition = topic_name(&pipeline, "by-word", TopicRole::Repartition).unwrap();
    topics.ensure(&changelog, 4, TopicRole::Changelog).unwrap();
    topics.ensure(&repartition, 4, TopicRole::Repartition).unwrap();
    // Again: they exist with the right partitions.
    topics.ensure(&changelog, 4, TopicRole::Changelog).unwrap();

    let (admin, runtime) = mailer_test_support::kafka::admin();
    let policy = |topic: &str| {
        let described = runtime
            .block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new()))
            .unwrap();
        let config = described.into_iter().next().unwrap().unwrap();
        config.get("cleanup.policy").and_then(|e| e.value.clone())
    };
    assert_eq!(policy(&changelog).as_deref(), Some("compact"));
    assert_ne!(policy(&repartition).as_deref(), Some("compact"));

    match topics.ensure(&repartition, 6, TopicRole::Repartition) {
        Err(TopicError::Partitions {
            found: 4,
            expected: 6,
            ..
        }) => {}
        other => panic!("expected a refusal of 4 partitions where 6 are needed, got {other:?}"),
    }
}

#[test]
fn a_task_restores_exactly_the_committed_changes_of_its_changelog() {
    use mailer::cluster::restore::restore_task;
    use mailer::state::{ChangelogBackend, MemoryBackend, StateBackend};
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

    let topic = unique_topic("cluster-changelog");
    create_topic(&topic, 2);
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("transactional.id", &topic)
        .create()
        .unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    let send = |key: &str, value: Option<&str>| {
        let mut record = BaseRecord::<[u8], [u8]>::to(&topic)
            .partition(1)
            .key(key.as_bytes());
        if let Some(v) = value {
            record = record.payload(v.as_bytes());
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    };
    // Committed: a=1, b=2, a deleted, c=3, b=4.
    producer.begin_transaction().unwrap();
    for (k, v) in [
        ("a", Some("1")),
        ("b", Some("2")),
        ("a", None),
        ("c", Some("3")),
        ("b", Some("4")),
    ] {
        send(k, v);
    }
    producer.commit_transaction(Duration::from_secs(30)).unwrap();
    // Aborted: d=5 never happened.
    producer.begin_transaction().unwrap();
    send("d", Some("5"));
    producer.flush(Duration::from_secs(30)).unwrap();
    producer.abort_transaction(Duration::from_secs(30)).unwrap();

    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap());
    let entries = |state: &ChangelogBackend| {
        let mut all = Vec::new();
        state
            .scan(b"", b"\xff", &mut |k, v| {
                all.push((
                    String::from_utf8_lossy(k).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                ));
                true
            })
            .unwrap();
        all
    };
    let mut state = ChangelogBackend::new(Box::new(MemoryBackend::default()));
    let mut reports = 0;
    let whole = restore_task(&config, &topic, 1, 0, &mut state, &mut |_| reports += 1).unwrap();
    assert_eq!(whole.records, 5);
    assert!(reports >= 1);
    assert_eq!(
        entries(&state),
        [("b".into(), "4".into()), ("c".into(), "3".into())]
    );
    assert_eq!(
        state.pending(),
        0,
        "restored entries are not changes to send again"
    );

    // From a recorded offset: only what came after it; at the end: nothing.
    let mut later = ChangelogBackend::new(Box::new(MemoryBackend::default()));
    let tail = restore_task(&config, &topic, 1, 3, &mut later, &mut |_| {}).unwrap();
    assert_eq!(tail.records, 2);
    assert_eq!(
        entries(&later),
        [("b".into(), "4".into()), ("c".into(), "3".into())]
    );
    let none = restore_task(&config, &topic, 1, whole.next_offset, &mut later, &mut |_| {}).unwrap();
    assert_eq!(none.records, 0);
    // The other partition is empty.
    let empty = restore_task(&config, &topic, 0, 0, &mut later, &mut |_| {}).unwrap();
    assert_eq!(empty, mailer::cluster::restore::Restored::default());
}
