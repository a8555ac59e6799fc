//! What the sinks ask the brokers' admin API: the output topic's limits, so
//! that a record the brokers would refuse is refused before it is sent (a
//! refusal inside a transaction would abort the whole interval, where the
//! sink's `on_error` can only apply to the record), and the commit topic,
//! made when missing.

use super::config::{KafkaSinkSpec, client_config};
use super::kafka_error;
use crate::connectors::ConnectorError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::types::RDKafkaErrorCode;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// What the brokers take on a topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicLimits {
    /// The largest record batch (`max.message.bytes`).
    pub max_message_bytes: Option<usize>,
    /// Whether the topic is compacted (its records need a key).
    pub compacted: bool,
}

fn admin(spec: &KafkaSinkSpec) -> Result<AdminClient<DefaultClientContext>, ConnectorError> {
    client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options)
        .create()
        .map_err(|e| kafka_error(spec.bootstrap_servers.value(), &spec.topic, e))
}

fn block_on<F: std::future::Future>(f: F) -> Result<F::Output, ConnectorError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| ConnectorError::Unsupported(format!("starting the Kafka admin client: {e}")))?;
    Ok(runtime.block_on(f))
}

fn options() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(TIMEOUT))
}

/// The limits of the sink's topic, as its configuration says.
pub fn topic_limits(spec: &KafkaSinkSpec) -> Result<TopicLimits, ConnectorError> {
    let brokers = spec.bootstrap_servers.value();
    let admin = admin(spec)?;
    let described = block_on(admin.describe_configs([&ResourceSpecifier::Topic(&spec.topic)], &options()))?
        .map_err(|e| {
        kafka_error(
            brokers,
            &spec.topic,
            format!("reading the topic's configuration: {e}"),
        )
    })?;
    let Some(Ok(config)) = described.into_iter().next() else {
        return Ok(TopicLimits::default());
    };
    let value = |name: &str| config.get(name).and_then(|e| e.value.clone());
    Ok(TopicLimits {
        max_message_bytes: value("max.message.bytes").and_then(|v| v.parse().ok()),
        compacted: value("cleanup.policy").is_some_and(|v| v.split(',').any(|p| p.trim() == "compact")),
    })
}

/// Makes the compacted, one-partition commit topic `topic` unless it exists.
pub fn ensure_commit_topic(spec: &KafkaSinkSpec, topic: &str) -> Result<(), ConnectorError> {
    let brokers = spec.bootstrap_servers.value();
    let admin = admin(spec)?;
    // -1: the brokers' default replication factor.
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(-1)).set("cleanup.policy", "compact");
    let results = block_on(admin.create_topics([&new], &options()))?.map_err(|e| {
        kafka_error(
            brokers,
            topic,
            format!(
                "creating the commit topic: {e}; create it yourself (one partition, cleanup.policy=compact)"
            ),
        )
    })?;
    match results.into_iter().next() {
        Some(Err((_, code))) if code != RDKafkaErrorCode::TopicAlreadyExists => Err(kafka_error(
            brokers,
            topic,
            format!(
                "creating the commit topic: {code}; create it yourself (one partition, cleanup.policy=compact)"
            ),
        )),
        _ => Ok(()),
    }
}
