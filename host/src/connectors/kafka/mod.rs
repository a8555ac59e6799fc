//! Kafka: a source reading every partition of its topics and an
//! at-least-once sink, both through librdkafka (`rdkafka`).

mod config;
mod connector;
mod lag;
mod record_reader;
mod refusals;
mod sink;
mod source;
mod topic_admin;
pub mod topic_settings;
mod transactional;
mod transient;
mod watermarks;

pub use config::{
    KafkaFormat, KafkaSecurity, KafkaSinkSpec, KafkaSourceSpec, SecurityProtocol, StartFrom, client_config,
    producer_config, set_transactional,
};
pub use record_reader::RecordReader;
pub use refusals::raw_record;
pub use sink::KafkaSink;
pub use source::KafkaSource;
pub use transactional::{TRANSACTION_TIMEOUT, TransactionalKafkaSink, committed_checkpoint};
pub use transient::{EndReader, FaultLog, consumer_recovers, still_sending};
pub use watermarks::{LONGEST_OPEN_TRANSACTION, decided_end, watermarks};

use super::ConnectorError;
use crate::batch::Batch;
use crate::failure::FailureHandler;
use rdkafka::client::{Client, ClientContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, PurgeConfig};
use std::sync::Mutex;
use std::time::Duration;

/// A Kafka failure, naming the brokers and the topic.
fn kafka_error(brokers: &str, topic: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::Kafka {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        message: e.to_string(),
    }
}

/// A producer context that keeps the error librdkafka last reported
/// (rejected credentials, a failed TLS handshake, a refused connection),
/// which a request's timeout alone would hide; a refusal of the credentials
/// is kept over the "brokers are down" that follows it. Errors arrive when
/// the producer is polled.
#[derive(Default)]
pub struct Reported {
    last: Mutex<Option<(bool, String)>>,
    /// The first record refusal a delivery report brought.
    refused: Mutex<Option<String>>,
}

impl Reported {
    /// `"; <what was refused>"` when a delivery report refused a record.
    pub fn last_refusal(&self) -> Option<String> {
        self.refused.lock().expect("refusal lock").clone()
    }

    fn last_error(&self) -> Option<String> {
        self.last
            .lock()
            .expect("error lock")
            .as_ref()
            .map(|(_, e)| e.clone())
    }
}

impl ClientContext for Reported {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::debug!(%error, reason, "Kafka client error");
        let auth = is_authentication(&error);
        let mut last = self.last.lock().expect("error lock");
        if auth || !last.as_ref().is_some_and(|(was_auth, _)| *was_auth) {
            *last = Some((auth, explained(&error, reason)));
        }
    }
}

fn is_authentication(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::Authentication)
}

impl AsRef<Reported> for Reported {
    fn as_ref(&self) -> &Reported {
        self
    }
}

impl ProducerContext for Reported {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        // A record purged by this process (an abort drops what it still
        // holds) was not refused by anyone.
        let purged = |e: &KafkaError| {
            matches!(
                e.rdkafka_error_code(),
                Some(RDKafkaErrorCode::PurgeQueue | RDKafkaErrorCode::PurgeInflight)
            )
        };
        if let Err((e, msg)) = result
            && !purged(e)
        {
            use rdkafka::message::Message;
            let mut refused = self.refused.lock().expect("refusal lock");
            refused.get_or_insert_with(|| {
                format!(
                    "; the brokers refused a record for partition {}: {e}",
                    msg.partition()
                )
            });
        }
    }
}

/// Aborts `producer`'s open transaction, dropping the records it still
/// holds first and serving their delivery reports: librdkafka's abort
/// waits for those reports, which a `BaseProducer` serves only when
/// polled, so an abort with records outstanding would wait out its
/// timeout and fail.
pub fn abort_transaction<C: ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
) -> KafkaResult<()> {
    producer.purge(PurgeConfig::default().queue().inflight());
    let deadline = std::time::Instant::now() + timeout;
    while producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
        producer.poll(Duration::from_millis(10));
    }
    producer.abort_transaction(timeout)
}

/// A client error with a hint when it is about credentials.
fn explained(error: &KafkaError, reason: &str) -> String {
    if is_authentication(error) {
        format!(
            "the brokers refused the credentials ({reason}): check `security` (mechanism, username, password)"
        )
    } else {
        reason.to_owned()
    }
}

/// What a producer's client reported: its error callbacks are served by a
/// poll, which a failed metadata request does not make.
fn producer_error<C: ProducerContext + AsRef<Reported>>(producer: &BaseProducer<C>) -> Option<String> {
    producer.poll(Duration::from_millis(100));
    let context: &C = producer.context();
    AsRef::<Reported>::as_ref(context).last_error()
}

