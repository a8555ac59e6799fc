//! The partitions whose position the pipeline ever committed, so a lost
//! position is refused, never guessed. Cluster mode keeps where it is only
//! in its group's committed offsets, which Kafka deletes
//! `offsets.retention.minutes` (7 days by default) after the group empties.
//! Read again from their start, the sources and repartition topics would
//! repeat output on top of the changelogs' state; from their end, they
//! would skip input. So each partition is named once in the compacted topic
//! `<pipeline>.offsets.committed`, in the transaction of the first commit of
//! it by a process; a partition assigned without a committed offset that
//! this topic names lost its position, and the process stops with
//! [`ClusterError::PositionLost`]. A partition it does not name is new
//! (the pipeline's first run, or partitions added to a source topic) and is
//! read from its start.
//!
//! The same topic records, under the key `plan`, what the state in the
//! changelogs depends on ([`PlanShape`]): a process whose manifest spreads
//! keys over other key groups, or no longer writes a changelog that holds
//! state, is refused ([`ClusterError::PlanChanged`]) instead of reading its
//! keys' state in the wrong place or leaving it behind.

use super::error::ClusterError;
use super::member::TopicPartition;
use super::topics::{TopicError, TopicRole, topic_name};
use crate::connectors::kafka::{
    EndReader, LONGEST_OPEN_TRANSACTION, Reported, consumer_recovers, decided_end, send_waiting,
};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The key of the [`PlanShape`] record.
const SHAPE_KEY: &str = "plan";

/// What the state a pipeline keeps in its changelogs depends on.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PlanShape {
    /// The key groups keys are spread over (`max_parallelism`).
    pub key_groups: u32,
    /// The keyed operators' changelog topics.
    pub changelogs: Vec<String>,
}

impl PlanShape {
    /// Why a process with this shape cannot take over state written with
    /// `was`, if it cannot: other key groups, or a changelog no operator
    /// writes any more. Changelogs added (new keyed operators) are fine.
    fn refusal(&self, was: &PlanShape) -> Option<String> {
        if was.key_groups != self.key_groups {
            return Some(format!(
                "its keys were spread over {} key groups, and this manifest's `max_parallelism` is {}: each key's state would be looked for in another group",
                was.key_groups, self.key_groups
            ));
        }
        let left: Vec<&str> = was
            .changelogs
            .iter()
            .filter(|c| !self.changelogs.contains(c))
            .map(String::as_str)
            .collect();
        (!left.is_empty()).then(|| {
            format!(
                "no keyed operator of this manifest writes `{}` (renamed or removed): the state there would be left behind",
                left.join("`, `")
            )
        })
    }
}

/// The record naming `partition` of `topic`: its key.
fn key_of((topic, partition): &TopicPartition) -> String {
    format!("{topic}/{partition}")
}

/// What this process named in the topic, and what it names in the open
/// transaction.
pub struct CommittedPartitions {
    topic: String,
    group: String,
    brokers: String,
    named: HashSet<TopicPartition>,
    naming: Vec<TopicPartition>,
}

impl CommittedPartitions {
    /// The record of `pipeline`'s group `group` on `brokers` (the topic is
    /// made by the caller, with [`TopicRole::Committed`]).
    pub fn new(pipeline: &str, group: &str, brokers: &str) -> Result<Self, TopicError> {
        Ok(Self {
            topic: topic_name(pipeline, "offsets", TopicRole::Committed)?,
            group: group.to_owned(),
            brokers: brokers.to_owned(),
            named: HashSet::new(),
            naming: Vec::new(),
        })
    }

    /// Its topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Names the partitions of `offsets` this process has not named yet,
    /// with `producer` (in the transaction committing `offsets`).
    pub fn name_new(
        &mut self,
        producer: &BaseProducer<Reported>,
        offsets: &TopicPartitionList,
    ) -> Result<(), ClusterError> {
        for e in offsets.elements() {
            let tp = (e.topic().to_owned(), e.partition());
            if self.named.contains(&tp) || self.naming.contains(&tp) {
                continue;
            }
            let key = key_of(&tp);
            let record = BaseRecord::to(&self.topic).key(&key).payload(&self.group);
            send_waiting(producer, record).map_err(ClusterError::kafka(
                &self.brokers,
                format!("naming {key} in `{}`", self.topic),
            ))?;
            self.naming.push(tp);
        }
        Ok(())
    }

    /// The transaction naming them committed.
    pub fn committed(&mut self) {
        self.named.extend(self.naming.drain(..));
    }

    /// The transaction naming them aborted: they are named again at the
    /// next commit.
    pub fn aborted(&mut self) {
        self.naming.clear();
    }

