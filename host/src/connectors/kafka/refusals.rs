//! Records that cannot pass for reasons of their own: a source record its
//! format cannot read, a sink record the brokers refuse (too large,
//! invalid). The connector's `on_error` policy decides their fate; outages
//! and timeouts are not a record's fault and are never skipped.

use crate::record::Record;
use bytes::Bytes;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message};

/// Whether the brokers (or the producer, before sending) refused a record
/// for what it is, so that sending it again cannot succeed.
pub(super) fn is_record_refusal(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::MessageBatchTooLarge
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::InvalidTimestamp
        )
    )
}

/// A Kafka message as it is: key, value, timestamp (now when it has none)
/// and headers.
pub fn raw_record(msg: &impl Message) -> Record {
    let key = msg.key().map(Bytes::copy_from_slice);
    let timestamp = msg.timestamp().to_millis().unwrap_or_else(crate::clock::now_ms);
    let mut rec = Record::new(
        key,
        Bytes::copy_from_slice(msg.payload().unwrap_or_default()),
        timestamp,
    );
    if let Some(headers) = msg.headers() {
        for h in headers.iter() {
            rec.headers.push((
                h.key.to_owned(),
                Bytes::copy_from_slice(h.value.unwrap_or_default()),
            ));
        }
    }
    rec
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_records_own_faults_are_refusals() {
        for code in [
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::InvalidRecord,
        ] {
            assert!(is_record_refusal(&KafkaError::MessageProduction(code)));
        }
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::BrokerTransportFailure,
            RDKafkaErrorCode::NotLeaderForPartition,
        ] {
            assert!(!is_record_refusal(&KafkaError::MessageProduction(code)));
        }
    }
}
