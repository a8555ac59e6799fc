//! Deleting what the repartition topics hold below the group's committed
//! offsets, as Kafka Streams does after its commits: those records were
//! read, and their effects (output, state changes, the next part's records)
//! committed, so no task reads them again, and the topics, which never
//! expire, would otherwise grow for good. At most once per
//! `purge_interval`, after a commit, without waiting: the request is sent
//! and its answer looked at after a later commit (a failed purge is
//! logged and tried again later; it loses nothing).

use super::ClusterTopics;
use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A DeleteRecords request on its way.
type InFlight = Pin<Box<dyn Future<Output = KafkaResult<TopicPartitionList>> + Send>>;

/// The purges of one process's repartition partitions.
pub struct RepartitionPurge {
    /// The repartition topics.
    topics: HashSet<String>,
    /// The least time between two purges.
    every: Duration,
    /// When the last purge was sent.
    last: Option<Instant>,
    /// The newest committed offset of each repartition partition.
    committed: HashMap<(String, i32), i64>,
    /// The offset each partition was last purged below.
    purged: HashMap<(String, i32), i64>,
    /// The last purge, until it answered.
    in_flight: Option<InFlight>,
}

impl RepartitionPurge {
    /// Purges of `topics` (the repartition topics), at most once `every`.
    pub fn new(topics: impl IntoIterator<Item = String>, every: Duration) -> Self {
        Self {
            topics: topics.into_iter().collect(),
            every,
            last: None,
            committed: HashMap::new(),
            purged: HashMap::new(),
            in_flight: None,
        }
    }

    /// `offsets` were just committed: the repartition partitions' among
    /// them are purged below, now if a purge is due.
    pub fn committed(&mut self, admin: &ClusterTopics, offsets: &TopicPartitionList) {
        for e in offsets.elements() {
            if let Offset::Offset(offset) = e.offset()
                && self.topics.contains(e.topic())
            {
                self.committed
                    .insert((e.topic().to_owned(), e.partition()), offset);
            }
        }
        self.purge_due(admin);
    }

    /// When a purge is due and the last one answered, deletes the records
    /// of the repartition partitions below their committed offsets through
    /// `admin` (sent, not waited for): a commit with nothing new calls it
    /// too, so the last commit's offsets are purged once due.
    pub fn purge_due(&mut self, admin: &ClusterTopics) {
        if let Some(request) = &mut self.in_flight {
            match request.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Pending => return,
                Poll::Ready(answer) => {
                    self.in_flight = None;
                    self.report(answer);
                }
            }
        }
        if self.last.is_some_and(|last| last.elapsed() < self.every) {
            return;
        }
        let mut below = TopicPartitionList::new();
        for (at, &offset) in &self.committed {
            if offset <= 0 || self.purged.get(at) >= Some(&offset) {
                continue;
            }
            if below
                .add_partition_offset(&at.0, at.1, Offset::Offset(offset))
                .is_ok()
            {
                self.purged.insert(at.clone(), offset);
            }
        }
        if below.count() == 0 {
            return;
        }
        tracing::debug!(
            partitions = below.count(),
            "purging the repartition topics below the committed offsets"
        );
        self.in_flight = Some(Box::pin(admin.delete_records(&below)));
        self.last = Some(Instant::now());
    }
}

impl RepartitionPurge {
    /// Logs what went wrong with a purge, if anything; what failed is
    /// purged again at the next one.
    fn report(&mut self, answer: KafkaResult<TopicPartitionList>) {
        match answer {
            Ok(list) => {
                for e in list.elements() {
                    if let Err(error) = e.error() {
                        tracing::warn!(topic = e.topic(), partition = e.partition(), %error, "purging a repartition partition's committed records failed; the next purge tries again");
                        self.purged.remove(&(e.topic().to_owned(), e.partition()));
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "purging the repartition topics' committed records failed; the next purge tries again");
                self.purged.clear();
            }
        }
    }
}
