//! Why a process of the cluster stops. Every failure ends the process: its
//! open transaction is aborted by the brokers, and the group hands its
//! partitions to the others, which resume from the last commit (recovery
//! never guesses).

use super::member::MemberError;
use super::restore::RestoreError;
use super::standby::StandbyError;
use super::task::TaskError;
use super::topics::TopicError;
use crate::operators::OperatorError;
use rdkafka::error::KafkaError;

/// Why this process left the cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The group could not be joined.
    #[error(transparent)]
    Member(#[from] MemberError),
    /// A cluster topic could not be made or used.
    #[error(transparent)]
    Topic(#[from] TopicError),
    /// A task could not be made.
    #[error("cluster task {task}: {cause}")]
    Task {
        /// `<topic>/<partition>`.
        task: String,
        /// Why.
        cause: Box<TaskError>,
    },
    /// A task's state could not be restored.
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// Standby states could not be kept.
    #[error(transparent)]
    Standby(#[from] StandbyError),
    /// An operator stopped the pipeline.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// A source record cannot be read and `on_error` says `fail`.
    #[error("source: {0}")]
    Record(String),
    /// Kafka failed.
    #[error(transparent)]
    Kafka(Box<KafkaFailure>),
    /// Offsets cannot be committed: the process is not in the group.
    #[error(
        "committing the consumed offsets needs the group's generation, and this process is not in the group: restart it"
    )]
    NoGeneration,
    /// A partition assigned without a committed offset was committed
    /// before: its position is gone (see `committed.rs`).
    #[error(
        "consumer group `{group}` has no committed position for {partitions}, yet the pipeline committed one before (`{topic}` says so): Kafka deletes a group's offsets `offsets.retention.minutes` after its last member left (7 days by default), or they were deleted by hand. Reading again from the start would repeat output, from the end skip input, so nothing runs. Set the group's offsets to where the output stands (`kafka-consumer-groups.sh --group {group} --reset-offsets ... --execute`) and start again; raise `offsets.retention.minutes` on the brokers to keep a stopped pipeline's position longer"
    )]
    PositionLost {
        /// The group.
        group: String,
        /// The partitions without a position, each with the group that
        /// committed it before.
        partitions: String,
        /// The topic naming the partitions committed before.
        topic: String,
    },
    /// The manifest's plan cannot take over the state in the changelogs.
    #[error(
        "the pipeline's state in Kafka was written with another plan ({reason}; `{topic}` records the plan). Run the manifest it was written with, or start the pipeline anew under another `[pipeline] name` and `[cluster] group`"
    )]
    PlanChanged {
        /// What differs.
        reason: String,
        /// The topic recording the plan.
        topic: String,
    },
    /// The process's state folder cannot be made or locked.
    #[error("the state folder `{folder}`: {reason}")]
    StateFolder {
        /// The folder.
        folder: String,
        /// Why.
        reason: String,
    },
    /// The partitions committed before cannot be read.
    #[error("reading `{topic}` on `{brokers}`: {reason}")]
    CommittedUnread {
        /// The topic.
        topic: String,
        /// The brokers.
        brokers: String,
        /// What failed.
        reason: String,
    },
}

impl ClusterError {
    /// What maps Kafka's error at `what` on `brokers` into this one.
    pub fn kafka(brokers: &str, what: String) -> impl FnOnce(KafkaError) -> Self + use<> {
        let brokers = brokers.to_owned();
        move |cause| ClusterError::Kafka(Box::new(KafkaFailure { what, brokers, cause }))
    }
}

/// A Kafka request that failed, and where.
#[derive(Debug, thiserror::Error)]
#[error("{what} on `{brokers}`: {cause}")]
pub struct KafkaFailure {
    /// What was being done.
    pub what: String,
    /// The brokers.
    pub brokers: String,
    /// What the client said.
    pub cause: KafkaError,
}
