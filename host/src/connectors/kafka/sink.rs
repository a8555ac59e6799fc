//! The Kafka sink (at least once): records are produced as they come and
//! flushed at every checkpoint barrier, so a checkpoint completes only once
//! everything before it is acknowledged by the brokers.

use super::config::{KafkaSinkSpec, client_config};
use super::{kafka_error, partitions_of, send_batch};
use crate::batch::Batch;
use crate::connectors::{ConnectorError, Sink};
use rdkafka::ClientContext;
use rdkafka::Message as _;
use rdkafka::producer::{BaseProducer, DeliveryResult, Producer, ProducerContext};
use std::sync::Mutex;
use std::time::Duration;

/// How long a flush may wait for the brokers.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps the first delivery failure until the next flush reports it.
#[derive(Default)]
struct Deliveries {
    failure: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, msg)) = result {
            let mut failure = self.failure.lock().expect("delivery lock");
            failure.get_or_insert_with(|| format!("partition {}: {e}", msg.partition()));
        }
    }
}

/// Writes records to one topic.
pub struct KafkaSink {
    producer: BaseProducer<Deliveries>,
    brokers: String,
    topic: String,
    partition: Option<i32>,
}

impl KafkaSink {
    /// Connects and checks that the topic exists.
    pub fn open(spec: &KafkaSinkSpec) -> Result<Self, ConnectorError> {
        let brokers = spec.bootstrap_servers.value().to_owned();
        let mut config = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options);
        config
            .set("linger.ms", spec.linger.as_millis().to_string())
            .set("enable.idempotence", "true");
        let producer: BaseProducer<Deliveries> = config
            .create_with_context(Deliveries::default())
            .map_err(|e| kafka_error(&brokers, &spec.topic, e))?;
        let partitions = partitions_of(producer.client(), &brokers, &spec.topic)?;
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
        send_batch(&self.producer, &self.topic, self.partition, batch)
            .map_err(|e| self.failed(e.to_string()))?;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.producer
            .flush(FLUSH_TIMEOUT)
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