/// What a consumer without an assignment (so it returns no records)
/// reports: the errors a poll brings, and what its client's error callback
/// kept (librdkafka reports some there, as a "global" error); a refusal of
/// the credentials first.
fn consumer_error<C>(consumer: &BaseConsumer<C>) -> Option<String>
where
    C: rdkafka::consumer::ConsumerContext + AsRef<Reported>,
{
    let mut errors = Vec::new();
    while errors.len() < 100
        && let Some(Err(e)) = consumer.poll(Duration::from_millis(10))
    {
        errors.push(e);
    }
    let explain = |e: &KafkaError| {
        let reason = e
            .rdkafka_error_code()
            .map_or_else(|| e.to_string(), |code| code.to_string());
        explained(e, &reason)
    };
    if let Some(auth) = errors.iter().find(|e| is_authentication(e)) {
        return Some(explain(auth));
    }
    let context: &C = consumer.context();
    AsRef::<Reported>::as_ref(context)
        .last_error()
        .or_else(|| errors.first().map(explain))
}

/// The partitions of `topic`, or why there are none to read: the brokers
/// cannot be reached (or refuse the credentials), or the topic does not
/// exist. `last_error` says what the client last reported, if anything.
fn partitions_of<C: ClientContext>(
    client: &Client<C>,
    last_error: impl Fn() -> Option<String>,
    brokers: &str,
    topic: &str,
) -> Result<Vec<i32>, ConnectorError> {
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| {
            let message = match last_error() {
                Some(cause) => format!("cannot reach the brokers: {cause} ({e})"),
                None => format!("cannot reach the brokers: {e}"),
            };
            kafka_error(brokers, topic, message)
        })?;
    let t = metadata.topics().iter().find(|t| t.name() == topic);
    match t {
        Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
            Ok(t.partitions().iter().map(|p| p.id()).collect())
        }
        _ => Err(kafka_error(
            brokers,
            topic,
            "the topic does not exist: create it (with the partitions you need) before the pipeline starts",
        )),
    }
}

/// Sends every record of `batch` to `topic` (its key, value, timestamp and
/// headers; to `partition` when set), waiting while the producer's queue is
/// full. A record the producer refuses for itself (too large), or that the
/// topic's `limits` refuse (no key for a compacted topic), goes to
/// `rejects`; how many were sent, or why the batch stops.
fn send_batch<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &BaseProducer<C>,
    topic: &str,
    partition: Option<i32>,
    batch: &Batch,
    rejects: &FailureHandler,
    limits: topic_admin::TopicLimits,
) -> Result<u64, String> {
    let mut sent = 0;
    batch.try_for_each(|rec| {
        if limits.compacted && rec.key.is_none() {
            return super::refuse(
                rejects,
                rec.clone(),
                &format!("topic `{topic}` is compacted (cleanup.policy=compact): the brokers refuse a record without a key"),
            );
        }
        match send_record(producer, topic, partition, rec) {
            Ok(()) => {
                sent += 1;
                Ok(())
            }
            Err(e) if refusals::is_record_refusal(&e) => {
                let at = partition.map_or(String::new(), |p| format!("partition {p}: "));
                super::refuse(rejects, rec.clone(), &format!("{at}refused: {e}"))
            }
            Err(e) => Err(e.to_string()),
        }
    })?;
    producer.poll(Duration::ZERO);
    Ok(sent)
}

/// Sends `rec` to `topic` (its key, value, timestamp and headers; to
/// `partition` when set, else Kafka's partitioner picks from the key),
/// waiting while the producer's queue is full.
pub fn send_record<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &BaseProducer<C>,
    topic: &str,
    partition: Option<i32>,
    rec: &crate::record::Record,
) -> Result<(), KafkaError> {
    send_record_with(producer, (topic, partition), rec, None)
}

/// As [`send_record`], with the header `extra` after the record's own.
pub fn send_record_with<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &BaseProducer<C>,
    (topic, partition): (&str, Option<i32>),
    rec: &crate::record::Record,
    extra: Option<(&str, &[u8])>,
) -> Result<(), KafkaError> {
    let mut headers = OwnedHeaders::new_with_capacity(rec.headers.len() + usize::from(extra.is_some()));
    for (name, value) in &rec.headers {
        headers = headers.insert(Header {
            key: name,
            value: Some(&value[..]),
        });
    }
    if let Some((key, value)) = extra {
        headers = headers.insert(Header {
            key,
            value: Some(value),
        });
    }
    let mut record = BaseRecord::to(topic)
        .payload(&rec.value[..])
        .timestamp(rec.timestamp)
        .headers(headers);
    if let Some(k) = &rec.key {
        record = record.key(&k[..]);
    }
    if let Some(p) = partition {
        record = record.partition(p);
    }
    send_waiting(producer, record)
}

/// Sends `record`, waiting while the producer's queue is full.
pub fn send_waiting<C: ProducerContext<DeliveryOpaque = ()>, K: ToBytes + ?Sized, P: ToBytes + ?Sized>(
    producer: &BaseProducer<C>,
    mut record: BaseRecord<'_, K, P>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(Duration::from_millis(50));
            }
            Err((e, _)) => return Err(e),
        }
    }
}
