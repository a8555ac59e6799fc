//! How far behind a source is: librdkafka's statistics (every second) give
//! each partition's newest offset, which the source compares with the next
//! offset it will read.

use super::Reported;
use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// How often librdkafka reports its statistics, unless the manifest says.
pub const STATISTICS_INTERVAL_MS: &str = "1000";

/// The consumer context of a source: keeps each partition's end offset
/// (the last stable one, which `read_committed` reads up to), and the
/// error librdkafka last reported (see [`Reported`]).
#[derive(Default)]
pub struct SourceContext {
    ends: Mutex<BTreeMap<(String, i32), i64>>,
    reported: Reported,
}

impl AsRef<Reported> for SourceContext {
    fn as_ref(&self) -> &Reported {
        &self.reported
    }
}

impl SourceContext {
    /// The end offset of `partition` of `topic` when last reported.
    pub fn end_of(&self, topic: &str, partition: i32) -> Option<i64> {
        self.ends
            .lock()
            .expect("ends lock")
            .get(&(topic.to_owned(), partition))
            .copied()
    }
}

impl ClientContext for SourceContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.reported.error(error, reason);
    }

    fn stats(&self, statistics: Statistics) {
        let mut ends = self.ends.lock().expect("ends lock");
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                // -1 is librdkafka's internal "unassigned" partition.
                let end = if p.ls_offset >= 0 {
                    p.ls_offset
                } else {
                    p.hi_offset
                };
                if partition >= 0 && end >= 0 {
                    ends.insert((topic.clone(), partition), end);
                }
            }
        }
    }
}

impl ConsumerContext for SourceContext {}
