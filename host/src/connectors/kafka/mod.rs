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
use rdkafka::client::{Client, ClientContext};
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
