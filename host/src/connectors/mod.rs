//! Sources and sinks: where records enter and leave a pipeline.

mod blackhole;
pub mod config;
mod file;
mod format;
mod generator;
pub mod kafka;
pub mod postgres;
mod rate;
mod registry;
mod stdout;

pub use blackhole::{BlackholeSink, BlackholeSpec};
pub use config::{
    CommittedCheckpoint, ConfigProblem, ConnectorContext, Endpoint, OpenSink, OpenSource, ProblemAt,
    SinkCheck, SinkConfig, SourceConfig,
};
pub use file::{FileFormat, FileSink, FileSinkSpec, FileSource, FileSourceSpec};
pub use format::SinkFormat;
pub use generator::{GeneratorSource, GeneratorSpec, splitmix64};
pub use registry::{SinkSpec, SourceSpec};
pub use stdout::{StdoutSink, StdoutSpec};

use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::record::Record;

/// Applies a connector's failure policy to a record that cannot pass for a
/// reason of its own (it does not decode, the target refuses it); the
/// message to stop the pipeline with when the policy says `fail` (or the
/// dead-letter sink is gone).
pub(crate) fn refuse(rejects: &FailureHandler, record: Record, reason: &str) -> Result<(), String> {
    rejects.fail(record, reason).map_err(|e| match e {
        OperatorError::RecordFailed { record, reason, .. } => format!("{reason} (record {record})"),
        other => other.to_string(),
    })
}

/// What a source's poll produced.
#[derive(Debug)]
pub enum Poll {
    /// The next records, in order.
    Records(Batch),
    /// Nothing right now; poll again.
    Idle,
    /// A bounded source is exhausted.
    End,
}

/// How far one split of a source is behind its newest record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SplitLag {
    /// The split (`topic/partition` for Kafka).
    pub split: String,
    /// Records not read yet.
    pub records: i64,
}

/// How much of a bounded input is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Progress {
    /// Records read.
    pub records: u64,
    /// All records, where known in advance.
    pub records_total: Option<u64>,
    /// Bytes read, where the source counts them.
    pub bytes: Option<u64>,
    /// All bytes, where known in advance.
    pub bytes_total: Option<u64>,
}

/// Where records come from. Polled from the source stage's own thread.
pub trait Source: Send {
    /// Up to `max` next records. May block briefly (e.g. a rate limit).
    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError>;

    /// Releases resources; called once when the stage stops.
    fn close(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// How many splits (Kafka partitions) the source reads; the watermark
    /// is the minimum over them.
    fn splits(&self) -> usize {
        1
    }

    /// The largest event time of each split in the batch [`poll`] just
    /// returned, as `(split, time)`; `None` when the source has one split
    /// (then the batch's largest time is used).
    ///
    /// [`poll`]: Source::poll
    fn split_times(&self) -> Option<&[(usize, i64)]> {
        None
    }

    /// Where the source is: every record before it has been returned by
    /// [`poll`](Source::poll). A checkpoint keeps it; `null` for a source
    /// that cannot be resumed.
    fn position(&self) -> serde_json::Value {
        serde_json::Value::Null
    }

    /// Whether it has read everything its input held when it opened (yes
    /// for a source without such a notion). A source feeding a global
    /// table is read alone until it is caught up (or ended).
    fn caught_up(&self) -> bool {
        true
    }

    /// How far behind the newest record each split is, in records, where
    /// the source knows (Kafka: from the partitions' high watermarks).
    fn lag(&self) -> Vec<SplitLag> {
        Vec::new()
    }

    /// How much of a bounded input is done, where the source knows.
    fn progress(&self) -> Option<Progress> {
        None
    }

    /// Continues from a position [`position`](Source::position) returned.
    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let _ = position;
        Err(ConnectorError::Unsupported(
            "this source cannot resume from a checkpoint".into(),
        ))
    }
}

/// Where records go. Called from the sink stage's own thread.
pub trait Sink: Send {
    /// Writes a batch, in order.
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError>;

    /// Makes everything written so far durable (at barriers and the end).
    fn flush(&mut self) -> Result<(), ConnectorError>;

    /// No input is waiting: make buffered output visible to readers, without
    /// promising durability (a slow stream must not sit in a buffer).
    fn idle(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }

    /// Flushes and releases resources; called once when the stage stops.
    fn close(&mut self) -> Result<(), ConnectorError> {
        self.flush()
    }

