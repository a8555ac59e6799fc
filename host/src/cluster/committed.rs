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

use super::error::ClusterError;
use super::member::TopicPartition;
use super::topics::{TopicError, TopicRole, topic_name};
use crate::connectors::kafka::{EndReader, Reported, consumer_recovers, send_waiting};
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

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
    fn the_topic_is_named_after_the_pipeline() {
        let c = CommittedPartitions::new("orders", "orders-group", "127.0.0.1:9092").unwrap();
        assert_eq!(c.topic(), "orders.offsets.committed");
        assert_eq!(key_of(&("orders-in".into(), 3)), "orders-in/3");
        assert!(CommittedPartitions::new("bad name", "g", "b").is_err());
    }
}
