//! The exactly-once Kafka sink: the output between two checkpoints is one
//! Kafka transaction, committed only once the checkpoint after it is
//! durable. With the output, the transaction commits the checkpoint's id as
//! an offset of the pipeline's commit group (`send_offsets_to_transaction`),
//! so Kafka itself records which checkpoint's output is committed: a
//! restart resumes from that checkpoint (see [`committed_checkpoint`]),
//! never from a later one whose output was lost with a crash, and never
//! commits an interval twice. The transactional id is stable per pipeline
//! and sink, so a new instance fences any older one still running.

use super::config::{KafkaSinkSpec, client_config, producer_config};
use super::{Reported, consumer_error, kafka_error, partitions_of, producer_error, send_batch};
use crate::batch::Batch;
use crate::connectors::{ConnectorError, Sink};
use crate::operator::FailureHandler;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The group whose committed offset records the last committed checkpoint.
fn commit_group(pipeline: &str, topic: &str) -> String {
    format!("mailer-commits.{pipeline}.{topic}")
}

/// The transactional id of the pipeline's sink to `topic`.
fn transactional_id(pipeline: &str, topic: &str) -> String {
    format!("mailer.{pipeline}.{topic}")
}

/// The id of the newest checkpoint whose output the sink committed, as
/// Kafka recorded it; `None` when it never committed one.
pub fn committed_checkpoint(spec: &KafkaSinkSpec, pipeline: &str) -> Result<Option<u64>, ConnectorError> {
    let brokers = spec.bootstrap_servers.value();
    let mut config = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options);
    config.set("group.id", commit_group(pipeline, &spec.topic));
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| kafka_error(brokers, &spec.topic, e))?;
    partitions_of(
        consumer.client(),
        || consumer_error(&consumer),
        brokers,
        &spec.topic,
    )?;
    let mut list = TopicPartitionList::new();
    list.add_partition(&spec.topic, 0);
    let committed = consumer.committed_offsets(list, TIMEOUT).map_err(|e| {
        kafka_error(
            brokers,
            &spec.topic,
            format!("reading the committed checkpoint: {e}"),
        )
    })?;
    Ok(committed
        .find_partition(&spec.topic, 0)
        .and_then(|e| match e.offset() {
            Offset::Offset(o) if o > 0 => Some(o as u64),
            _ => None,
        }))
}

/// Writes each checkpoint interval's records in one Kafka transaction.
pub struct TransactionalKafkaSink {
    producer: BaseProducer<Reported>,
    group: BaseConsumer,
    brokers: String,
    topic: String,
    partition: Option<i32>,
    /// Records produced in the open transaction.
    pending: u64,
    /// Where records the producer refuses go (a record the brokers refuse
    /// after sending aborts the transaction: the pipeline stops and replays
    /// from its checkpoint).
    rejects: FailureHandler,
}

impl TransactionalKafkaSink {
    /// Connects as the pipeline's transactional producer (fencing any older
    /// instance and aborting what it left open) and opens a transaction.
    pub fn open(
        spec: &KafkaSinkSpec,
        pipeline: &str,
        rejects: FailureHandler,
    ) -> Result<Self, ConnectorError> {
        let brokers = spec.bootstrap_servers.value().to_owned();
        let err = |e: KafkaError| kafka_error(&brokers, &spec.topic, e);
        let mut config = producer_config(spec);
        config
            .set("transactional.id", transactional_id(pipeline, &spec.topic))
            .set("transaction.timeout.ms", "900000");
        let producer: BaseProducer<Reported> =
            config.create_with_context(Reported::default()).map_err(err)?;
        partitions_of(
            producer.client(),
            || producer_error(&producer),
            &brokers,
            &spec.topic,
        )?;
        producer.init_transactions(TIMEOUT).map_err(err)?;
        producer.begin_transaction().map_err(err)?;
        let mut group_config = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options);
        group_config.set("group.id", commit_group(pipeline, &spec.topic));
        let group: BaseConsumer = group_config.create().map_err(err)?;
        Ok(Self {
            producer,
            group,
            brokers,
            topic: spec.topic.clone(),
            partition: spec.partition,
            pending: 0,
            rejects,
        })
    }

    fn failed(&self, message: String) -> ConnectorError {
        ConnectorError::Kafka {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            message,
        }
    }

    /// Commits the open transaction with checkpoint `id` as its marker, and
    /// opens the next.
    fn commit(&mut self, id: u64) -> Result<(), ConnectorError> {
        let mut marker = TopicPartitionList::new();
        marker
            .add_partition_offset(&self.topic, 0, Offset::Offset(id as i64))
            .map_err(|e| self.failed(e.to_string()))?;
        let metadata = self
            .group
            .group_metadata()
            .ok_or_else(|| self.failed("no consumer group metadata for the commit marker".into()))?;
        self.producer
            .send_offsets_to_transaction(&marker, &metadata, TIMEOUT)
            .map_err(|e| self.failed(format!("recording checkpoint {id} in the transaction: {e}")))?;
        self.producer
            .commit_transaction(TIMEOUT)
            .map_err(|e| self.failed(format!("committing the output of checkpoint {id}: {e}")))?;
        self.pending = 0;
        self.producer
            .begin_transaction()
            .map_err(|e| self.failed(e.to_string()))
    }
}

impl Sink for TransactionalKafkaSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let sent = send_batch(&self.producer, &self.topic, self.partition, batch, &self.rejects)
            .map_err(|e| self.failed(e))?;
        self.pending += sent;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.producer
            .flush(TIMEOUT)
            .map_err(|e| self.failed(format!("flushing: {e}")))
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        // What no checkpoint covers is replayed from the last one: drop it.
        self.producer
            .abort_transaction(TIMEOUT)
            .map_err(|e| self.failed(format!("aborting the open transaction: {e}")))
    }

    fn commits_with_checkpoints(&self) -> bool {
        true
    }

    fn checkpoint_done(&mut self, id: u64, complete: bool) -> Result<(), ConnectorError> {
        if complete {
            self.commit(id)
        } else {
            // The next checkpoint covers this interval too.
            Ok(())
        }
    }
}