    /// Refuses `partitions`, just assigned through `consumer`, when one
    /// has no committed offset in the group but was committed before.
    pub fn check<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        client: &ClientConfig,
        partitions: &[TopicPartition],
    ) -> Result<(), ClusterError> {
        let mut list = TopicPartitionList::new();
        for (topic, p) in partitions {
            list.add_partition(topic, *p);
        }
        let offsets = consumer
            .committed_offsets(list, TIMEOUT)
            .map_err(ClusterError::kafka(
                &self.brokers,
                "reading the group's committed offsets".into(),
            ))?;
        let without: Vec<TopicPartition> = offsets
            .elements()
            .iter()
            .filter(|e| !matches!(e.offset(), Offset::Offset(_)))
            .map(|e| (e.topic().to_owned(), e.partition()))
            .collect();
        if without.is_empty() {
            return Ok(());
        }
        let ever = self.read(client)?;
        let lost: Vec<String> = without
            .iter()
            .filter_map(|tp| {
                ever.get(&key_of(tp))
                    .map(|group| format!("{} (group `{group}`)", key_of(tp)))
            })
            .collect();
        if lost.is_empty() {
            return Ok(());
        }
        Err(ClusterError::PositionLost {
            group: self.group.clone(),
            partitions: lost.join(", "),
            topic: self.topic.clone(),
        })
    }

    /// Refuses `shape` when the state in the changelogs was written with
    /// another one; records it (in the open transaction, with `producer`)
    /// when the topic has none, or it adds changelogs: whether it did (the
    /// caller commits it then).
    pub fn check_shape(
        &self,
        client: &ClientConfig,
        producer: &BaseProducer<Reported>,
        shape: &PlanShape,
    ) -> Result<bool, ClusterError> {
        let ever = self.read(client)?;
        if let Some(text) = ever.get(SHAPE_KEY) {
            let was: PlanShape = serde_json::from_str(text).map_err(|e| ClusterError::CommittedUnread {
                topic: self.topic.clone(),
                brokers: self.brokers.clone(),
                reason: format!("its `{SHAPE_KEY}` record is not one mailer wrote: {e}"),
            })?;
            if let Some(reason) = shape.refusal(&was) {
                return Err(ClusterError::PlanChanged {
                    reason,
                    topic: self.topic.clone(),
                });
            }
            if &was == shape {
                return Ok(false);
            }
        }
        let value = serde_json::to_string(shape).expect("serialises");
        let record = BaseRecord::to(&self.topic).key(SHAPE_KEY).payload(&value);
        send_waiting(producer, record).map_err(ClusterError::kafka(
            &self.brokers,
            format!("recording the plan in `{}`", self.topic),
        ))?;
        Ok(true)
    }

    /// Every record of the topic, key to value, read to its end.
    fn read(&self, client: &ClientConfig) -> Result<BTreeMap<String, String>, ClusterError> {
        let failed = |reason: String| ClusterError::CommittedUnread {
            topic: self.topic.clone(),
            brokers: self.brokers.clone(),
            reason,
        };
        let mut config = client.clone();
        config
            .set("group.id", format!("mailer-offsets-reader.{}", self.topic))
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("isolation.level", "read_committed");
        let consumer: BaseConsumer<EndReader> = config
            .create_with_context(EndReader)
            .map_err(|e| failed(e.to_string()))?;
        // Names committed after a transaction still open are read too.
        decided_end(client, &self.topic, 0, LONGEST_OPEN_TRANSACTION).map_err(failed)?;
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic, 0, Offset::Beginning)
            .map_err(|e| failed(e.to_string()))?;
        consumer.assign(&list).map_err(|e| failed(e.to_string()))?;
        let mut ever = BTreeMap::new();
        let started = Instant::now();
        loop {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(msg)) => {
                    if let (Some(key), Some(value)) = (msg.key(), msg.payload()) {
                        ever.insert(
                            String::from_utf8_lossy(key).into_owned(),
                            String::from_utf8_lossy(value).into_owned(),
                        );
                    }
                }
                Some(Err(KafkaError::PartitionEOF(_))) => return Ok(ever),
                Some(Err(e)) if consumer_recovers(&e) && started.elapsed() < TIMEOUT => {}
                Some(Err(e)) => return Err(failed(e.to_string())),
                None if started.elapsed() > TIMEOUT => {
                    return Err(failed(format!("its end was not reached within {TIMEOUT:?}")));
                }
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_key_groups_or_a_changelog_left_behind_are_refused_and_new_ones_are_fine() {
        let was = PlanShape {
            key_groups: 128,
            changelogs: vec!["p.counts.changelog".into()],
        };
        let same = was.clone();
        assert_eq!(same.refusal(&was), None);
        let grown = PlanShape {
            changelogs: vec!["p.counts.changelog".into(), "p.sums.changelog".into()],
            ..was.clone()
        };
        assert_eq!(grown.refusal(&was), None);
        let regrouped = PlanShape {
            key_groups: 256,
            ..was.clone()
        };
        assert!(
            regrouped
                .refusal(&was)
                .unwrap()
                .contains("`max_parallelism` is 256")
        );
        let renamed = PlanShape {
            changelogs: vec!["p.totals.changelog".into()],
            ..was.clone()
        };
        assert!(renamed.refusal(&was).unwrap().contains("`p.counts.changelog`"));
    }

    #[test]
    fn the_topic_is_named_after_the_pipeline() {
        let c = CommittedPartitions::new("orders", "orders-group", "127.0.0.1:9092").unwrap();
        assert_eq!(c.topic(), "orders.offsets.committed");
        assert_eq!(key_of(&("orders-in".into(), 3)), "orders-in/3");
        assert!(CommittedPartitions::new("bad name", "g", "b").is_err());
    }
}
