//! The Kafka source: every partition of its topics, assigned directly (no
//! group rebalancing), so the offsets in a checkpoint are the whole truth
//! about where it is; they are committed to the group as well, for tools.
//! Every partition has a concrete offset from the start (`latest` and
//! `earliest` are resolved when the source opens), so every checkpoint
//! holds every partition, read or not; partitions added to a topic while
//! running are found every `partition_discovery` and read from their
//! beginning, as are partitions a checkpoint does not know.

use super::config::{KafkaSourceSpec, StartFrom, client_config};
use super::lag::{STATISTICS_INTERVAL_MS, SourceContext};
use super::record_reader::RecordReader;
use super::transient::{FaultLog, consumer_recovers};
use super::watermarks::watermarks;
use super::{consumer_error, kafka_error, partitions_of};
use crate::batch::Batch;
use crate::connectors::refuse;
use crate::connectors::{ConnectorError, Poll, Source, SplitLag};
use crate::failure::FailureHandler;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long metadata and offset requests may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

type Partition = (String, i32);

/// Reads every partition of its topics.
pub struct KafkaSource {
    consumer: BaseConsumer<SourceContext>,
    brokers: String,
    /// How messages become records.
    reader: RecordReader,
    /// The next offset of each partition.
    next: BTreeMap<Partition, i64>,
    /// Where each partition ended when the source opened (its high
    /// watermark then).
    ends_at_open: BTreeMap<Partition, i64>,
    /// Bounded reads end there.
    bounded: bool,
    /// Each assigned partition's split index (for per-partition watermarks).
    splits: BTreeMap<Partition, usize>,
    /// The largest event time per split in the last batch.
    split_times: Vec<(usize, i64)>,
    /// Where records the format cannot read, or larger than
    /// `max_record_bytes`, go.
    rejects: FailureHandler,
    /// The topics, and how often to look for partitions added to them
    /// (`None` for bounded reads, whose ends are fixed when they open).
    topics: Vec<String>,
    discovery: Option<Duration>,
    last_discovery: Instant,
    /// Faults the consumer rides out, logged now and then.
    faults: FaultLog,
}

impl KafkaSource {
    /// Connects, checks the topics, and assigns every partition at `spec`'s
    /// start; records its format cannot read go to `rejects`.
    pub fn open(spec: &KafkaSourceSpec, rejects: FailureHandler) -> Result<Self, ConnectorError> {
        let brokers = spec.bootstrap_servers.value().to_owned();
        let topics = spec.topics.join(", ");
        let mut config = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options);
        if !spec.options.contains_key("fetch.wait.max.ms") {
            // Low latency by default: the broker answers a fetch within 20 ms
            // even when it has little (librdkafka waits up to 500 ms).
            config.set("fetch.wait.max.ms", "20");
        }
        config
            .set("group.id", &spec.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set(
                "auto.offset.reset",
                if spec.start == StartFrom::Latest {
                    "latest"
                } else {
                    "earliest"
                },
            );
        if !spec.options.contains_key("statistics.interval.ms") {
            config.set("statistics.interval.ms", STATISTICS_INTERVAL_MS);
        }
        let consumer: BaseConsumer<SourceContext> = config
            .create_with_context(SourceContext::default())
            .map_err(|e| kafka_error(&brokers, &topics, e))?;
        let mut assignment = TopicPartitionList::new();
        let mut ends = BTreeMap::new();
        for topic in &spec.topics {
            for p in partitions_of(consumer.client(), || consumer_error(&consumer), &brokers, topic)? {
                let offset = match spec.start {
                    StartFrom::Earliest | StartFrom::Committed => Offset::Beginning,
                    StartFrom::Latest => Offset::End,
                    StartFrom::Timestamp(t) => Offset::Offset(t),
                };
                assignment
                    .add_partition_offset(topic, p, offset)
                    .map_err(|e| kafka_error(&brokers, topic, e))?;
                let ends_of = watermarks(consumer.client(), topic, p, REQUEST_TIMEOUT)
                    .map_err(|e| kafka_error(&brokers, topic, e))?;
                ends.insert((topic.clone(), p), ends_of);
            }
        }
        let assignment = match spec.start {
            StartFrom::Committed => committed_or_earliest(&consumer, &assignment, &brokers, &topics)?,
            StartFrom::Timestamp(_) => consumer
                .offsets_for_times(assignment, REQUEST_TIMEOUT)
                .map_err(|e| kafka_error(&brokers, &topics, e))?,
            _ => assignment,
        };
        // Each partition starts at a concrete offset, so the position of a
        // checkpoint taken before its first record still holds it (a
        // bounded read with nothing left is done at once).
        let mut next = BTreeMap::new();
        let mut concrete = TopicPartitionList::new();
        for e in assignment.elements() {
            let (topic, p) = (e.topic(), e.partition());
            let start = match e.offset() {
                Offset::Offset(o) => o,
                symbolic => {
                    let (low, high) = ends[&(topic.to_owned(), p)];
                    if symbolic == Offset::End { high } else { low }
                }
            };
            concrete
                .add_partition_offset(topic, p, Offset::Offset(start))
                .map_err(|err| kafka_error(&brokers, topic, err))?;
            next.insert((topic.to_owned(), p), start);
        }
        let assignment = concrete;
        consumer
            .assign(&assignment)
            .map_err(|e| kafka_error(&brokers, &topics, e))?;
        let ends = ends.into_iter().map(|(p, (_, high))| (p, high)).collect();
        let splits = assignment
            .elements()
            .iter()
            .enumerate()
            .map(|(i, e)| ((e.topic().to_owned(), e.partition()), i))
            .collect();
        Ok(Self {
            rejects,
            splits,
            split_times: Vec::new(),
            consumer,
            brokers,
            reader: RecordReader::of(spec),
            next,
            ends_at_open: ends,
            bounded: spec.bounded,
            topics: spec.topics.clone(),
            discovery: (!spec.bounded).then_some(spec.partition_discovery),
            last_discovery: Instant::now(),
            faults: FaultLog::default(),
        })
    }

