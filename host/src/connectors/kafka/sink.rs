//! The Kafka sink (at least once): records are produced as they come and
//! flushed at every checkpoint barrier, so a checkpoint completes only once
//! everything before it is acknowledged by the brokers.

use super::config::{KafkaSinkSpec, producer_config};
use super::refusals::{is_record_refusal, raw_record};
use super::{Reported, kafka_error, partitions_of, producer_error, send_batch};
use crate::batch::Batch;
use crate::connectors::refuse;
use crate::connectors::{ConnectorError, Sink};
use crate::failure::FailureHandler;
use rdkafka::ClientContext;
use rdkafka::Message as _;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use std::sync::Mutex;
use std::time::Duration;

/// How much longer than the delivery timeout a flush waits: by then every
/// record was delivered or reported failed.
const FLUSH_MARGIN: Duration = Duration::from_secs(10);

/// Applies the policy to records the brokers refuse, and keeps the first
/// failure that stops the pipeline until the next flush reports it.
struct Deliveries {
    rejects: FailureHandler,
    failure: Mutex<Option<String>>,
    reported: Reported,
}

impl AsRef<Reported> for Deliveries {
    fn as_ref(&self) -> &Reported {
        &self.reported
    }
}

impl ClientContext for Deliveries {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        self.reported.error(error, reason);
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        let Err((e, msg)) = result else { return };
        let reason = format!("partition {}: {e}", msg.partition());
        let stop = if is_record_refusal(e) {
            refuse(&self.rejects, raw_record(msg), &reason).err()
        } else {
            Some(reason)
        };
        if let Some(stop) = stop {
            self.failure.lock().expect("delivery lock").get_or_insert(stop);
        }
    }
}

/// Writes records to one topic.
pub struct KafkaSink {
    producer: BaseProducer<Deliveries>,
    brokers: String,
    topic: String,
    partition: Option<i32>,
    /// How long a record is retried through outages (`delivery_timeout`).
    delivery_timeout: Duration,
}

impl KafkaSink {
    /// Connects and checks that the topic exists; records the brokers refuse
    /// go to `rejects`.
    pub fn open(spec: &KafkaSinkSpec, rejects: FailureHandler) -> Result<Self, ConnectorError> {
        let brokers = spec.bootstrap_servers.value().to_owned();
        let mut config = producer_config(spec);
        config.set("enable.idempotence", "true");
        let deliveries = Deliveries {
            rejects,
            failure: Mutex::default(),
            reported: Reported::default(),
        };
        let producer: BaseProducer<Deliveries> = config
            .create_with_context(deliveries)
            .map_err(|e| kafka_error(&brokers, &spec.topic, e))?;
        let partitions = partitions_of(
            producer.client(),
            || producer_error(&producer),
            &brokers,
            &spec.topic,
        )?;
        if let Some(p) = spec.partition
            && !partitions.contains(&p)
        {
            return Err(ConnectorError::Kafka {
                brokers,
                topic: spec.topic.clone(),
                message: format!("it has no partition {p} (it has {})", partitions.len()),
            });
        }
        Ok(Self {
            producer,
            brokers,
            topic: spec.topic.clone(),
            partition: spec.partition,
            delivery_timeout: spec.delivery_timeout,
        })
    }

    fn failed(&self, message: String) -> ConnectorError {
        ConnectorError::Kafka {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            message,
        }
    }
}

impl Sink for KafkaSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let rejects = &self.producer.context().rejects;
        send_batch(
            &self.producer,
            &self.topic,
            self.partition,
            batch,
            rejects,
            Default::default(),
        )
        .map_err(|e| self.failed(e))?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        // Records are retried through an outage until `delivery_timeout`:
        // the flush waits as long, and a record that failed says why.
        self.producer
            .flush(self.delivery_timeout + FLUSH_MARGIN)
            .map_err(|e| self.failed(format!("flushing: {e}")))?;
        let failure = self
            .producer
            .context()
            .failure
            .lock()
            .expect("delivery lock")
            .take();
        match failure {
            Some(f) => Err(self.failed(f)),
            None => Ok(()),
        }
    }
}

impl Drop for KafkaSink {
    fn drop(&mut self) {
        let _ = self.producer.flush(Duration::from_secs(5));
    }
}
