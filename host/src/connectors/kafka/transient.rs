//! The faults a Kafka client rides out by itself — a broker restarting, a
//! leader moving, a coordinator failing over — told apart from those that
//! need a person (a topic missing, credentials refused, a fatal error).

use rdkafka::ClientContext;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use std::time::{Duration, Instant};

/// When a fault a client rides out was last logged: librdkafka reports
/// one on every poll while it lasts, so it is logged once per
/// [`FaultLog::EVERY`] at most.
#[derive(Debug, Default)]
pub struct FaultLog {
    last: Option<Instant>,
}

impl FaultLog {
    /// How often a lasting fault is logged, at most.
    pub const EVERY: Duration = Duration::from_secs(10);

    /// Whether a fault seen now is to be logged (then none for
    /// [`FaultLog::EVERY`]).
    pub fn due(&mut self) -> bool {
        let due = self.last.is_none_or(|at| at.elapsed() >= Self::EVERY);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }
}

/// The context of a reader that asks to hear of a partition's end
/// (`enable.partition.eof`, which its poll returns): librdkafka reports
/// each end to the error callback too, which rdkafka's default context
/// would log as an error. Real errors are logged as that one does.
#[derive(Debug, Default, Clone, Copy)]
pub struct EndReader;

impl ClientContext for EndReader {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::PartitionEOF) {
            tracing::error!(target: "librdkafka", "librdkafka: {error}: {reason}");
        }
    }
}

impl ConsumerContext for EndReader {}

/// Whether `e` says only that the partition's leader is not known (yet).
pub fn leader_unknown(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownLeaderEpoch
                | RDKafkaErrorCode::FencedLeaderEpoch
                | RDKafkaErrorCode::BrokerNotAvailable
        )
    )
}

/// Whether a producer's flush ended only because records are still being
/// retried through an outage (each fails by itself once its
/// `delivery_timeout` passes): waiting longer is the cure.
pub fn still_sending(e: &KafkaError) -> bool {
    matches!(e, KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
}

/// Whether a consumer's poll reporting `e` goes on by itself: librdkafka
/// reconnects, finds the new leader or coordinator and fetches again, so
/// the error is news to log, not a reason to stop.
pub fn consumer_recovers(e: &KafkaError) -> bool {
    let (KafkaError::MessageConsumption(code) | KafkaError::Global(code)) = e else {
        return false;
    };
    matches!(
        code,
        RDKafkaErrorCode::BrokerTransportFailure
            | RDKafkaErrorCode::AllBrokersDown
            | RDKafkaErrorCode::OperationTimedOut
            | RDKafkaErrorCode::RequestTimedOut
            | RDKafkaErrorCode::NetworkException
            | RDKafkaErrorCode::NotLeaderForPartition
            | RDKafkaErrorCode::LeaderNotAvailable
            | RDKafkaErrorCode::ReplicaNotAvailable
            | RDKafkaErrorCode::PreferredLeaderNotAvailable
            | RDKafkaErrorCode::FencedLeaderEpoch
            | RDKafkaErrorCode::UnknownLeaderEpoch
            | RDKafkaErrorCode::KafkaStorageError
            | RDKafkaErrorCode::NotCoordinator
            | RDKafkaErrorCode::CoordinatorNotAvailable
            | RDKafkaErrorCode::CoordinatorLoadInProgress
            | RDKafkaErrorCode::OffsetNotAvailable
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lasting_fault_is_logged_once_per_interval() {
        let mut log = FaultLog::default();
        assert!(log.due());
        assert!(!log.due());
        log.last = Some(Instant::now() - FaultLog::EVERY);
        assert!(log.due());
    }

    #[test]
    fn only_a_missing_leader_is_asked_again() {
        for code in [
            RDKafkaErrorCode::NotLeaderForPartition,
            RDKafkaErrorCode::LeaderNotAvailable,
            RDKafkaErrorCode::UnknownTopicOrPartition,
        ] {
            assert!(leader_unknown(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::TopicAuthorizationFailed,
            RDKafkaErrorCode::SaslAuthenticationFailed,
        ] {
            assert!(!leader_unknown(&KafkaError::MetadataFetch(code)), "{code:?}");
        }
    }

    #[test]
    fn a_consumer_rides_out_a_broker_going_but_not_a_refusal() {
        for code in [
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::NotCoordinator,
        ] {
            assert!(
                consumer_recovers(&KafkaError::MessageConsumption(code)),
                "{code:?}"
            );
        }
        for e in [
            KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition),
            KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed),
            KafkaError::MessageConsumptionFatal(RDKafkaErrorCode::BrokerTransportFailure),
        ] {
            assert!(!consumer_recovers(&e), "{e:?}");
        }
    }
}
