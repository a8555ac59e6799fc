//! A keyed task's state rebuilt from its changelog partition: every
//! committed record from an offset (the one its local state recorded at its
//! last commit, or the start) to the partition's end as the task is
//! assigned, applied in order: a value puts its entry, a tombstone deletes
//! it. Aborted transactions are skipped (`read_committed`), and the end is
//! read once every transaction below it is decided, so the state is
//! exactly what the last committed transaction left.

use crate::connectors::kafka::{
    EndReader, FaultLog, LONGEST_OPEN_TRANSACTION, consumer_recovers, decided_end,
};
use crate::state::{ChangelogBackend, StateError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a task's state cannot be restored.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The changelog cannot be read.
    #[error("restoring from changelog `{topic}` partition {partition}: {reason}")]
    Read {
        /// The changelog.
        topic: String,
        /// Its partition.
        partition: i32,
        /// What failed.
        reason: String,
    },
    /// The state backend refused a record.
    #[error("restoring from changelog `{topic}` partition {partition}: {source}")]
    State {
        /// The changelog.
        topic: String,
        /// Its partition.
        partition: i32,
        /// What the backend said.
        source: StateError,
    },
}

/// The changelog entry holding the task's watermark (eight bytes, little
/// endian): a key no state entry can have (each starts with its key group
/// and operator, four bytes), so a moved task resumes at the event time it
/// had, and windows it fired stay fired.
pub const WATERMARK_ENTRY: &[u8] = &[0xFF];

/// How far a restore got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Restored {
    /// The task's watermark, when the changelog holds one.
    pub watermark: Option<i64>,
    /// The offset it started from: `from`, or 0 when the changelog no
    /// longer holds `from` (the state it was given is then cleared).
    pub from: i64,
    /// The partition's end as the restore began.
    pub end: i64,
    /// Records applied.
    pub records: u64,
    /// The offset after the last record read: where the next restore of
    /// this task starts.
    pub next_offset: i64,
}

/// Applies changelog `topic`'s partition `partition`, from offset `from` to
/// its end, to `state` (which holds what the changelog held before `from`);
/// `progress` is told as it starts, every 10,000 records and at the end. When the partition no longer
/// holds `from` (it was made anew, or its start was deleted), the state is
/// cleared and restored from the start.
pub fn restore_task(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    from: i64,
    state: &mut ChangelogBackend,
    progress: &mut dyn FnMut(Restored),
) -> Result<Restored, RestoreError> {
    let failed = |reason: String| RestoreError::Read {
        topic: topic.to_owned(),
        partition,
        reason,
    };
    // Up to the end as it is now, once every transaction in it is decided:
    // a commit whose markers a leader failover delays holds the last
    // stable offset back, and stopping there would drop its state changes
    // while its source offsets count as committed.
    let (low, high) = decided_end(config, topic, partition, LONGEST_OPEN_TRANSACTION).map_err(failed)?;
    let mut config = config.clone();
    config
        .set("group.id", format!("mailer-restore-{topic}"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true");
    let consumer: BaseConsumer<EndReader> = config
        .create_with_context(EndReader)
        .map_err(|e: KafkaError| failed(e.to_string()))?;
    let state_failed = |source| RestoreError::State {
        topic: topic.to_owned(),
        partition,
        source,
    };
    let from = if from == 0 || (low..=high).contains(&from) {
        from
    } else {
        tracing::warn!(
            changelog = topic,
            partition,
            kept = from,
            low,
            high,
            "the changelog no longer holds where the kept state stands: it restores from the start"
        );
        state.drop_key_groups(&|_| true).map_err(state_failed)?;
        0
    };
    let mut done = Restored {
        from,
        end: high,
        next_offset: from,
        ..Restored::default()
    };
    progress(done);
    if from >= high {
        return Ok(done);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, partition, Offset::Offset(from))
        .map_err(|e| failed(e.to_string()))?;
    consumer.assign(&assignment).map_err(|e| failed(e.to_string()))?;
    let mut faults = FaultLog::default();
    loop {
        match consumer.poll(TIMEOUT) {
            None => return Err(failed(format!("no answer within {TIMEOUT:?}"))),
            Some(Err(KafkaError::PartitionEOF(_))) => break,
            Some(Err(e)) if consumer_recovers(&e) => {
                if faults.due() {
                    tracing::warn!(topic, partition, error = %e, "restoring: the consumer rides out a fault");
                }
            }
            Some(Err(e)) => return Err(failed(e.to_string())),
            Some(Ok(m)) => {
                let entry = m.key().unwrap_or_default();
                if entry == WATERMARK_ENTRY {
                    done.watermark = m
                        .payload()
                        .and_then(|v| Some(i64::from_le_bytes(v.try_into().ok()?)));
                } else {
                    state.restore(entry, m.payload()).map_err(state_failed)?;
                }
                done.records += 1;
                done.next_offset = m.offset() + 1;
                if done.records.is_multiple_of(10_000) {
                    progress(done);
                }
            }
        }
    }
    // Past aborted transactions and markers, the end is the partition's.
    let position = consumer.position().ok().and_then(|positions| {
        positions
            .find_partition(topic, partition)
            .and_then(|p| p.offset().to_raw())
    });
    done.next_offset = done.next_offset.max(position.unwrap_or(done.next_offset));
    progress(done);
    Ok(done)
}