    /// The beginning of partition `p` of `topic` (its low watermark).
    fn beginning(&self, topic: &str, p: i32) -> Result<i64, ConnectorError> {
        let (low, _) = watermarks(self.consumer.client(), topic, p, REQUEST_TIMEOUT)
            .map_err(|e| kafka_error(&self.brokers, topic, e))?;
        Ok(low)
    }

    /// Assigns partitions added to the topics since they were last looked
    /// at, from their beginning.
    fn discover_partitions(&mut self) -> Result<(), ConnectorError> {
        let mut added = false;
        for topic in self.topics.clone() {
            let partitions = partitions_of(
                self.consumer.client(),
                || consumer_error(&self.consumer),
                &self.brokers,
                &topic,
            )?;
            for p in partitions {
                let partition = (topic.clone(), p);
                if self.splits.contains_key(&partition) {
                    continue;
                }
                let start = self.beginning(&topic, p)?;
                tracing::info!(topic = %topic, partition = p, offset = start, "reading a partition added to the topic");
                added = true;
                let split = self.splits.len();
                self.splits.insert(partition.clone(), split);
                self.next.insert(partition, start);
            }
        }
        if added {
            self.assign_at_next()?;
        }
        Ok(())
    }

    /// Assigns every known partition at its next offset.
    fn assign_at_next(&self) -> Result<(), ConnectorError> {
        let mut list = TopicPartitionList::new();
        for ((topic, p), next) in &self.next {
            list.add_partition_offset(topic, *p, Offset::Offset(*next))
                .map_err(|e| kafka_error(&self.brokers, topic, e))?;
        }
        self.consumer
            .assign(&list)
            .map_err(|e| kafka_error(&self.brokers, "(assignment)", e))
    }

    /// Whether every partition reached where it ended when the source
    /// opened. The consumer's position counts skipped transaction markers,
    /// so a partition that ends with one is there too.
    fn reached_ends_at_open(&self) -> bool {
        let positions = self.consumer.position().ok();
        self.ends_at_open.iter().all(|((topic, p), end)| {
            let consumed = self.next.get(&(topic.clone(), *p)).copied().unwrap_or(0);
            let position = positions
                .as_ref()
                .and_then(|l| l.find_partition(topic, *p))
                .and_then(|e| e.offset().to_raw())
                .unwrap_or(0);
            consumed.max(position) >= *end
        })
    }
}

/// The group's committed offsets, the beginning where it has none.
fn committed_or_earliest(
    consumer: &BaseConsumer<SourceContext>,
    assignment: &TopicPartitionList,
    brokers: &str,
    topics: &str,
) -> Result<TopicPartitionList, ConnectorError> {
    let committed = consumer
        .committed_offsets(assignment.clone(), REQUEST_TIMEOUT)
        .map_err(|e| kafka_error(brokers, topics, e))?;
    let mut out = TopicPartitionList::new();
    for e in committed.elements() {
        let offset = match e.offset() {
            Offset::Offset(o) => Offset::Offset(o),
            _ => Offset::Beginning,
        };
        out.add_partition_offset(e.topic(), e.partition(), offset)
            .map_err(|err| kafka_error(brokers, e.topic(), err))?;
    }
    Ok(out)
}

