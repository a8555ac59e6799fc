//! The topics cluster mode keeps its work in, made when missing: each
//! `key_by`'s repartition topic, `<pipeline>.<operator>.repartition`, and
//! each keyed operator's changelog, `<pipeline>.<operator>.changelog`
//! (compacted: the newest value of every state entry stays), and
//! `<pipeline>.offsets.committed`, the partitions whose position the
//! pipeline committed (compacted, one partition). A join's two
//! inputs share its repartition topic, so both sides of a key meet in one
//! task: a record of its second input carries [`INPUT_HEADER`]. A topic that
//! exists with another partition count is refused, never used: its
//! partitions would not line up with the tasks' key groups; so is one whose
//! settings would lose records (`connectors::kafka::topic_settings`: a
//! changelog that is not compacted, a repartition topic that expires), or
//! with fewer replicas than `replication_factor` asks for. Topics are made
//! with an explicit replication factor, and the repartition topics' records
//! the group committed past are deleted (`purge.rs`).

mod purge;

pub use purge::RepartitionPurge;

use crate::connectors::kafka::topic_settings::{
    Keeps, TopicSettingError, check_replication, check_settings, create, describe, replication_factor,
};
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use rdkafka::error::KafkaResult;
use rdkafka::{ClientConfig, TopicPartitionList};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The header of a repartition record for an input other than the first
/// of the operator reading it (a join's table or right side): one byte,
/// the input's number. The keyed task removes it before the operator sees
/// the record.
pub const INPUT_HEADER: &str = "mailer.input";

/// What a cluster topic holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicRole {
    /// Records on their way to their key's task.
    Repartition,
    /// A keyed task's state changes.
    Changelog,
    /// The partitions whose position the pipeline committed
    /// (`committed.rs`).
    Committed,
}

impl TopicRole {
    fn suffix(self) -> &'static str {
        match self {
            TopicRole::Repartition => "repartition",
            TopicRole::Changelog => "changelog",
            TopicRole::Committed => "committed",
        }
    }

    /// What a topic of this role must keep.
    fn keeps(self) -> Keeps {
        match self {
            TopicRole::Repartition => Keeps::EveryRecord,
            // A kept state is brought up to date from its changelog, which
            // must still hold the deletions made since it was kept.
            TopicRole::Changelog => Keeps::NewestOfEachKey {
                tombstones_for: Some(super::kept::MAX_AGE),
            },
            TopicRole::Committed => Keeps::NewestOfEachKey { tombstones_for: None },
        }
    }
}

/// What the brokers list of a topic.
struct Listed {
    /// Each partition's id, whether it has a leader, and its replicas.
    partitions: Vec<(i32, bool, usize)>,
    /// How many brokers the cluster lists.
    brokers: usize,
}

/// Why a cluster topic cannot be named, made or used.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// The pipeline's or the operator's name makes no valid topic name.
    #[error(
        "`{name}` is not a valid Kafka topic name (letters, digits, `.`, `_` and `-`, at most 249 characters): rename the pipeline or operator it is made of"
    )]
    BadName {
        /// The name.
        name: String,
    },
    /// The brokers refused or did not answer.
    #[error("cluster topic `{topic}` on `{brokers}`: {reason}")]
    Brokers {
        /// The brokers.
        brokers: String,
        /// The topic.
        topic: String,
        /// What went wrong.
        reason: String,
    },
    /// The topic exists with another partition count.
    #[error(
        "cluster topic `{topic}` has {found} partitions, but the pipeline needs {expected} (`repartition_partitions`): delete the topic (its records are the pipeline's own) or set `repartition_partitions = {found}`"
    )]
    Partitions {
        /// The topic.
        topic: String,
        /// What it has.
        found: usize,
        /// What the pipeline needs.
        expected: usize,
    },
    /// The topic exists with settings that would lose records, or with
    /// fewer replicas than asked for.
    #[error(transparent)]
    Setting(#[from] Box<TopicSettingError>),
}

/// The name of operator `operator`'s topic of `role` in `pipeline`.
pub fn topic_name(pipeline: &str, operator: &str, role: TopicRole) -> Result<String, TopicError> {
    let name = format!("{pipeline}.{operator}.{}", role.suffix());
    let valid = name.len() <= 249
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if valid {
        Ok(name)
    } else {
        Err(TopicError::BadName { name })
    }
}

/// An admin client of the cluster's brokers.
pub struct ClusterTopics {
    client: AdminClient<DefaultClientContext>,
    runtime: tokio::runtime::Runtime,
    brokers: String,
    /// `replication_factor`, when the manifest sets it.
    replication: Option<usize>,
}

