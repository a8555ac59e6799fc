//! Kafka: a source reading every partition of its topics and an
//! at-least-once sink, both through librdkafka (`rdkafka`).

mod config;
mod sink;
mod source;
mod transactional;

pub use config::{
    KafkaFormat, KafkaSecurity, KafkaSinkSpec, KafkaSourceSpec, SecurityProtocol, StartFrom, config_strings,
};
pub use sink::KafkaSink;
pub use source::KafkaSource;
pub use transactional::{TransactionalKafkaSink, committed_checkpoint};

use super::ConnectorError;
use crate::batch::Batch;
use rdkafka::client::{Client, ClientContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, ProducerContext};
use std::time::Duration;

/// A Kafka failure, naming the brokers and the topic.
fn kafka_error(brokers: &str, topic: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::Kafka {
        brokers: brokers.to_owned(),
        topic: topic.to_owned(),
        message: e.to_string(),
    }
}

/// The partitions of `topic`, or why there are none to read: the brokers
/// cannot be reached, or the topic does not exist.
fn partitions_of<C: ClientContext>(
    client: &Client<C>,
    brokers: &str,
    topic: &str,
) -> Result<Vec<i32>, ConnectorError> {
    let metadata = client
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .map_err(|e| kafka_error(brokers, topic, format!("cannot reach the brokers: {e}")))?;
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
/// full; how many were sent.
fn send_batch<C: ProducerContext<DeliveryOpaque = ()>>(
    producer: &BaseProducer<C>,
    topic: &str,
    partition: Option<i32>,
    batch: &Batch,
) -> Result<u64, KafkaError> {
    let mut sent = 0;
    batch.try_for_each(|rec| {
        let mut headers = OwnedHeaders::new_with_capacity(rec.headers.len());
        for (name, value) in &rec.headers {
            headers = headers.insert(Header {
                key: name,
                value: Some(&value[..]),
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
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e),
            }
        }
        sent += 1;
        Ok(())
    })?;
    producer.poll(Duration::ZERO);
    Ok(sent)
}
