//! Topics of the test broker (`just test` and `just bench` start Apache Kafka and
//! set `KAFKA_BOOTSTRAP`): made, written and read back.

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// The broker.
pub fn bootstrap() -> String {
    std::env::var("KAFKA_BOOTSTRAP").expect(
        "KAFKA_BOOTSTRAP is not set: run through `just test` or `just bench`, which start a Kafka broker on loopback",
    )
}

/// The broker's SASL/SCRAM listener (`scripts/kafka-broker start` serves one
/// and `just test` exports its address and user).
pub fn sasl_bootstrap() -> String {
    listener_env("KAFKA_SASL_BOOTSTRAP")
}

/// The broker's TLS listener; its certificate is signed by the CA of file
/// `KAFKA_TLS_CA`, made for this broker's run.
pub fn tls_bootstrap() -> String {
    listener_env("KAFKA_TLS_BOOTSTRAP")
}

fn listener_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run through `just test`, whose broker (scripts/kafka-broker start) serves SASL and TLS listeners")
    })
}

/// A topic name no other test uses.
pub fn unique_topic(prefix: &str) -> String {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("{prefix}-{}-{n}-{ms}", std::process::id())
}

/// An admin client of the broker, and a runtime to wait on it.
pub fn admin() -> (AdminClient<DefaultClientContext>, tokio::runtime::Runtime) {
    admin_at(&bootstrap())
}

/// An admin client of the brokers at `bootstrap`, and a runtime to wait on it.
pub fn admin_at(bootstrap: &str) -> (AdminClient<DefaultClientContext>, tokio::runtime::Runtime) {
    let admin = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("an admin client");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    (admin, runtime)
}

/// Creates `topic` with `partitions` partitions.
pub fn create_topic(topic: &str, partitions: i32) {
    create_topic_with(topic, partitions, &[]);
}

/// Creates `topic` with `partitions` partitions and topic `config`.
pub fn create_topic_with(topic: &str, partitions: i32, config: &[(&str, &str)]) {
    create_topic_at(&bootstrap(), topic, partitions, config);
}

/// Creates `topic` at `bootstrap` with `partitions` partitions, the
/// brokers' default replication and topic `config`.
pub fn create_topic_at(bootstrap: &str, topic: &str, partitions: i32, config: &[(&str, &str)]) {
    let (admin, runtime) = admin_at(bootstrap);
    let new = config.iter().fold(
        NewTopic::new(topic, partitions, TopicReplication::Fixed(-1)),
        |t, (k, v)| t.set(k, v),
    );
    let results = runtime
        .block_on(admin.create_topics([&new], &AdminOptions::new()))
        .unwrap_or_else(|e| panic!("creating topic {topic}: {e}"));
    for r in results {
        r.unwrap_or_else(|e| panic!("creating topic {topic}: {e:?}"));
    }
}

/// Whether the broker lists `topic` (asked by listing every topic, which
/// never makes one).
pub fn topic_exists(topic: &str) -> bool {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .create()
        .expect("a consumer");
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(30))
        .expect("the broker's topics");
    metadata.topics().iter().any(|t| t.name() == topic)
}

/// An idempotent producer: a retry after a slow broker's timeout never
/// writes a record twice.
pub fn producer() -> BaseProducer {
    producer_at(&bootstrap())
}

/// An idempotent producer to the brokers at `bootstrap`.
pub fn producer_at(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .expect("a producer")
}

/// Queues one record, waiting while the producer's queue is full.
pub fn send(producer: &BaseProducer, topic: &str, key: &str, value: &[u8]) {
    let mut rec = BaseRecord::to(topic).key(key).payload(value);
    while let Err((e, back)) = producer.send(rec) {
        assert!(e.to_string().contains("Queue full"), "{e}");
        producer.poll(Duration::from_millis(20));
        rec = back;
    }
}

/// Produces `(key, value)` records to `topic` and waits for them all.
pub fn produce(topic: &str, records: &[(String, String)]) {
    produce_at(&bootstrap(), topic, records);
}

/// Produces `(key, value)` records to `topic` at `bootstrap` and waits for
/// them all.
pub fn produce_at(bootstrap: &str, topic: &str, records: &[(String, String)]) {
    let producer = producer_at(bootstrap);
    for (k, v) in records {
        send(&producer, topic, k, v.as_bytes());
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every record delivered");
}

/// Every `(key, value)` of `topic`, read to its end with `read_committed`.
pub fn consume_all(topic: &str, partitions: i32) -> Vec<(String, String)> {
    consume_all_at(&bootstrap(), topic, partitions)
}

/// Every `(key, value)` of `topic` at `bootstrap`, read to its end with
/// `read_committed`.
pub fn consume_all_at(bootstrap: &str, topic: &str, partitions: i32) -> Vec<(String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", unique_topic("reader"))
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .expect("a consumer");
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning)
            .expect("a partition");
    }
    consumer.assign(&list).expect("the partitions assigned");
    let mut out = Vec::new();
    let mut at_end = std::collections::BTreeSet::new();
    // Gives up only after 30 s without a record (a loaded machine reads slowly).
    let mut deadline = Instant::now() + Duration::from_secs(30);
    while at_end.len() < partitions as usize && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                deadline = Instant::now() + Duration::from_secs(30);
                out.push((
                    String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned(),
                    String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned(),
                ))
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("{e}"),
            None => {}
        }
    }
    out
}