    /// Where the sink's durable output ends, right after a
    /// [`flush`](Sink::flush) at a barrier: the checkpoint keeps it, and a
    /// restore from that checkpoint rewinds the output to it
    /// ([`resume`](Sink::resume)). `None` for sinks that commit with
    /// checkpoints instead, or whose output cannot be rewound.
    fn position(&self) -> Option<serde_json::Value> {
        None
    }

    /// Called once before the first write: continue from `position`, which
    /// [`position`](Sink::position) returned at the checkpoint the run
    /// resumes from (output written after it is dropped); `None` for a
    /// fresh start.
    fn resume(&mut self, position: Option<&serde_json::Value>) -> Result<(), ConnectorError> {
        let _ = position;
        Ok(())
    }

    /// Whether the sink commits its output only when a checkpoint is
    /// durable (two-phase): then it is told the outcome of every checkpoint
    /// it acknowledged, through [`Sink::checkpoint_done`].
    fn commits_with_checkpoints(&self) -> bool {
        false
    }

    /// Checkpoint `id`, whose barrier the sink acknowledged, is durable
    /// (`complete`) or failed: commit the output before it, or keep it for
    /// the next checkpoint.
    fn checkpoint_done(&mut self, id: u64, complete: bool) -> Result<(), ConnectorError> {
        let _ = (id, complete);
        Ok(())
    }
}

/// A connector's failure, naming the connector and what it worked on.
#[derive(Debug, thiserror::Error)]
pub enum ConnectorError {
    /// A file could not be read or written.
    #[error("{what} `{path}`: {source}")]
    Io {
        /// What was being done ("reading", "writing", ...).
        what: &'static str,
        /// The file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// Input that does not have the promised format.
    #[error("`{path}` line {line}: {message}")]
    BadInput {
        /// The file.
        path: String,
        /// The 1-based line number.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// Kafka failed or refused.
    #[error("Kafka (brokers `{brokers}`, topic `{topic}`): {message}")]
    Kafka {
        /// The bootstrap servers.
        brokers: String,
        /// The topic (or topics).
        topic: String,
        /// What went wrong.
        message: String,
    },
    /// The brokers aborted the sink's open transaction because it stayed
    /// open longer than its timeout (the process was stopped or stalled):
    /// its output is gone, and a restart from the committed checkpoint
    /// writes it again.
    #[error(
        "Kafka (brokers `{brokers}`, topic `{topic}`): the brokers aborted the open transaction: it stayed open {open_for:?}, longer than its timeout ({timeout:?}, `transaction.timeout.ms`); a restart from the committed checkpoint writes its output again"
    )]
    TransactionAborted {
        /// The bootstrap servers.
        brokers: String,
        /// The topic.
        topic: String,
        /// How long the transaction had been open.
        open_for: std::time::Duration,
        /// Its timeout.
        timeout: std::time::Duration,
    },
    /// The sink's transaction could not commit and was aborted (the
    /// client said it must be: a broker or coordinator failed over while
    /// it was open): its output is gone, and a restart from the committed
    /// checkpoint writes it again.
    #[error(
        "Kafka (brokers `{brokers}`, topic `{topic}`): the open transaction could not commit ({reason}) and was aborted; a restart from the committed checkpoint writes its output again"
    )]
    TransactionAbortable {
        /// The bootstrap servers.
        brokers: String,
        /// The topic.
        topic: String,
        /// What the client said.
        reason: String,
    },
    /// PostgreSQL failed or refused.
    #[error("PostgreSQL ({target}, table `{table}`): {message}")]
    Postgres {
        /// The server, database and user (never the password).
        target: String,
        /// The table.
        table: String,
        /// What went wrong.
        message: String,
    },
    /// The connector cannot do what was asked (e.g. resume from a position).
    #[error("{0}")]
    Unsupported(String),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailurePolicy;

    #[test]
    fn fail_names_the_reason_and_the_record_skip_passes() {
        let rec = Record::new(None, "big", 1);
        let fail = FailureHandler::new("sink", FailurePolicy::Fail, None, Default::default());
        let message = refuse(&fail, rec.clone(), "partition 1: too large").unwrap_err();
        assert_eq!(message, r#"partition 1: too large (record value="big")"#);
        let skip = FailureHandler::new("sink", FailurePolicy::Skip, None, Default::default());
        refuse(&skip, rec, "too large").unwrap();
        assert_eq!(skip.stats().skipped.load(std::sync::atomic::Ordering::Relaxed), 1);
    }
}
