//! What the sinks ask the brokers' admin API: the output topic's limits, so
//! that a record the brokers would refuse is refused before it is sent (a
//! refusal inside a transaction would abort the whole interval, where the
//! sink's `on_error` can only apply to the record), and the commit topic,
//! made when missing and checked when it exists (`topic_settings.rs`).

use super::config::{KafkaSinkSpec, client_config};
use super::kafka_error;
use super::topic_settings::{Keeps, check_replication, check_settings, create, describe, replication_factor};
use crate::connectors::ConnectorError;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The commit topic keeps each sink's newest commit record for good.
const COMMITS: Keeps = Keeps::NewestOfEachKey { tombstones_for: None };

/// What the brokers take on a topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicLimits {
    /// The largest record batch (`max.message.bytes`).
    pub max_message_bytes: Option<usize>,
    /// Whether the topic is compacted (its records need a key).
    pub compacted: bool,
}

/// One admin client of the sink's brokers, with a runtime to wait on its
/// answers.
pub struct TopicAdmin<'a> {
    spec: &'a KafkaSinkSpec,
    client: AdminClient<DefaultClientContext>,
    runtime: tokio::runtime::Runtime,
}

fn options() -> AdminOptions {
    AdminOptions::new().request_timeout(Some(TIMEOUT))
}

impl<'a> TopicAdmin<'a> {
    /// Connects to `spec`'s brokers.
    pub fn new(spec: &'a KafkaSinkSpec) -> Result<Self, ConnectorError> {
        let client = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options)
            .create()
            .map_err(|e| kafka_error(spec.bootstrap_servers.value(), &spec.topic, e))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| ConnectorError::Unsupported(format!("starting the Kafka admin client: {e}")))?;
        Ok(Self {
            spec,
            client,
            runtime,
        })
    }

    /// The limits of the sink's topic, as its configuration says.
    pub fn topic_limits(&self) -> Result<TopicLimits, ConnectorError> {
        let (brokers, topic) = (self.spec.bootstrap_servers.value(), &self.spec.topic);
        let described = self
            .runtime
            .block_on(
                self.client
                    .describe_configs([&ResourceSpecifier::Topic(topic)], &options()),
            )
            .map_err(|e| kafka_error(brokers, topic, format!("reading the topic's configuration: {e}")))?;
        let Some(Ok(config)) = described.into_iter().next() else {
            return Ok(TopicLimits::default());
        };
        let value = |name: &str| config.get(name).and_then(|e| e.value.clone());
        Ok(TopicLimits {
            max_message_bytes: value("max.message.bytes").and_then(|v| v.parse().ok()),
            compacted: value("cleanup.policy").is_some_and(|v| v.split(',').any(|p| p.trim() == "compact")),
        })
    }

    /// Makes the compacted, one-partition commit topic `topic` unless it
    /// exists (replicated as [`replication_factor`] says); refuses one
    /// that exists with settings that would lose its records, and warns
    /// of one with fewer replicas than mailer would make it with.
    pub fn ensure_commit_topic(&self, topic: &str) -> Result<(), ConnectorError> {
        let brokers = self.spec.bootstrap_servers.value();
        let refused = |reason: String| {
            kafka_error(
                brokers,
                topic,
                format!(
                    "creating the commit topic: {reason}; create it yourself (one partition, cleanup.policy=compact)"
                ),
            )
        };
        let (listed_brokers, _) = self.replicas(topic)?;
        let replication = replication_factor(None, listed_brokers);
        let made_now = self
            .runtime
            .block_on(create(&self.client, topic, (1, replication), COMMITS, TIMEOUT))
            .map_err(refused)?;
        if made_now {
            return Ok(());
        }
        let config = self
            .runtime
            .block_on(describe(&self.client, topic, TIMEOUT))
            .map_err(|reason| kafka_error(brokers, topic, format!("the commit topic: {reason}")))?;
        check_settings(brokers, topic, COMMITS, &config)
            .map_err(|e| kafka_error(brokers, topic, format!("the commit topic cannot be used: {e}")))?;
        if let (listed_brokers, Some(found)) = self.replicas(topic)?
            && let Some(warning) = check_replication(brokers, topic, found, (None, listed_brokers))
                .map_err(|e| kafka_error(brokers, topic, e))?
        {
            tracing::warn!("{warning}");
        }
        Ok(())
    }

    /// The brokers the cluster lists, and the fewest replicas of a
    /// partition of `topic` (none when it is not listed).
    fn replicas(&self, topic: &str) -> Result<(usize, Option<usize>), ConnectorError> {
        let brokers = self.spec.bootstrap_servers.value();
        let metadata = self
            .client
            .inner()
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| kafka_error(brokers, topic, format!("reading the brokers' metadata: {e}")))?;
        let fewest = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions())
            .map(|p| p.replicas().len())
            .min();
        Ok((metadata.brokers().len(), fewest))
    }
}