impl Source for KafkaSource {
    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        if let Some(every) = self.discovery
            && self.last_discovery.elapsed() >= every
        {
            self.last_discovery = Instant::now();
            // Brokers out of reach now are asked again next time: reading
            // the partitions known goes on meanwhile.
            if let Err(e) = self.discover_partitions() {
                tracing::warn!(error = %e, "looking for partitions added to the topics failed; looking again in {every:?}");
            }
        }
        let mut batch = Vec::with_capacity(max.min(4096));
        self.split_times.clear();
        while batch.len() < max {
            let wait = if batch.is_empty() {
                Duration::from_millis(50)
            } else {
                Duration::ZERO
            };
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(msg)) => {
                    let partition = (msg.topic().to_owned(), msg.partition());
                    let rec = match self.reader.read(&msg) {
                        Ok(rec) => rec,
                        Err((raw, reason)) => {
                            refuse(&self.rejects, raw, &reason).map_err(|message| ConnectorError::Kafka {
                                brokers: self.brokers.clone(),
                                topic: msg.topic().to_owned(),
                                message,
                            })?;
                            self.next.insert(partition, msg.offset() + 1);
                            continue;
                        }
                    };
                    if let Some(&split) = self.splits.get(&partition) {
                        match self.split_times.iter_mut().find(|(s, _)| *s == split) {
                            Some((_, t)) => *t = (*t).max(rec.timestamp),
                            None => self.split_times.push((split, rec.timestamp)),
                        }
                    }
                    self.next.insert(partition, msg.offset() + 1);
                    batch.push(rec);
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) if consumer_recovers(&e) => {
                    if self.faults.due() {
                        tracing::warn!(brokers = %self.brokers, error = %e, "the Kafka source's consumer reported a fault it rides out; it goes on");
                    }
                }
                Some(Err(e)) => return Err(kafka_error(&self.brokers, "(consuming)", e)),
            }
        }
        Ok(if !batch.is_empty() {
            Poll::Records(Batch::Records(batch))
        } else if self.bounded && self.reached_ends_at_open() {
            Poll::End
        } else {
            Poll::Idle
        })
    }

    fn caught_up(&self) -> bool {
        self.reached_ends_at_open()
    }

    fn splits(&self) -> usize {
        self.splits.len()
    }

    fn split_times(&self) -> Option<&[(usize, i64)]> {
        Some(&self.split_times)
    }

    fn lag(&self) -> Vec<SplitLag> {
        self.splits
            .keys()
            .filter_map(|(topic, p)| {
                let end = self.consumer.context().end_of(topic, *p)?;
                let next = self.next.get(&(topic.clone(), *p)).copied()?;
                Some(SplitLag {
                    split: format!("{topic}/{p}"),
                    records: (end - next).max(0),
                })
            })
            .collect()
    }

    fn position(&self) -> serde_json::Value {
        // Informational: the group's committed offsets follow the checkpoints.
        let mut list = TopicPartitionList::new();
        for ((topic, p), next) in &self.next {
            let _ = list.add_partition_offset(topic, *p, Offset::Offset(*next));
        }
        if list.count() > 0
            && let Err(e) = self.consumer.commit(&list, CommitMode::Async)
        {
            tracing::debug!(error = %e, "committing offsets to the group failed (they are informational)");
        }
        let mut topics: BTreeMap<&str, BTreeMap<String, i64>> = BTreeMap::new();
        for ((topic, p), next) in &self.next {
            topics.entry(topic).or_default().insert(p.to_string(), *next);
        }
        serde_json::json!({ "offsets": topics })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let not_a_position = || ConnectorError::Unsupported(format!("not a Kafka position: {position}"));
        let offsets = position["offsets"].as_object().ok_or_else(not_a_position)?;
        let mut restored = BTreeMap::new();
        for (topic, partitions) in offsets {
            for (p, next) in partitions.as_object().into_iter().flatten() {
                let (Ok(p), Some(next)) = (p.parse::<i32>(), next.as_i64()) else {
                    return Err(not_a_position());
                };
                if !self.next.contains_key(&(topic.clone(), p)) {
                    return Err(ConnectorError::Unsupported(format!(
                        "the checkpoint reads topic `{topic}` partition {p}, which the source no longer has"
                    )));
                }
                restored.insert((topic.clone(), p), next);
            }
        }
        // Every partition is in every checkpoint: one that is not was added
        // to its topic after this checkpoint was taken.
        for (topic, p) in self.next.keys().cloned().collect::<Vec<_>>() {
            let next = match restored.get(&(topic.clone(), p)) {
                Some(&next) => next,
                None => {
                    let start = self.beginning(&topic, p)?;
                    tracing::info!(topic = %topic, partition = p, offset = start,
                        "the checkpoint predates this partition: reading it from its beginning");
                    start
                }
            };
            self.next.insert((topic, p), next);
        }
        self.assign_at_next()
    }
}