impl ClusterTopics {
    /// Connects with `config` (the brokers, security); asking about a
    /// topic never makes it.
    pub fn connect(config: &ClientConfig) -> Result<Self, TopicError> {
        let mut config = config.clone();
        // The brokers would make a missing topic with one partition.
        config.set("allow.auto.create.topics", "false");
        let brokers = config.get("bootstrap.servers").unwrap_or_default().to_owned();
        let failed = |reason: String| TopicError::Brokers {
            brokers: brokers.clone(),
            topic: String::new(),
            reason,
        };
        let client = config.create().map_err(|e| failed(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| failed(format!("starting the admin client's runtime: {e}")))?;
        Ok(Self {
            client,
            runtime,
            brokers,
            replication: None,
        })
    }

    /// Makes topics with `replication` replicas (and refuses existing ones
    /// with fewer); `None`: the smaller of 3 and the brokers listed (and
    /// only warns of existing ones with fewer).
    pub fn with_replication(mut self, replication: Option<usize>) -> Self {
        self.replication = replication;
        self
    }

    /// The partitions of `topic`, which must exist (a source topic).
    pub fn partitions(&self, topic: &str) -> Result<Vec<i32>, TopicError> {
        match self.listed(topic)?.partitions {
            partitions if !partitions.is_empty() => Ok(partitions.into_iter().map(|(id, ..)| id).collect()),
            _ => Err(self.failed(
                topic,
                "the topic does not exist: create it (with the partitions you need) before the pipeline starts".into(),
            )),
        }
    }

    /// What the brokers list of `topic`: no partitions when they do not
    /// list it, or list it with an error.
    fn listed(&self, topic: &str) -> Result<Listed, TopicError> {
        let metadata = self
            .client
            .inner()
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| self.failed(topic, format!("reading its partitions: {e}")))?;
        let listed = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic && t.error().is_none());
        let partitions = listed.map_or_else(Vec::new, |t| {
            t.partitions()
                .iter()
                .map(|p| (p.id(), p.error().is_none() && p.leader() >= 0, p.replicas().len()))
                .collect()
        });
        Ok(Listed {
            partitions,
            brokers: metadata.brokers().len(),
        })
    }

    /// How many partitions `topic` has, once the brokers list it with a
    /// leader for each: a topic just created (by this process or another
    /// one starting beside it) takes a moment to reach every broker's
    /// metadata. No partitions when it is still not listed after
    /// `TIMEOUT`.
    fn settled(&self, topic: &str) -> Result<Listed, TopicError> {
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            let listed = self.listed(topic)?;
            if !listed.partitions.is_empty() && listed.partitions.iter().all(|(_, led, _)| *led) {
                return Ok(listed);
            }
            if std::time::Instant::now() >= deadline {
                return Ok(Listed {
                    partitions: Vec::new(),
                    ..listed
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    /// The brokers failed for `topic`, as `reason` says.
    fn failed(&self, topic: &str, reason: String) -> TopicError {
        TopicError::Brokers {
            brokers: self.brokers.clone(),
            topic: topic.to_owned(),
            reason,
        }
    }

    /// Makes `topic` with `partitions` partitions, the settings its role
    /// needs (compacted for a changelog; never expiring, never compacted
    /// for a repartition topic) and the replication factor asked for,
    /// unless it exists; refuses one with another partition count, with
    /// settings that would lose records, or with fewer replicas than
    /// `replication_factor` asks for (fewer than the default: a warning).
    pub fn ensure(&self, topic: &str, partitions: usize, role: TopicRole) -> Result<(), TopicError> {
        let failed = |reason: String| self.failed(topic, reason);
        let replication = replication_factor(self.replication, self.listed(topic)?.brokers);
        let made_now = self
            .runtime
            .block_on(create(
                &self.client,
                topic,
                (partitions, replication),
                role.keeps(),
                TIMEOUT,
            ))
            .map_err(failed)?;
        let listed = self.settled(topic)?;
        let found = listed.partitions.len();
        if found != partitions {
            return Err(TopicError::Partitions {
                topic: topic.to_owned(),
                found,
                expected: partitions,
            });
        }
        // One made now has the settings it was made with.
        if !made_now {
            let config = self
                .runtime
                .block_on(describe(&self.client, topic, TIMEOUT))
                .map_err(failed)?;
            check_settings(&self.brokers, topic, role.keeps(), &config)?;
        }
        let fewest = listed.partitions.iter().map(|(.., replicas)| *replicas).min();
        if let Some(warning) = check_replication(
            &self.brokers,
            topic,
            fewest.unwrap_or(0),
            (self.replication, listed.brokers),
        )? {
            tracing::warn!("{warning}");
        }
        Ok(())
    }

    /// Deletes the records of each partition in `below` under its offset
    /// (Kafka's DeleteRecords): the request is sent now, the future
    /// returned tells how it went.
    pub fn delete_records(
        &self,
        below: &TopicPartitionList,
    ) -> impl Future<Output = KafkaResult<TopicPartitionList>> + Send + use<> {
        let options = AdminOptions::new().operation_timeout(Some(TIMEOUT));
        self.client.delete_records(below, &options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_are_checked() {
        assert_eq!(
            topic_name("orders", "counts", TopicRole::Changelog).unwrap(),
            "orders.counts.changelog"
        );
        assert_eq!(
            topic_name("orders", "by-key", TopicRole::Repartition).unwrap(),
            "orders.by-key.repartition"
        );
        let err = topic_name("orders", "count words", TopicRole::Changelog).unwrap_err();
        assert!(
            err.to_string()
                .contains("`orders.count words.changelog` is not a valid Kafka topic name")
        );
        assert!(topic_name(&"p".repeat(240), "op", TopicRole::Changelog).is_err());
    }
}
