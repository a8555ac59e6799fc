//! Why a process of the cluster stops. Every failure ends the process: its
//! open transaction is aborted by the brokers, and the group hands its
//! partitions to the others, which resume from the last commit (recovery
//! never guesses). One is not a failure: a commit refused because the group
//! moved on without the process ([`ClusterError::group_moved_on`]), after
//! which it drops its uncommitted work and joins again.

use super::member::MemberError;
use super::restore::RestoreError;
use super::standby::StandbyError;
use super::task::TaskError;
use super::topics::TopicError;
use crate::failure::OperatorError;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

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
    /// Offsets cannot be committed: the group dropped the process (its
    /// session timed out, or the group refused its generation) before it
    /// heard its partitions are lost.
    #[error(
        "committing the consumed offsets needs the group's generation and member id, and the group dropped this process (it was away longer than `session_timeout`)"
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
    /// Whether this is a commit the group refused because it moved on
    /// without this process (a rebalance it took too long to join ended
    /// without it: its generation or member id is stale). Nothing of the
    /// process's open work is committed then, and the partitions it held
    /// are another member's or will be again; the cure is to drop the
    /// uncommitted work and join again, as Kafka Streams does on a
    /// `TaskMigratedException`, not to stop.
    pub fn group_moved_on(&self) -> bool {
        let failure = match self {
            ClusterError::NoGeneration => return true,
            ClusterError::Kafka(failure) => failure,
            _ => return false,
        };
        matches!(
            failure.cause.rdkafka_error_code(),
            Some(
                RDKafkaErrorCode::IllegalGeneration
                    | RDKafkaErrorCode::UnknownMemberId
                    | RDKafkaErrorCode::RebalanceInProgress
            )
        )
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(code: RDKafkaErrorCode) -> ClusterError {
        ClusterError::kafka("b:9092", "committing".into())(KafkaError::ConsumerCommit(code))
    }

    #[test]
    fn only_a_group_that_moved_on_or_dropped_the_process_is_a_reason_to_join_again() {
        for code in [
            RDKafkaErrorCode::IllegalGeneration,
            RDKafkaErrorCode::UnknownMemberId,
            RDKafkaErrorCode::RebalanceInProgress,
        ] {
            assert!(failed(code).group_moved_on(), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::FencedInstanceId,
            RDKafkaErrorCode::InvalidProducerEpoch,
            RDKafkaErrorCode::OperationTimedOut,
        ] {
            assert!(!failed(code).group_moved_on(), "{code:?}");
        }
        assert!(ClusterError::NoGeneration.group_moved_on());
    }
}
