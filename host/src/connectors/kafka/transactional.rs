//! The exactly-once Kafka sink: the output between two checkpoints is one
//! Kafka transaction, committed only once the checkpoint after it is
//! durable. With the output, each transaction writes a record to the
//! compacted commit topic (`commit_topic`, one partition) saying which
//! checkpoint's output it commits, so Kafka itself records it, in a topic
//! that never expires (a group's committed offsets would, after
//! `offsets.retention.minutes`): a restart resumes from exactly that
//! checkpoint (see [`committed_checkpoint`]), never from a later one whose
//! output was lost with a crash, and never commits an interval twice. The
//! transactional id is stable per pipeline and sink, so a new instance
//! fences any older one still running, before it reads the record.

use super::config::{KafkaSinkSpec, client_config, producer_config, set_transactional, transaction_timeout};
use super::topic_admin::{TopicAdmin, TopicLimits};
use super::transient::{EndReader, FaultLog, still_sending};
use super::watermarks::{LONGEST_OPEN_TRANSACTION, decided_end};
use super::{Reported, kafka_error, partitions_of, producer_error, send_batch};
use crate::batch::Batch;
use crate::connectors::{ConnectorError, Sink};
use crate::failure::FailureHandler;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

/// The transactional id of the pipeline's sink to `topic`.
fn transactional_id(pipeline: &str, topic: &str) -> String {
    format!("mailer.{pipeline}.{topic}")
}

/// The key of the pipeline's sink to `topic` in the commit topic.
fn commit_key(pipeline: &str, topic: &str) -> String {
    format!("{pipeline}\u{0}{topic}")
}

/// A commit record's value.
#[derive(serde::Serialize, serde::Deserialize)]
struct CommitRecord {
    pipeline: String,
    topic: String,
    checkpoint: u64,
}

/// The pipeline's transactional producer, fencing any older instance (its
/// open transaction is aborted).
fn fenced_producer(spec: &KafkaSinkSpec, pipeline: &str) -> Result<BaseProducer<Reported>, ConnectorError> {
    let brokers = spec.bootstrap_servers.value();
    let err = |e: KafkaError| kafka_error(brokers, &spec.topic, e);
    let mut config = producer_config(spec);
    set_transactional(
        &mut config,
        spec,
        &transactional_id(pipeline, &spec.topic),
        TRANSACTION_TIMEOUT,
    );
    let producer: BaseProducer<Reported> = config.create_with_context(Reported::default()).map_err(err)?;
    partitions_of(
        producer.client(),
        || producer_error(&producer),
        brokers,
        &spec.topic,
    )?;
    producer.init_transactions(TIMEOUT).map_err(err)?;
    Ok(producer)
}

/// How long a transaction may stay open (`transaction.timeout.ms`, unless
/// the sink's `options` set it): the checkpoint interval must be well
/// under it.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(900);

/// The id of the newest checkpoint whose output the sink committed, as the
/// commit topic records it: `Some(0)` when the sink started but committed
/// nothing yet, `None` when it has no record (it never ran, or the record
/// was deleted). Any older instance is fenced first, so none can commit
/// after this answer.
pub fn committed_checkpoint(spec: &KafkaSinkSpec, pipeline: &str) -> Result<Option<u64>, ConnectorError> {
    drop(fenced_producer(spec, pipeline)?);
    read_commit_record(spec, pipeline)
}

/// The checkpoint in the newest commit record of the pipeline's sink.
fn read_commit_record(spec: &KafkaSinkSpec, pipeline: &str) -> Result<Option<u64>, ConnectorError> {
    let brokers = spec.bootstrap_servers.value();
    let topic = &spec.commit_topic;
    let err = |e: String| kafka_error(brokers, topic, format!("reading the commit topic: {e}"));
    let connection = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options);
    let mut config = connection.clone();
    config
        .set("group.id", format!("mailer-commit-reader.{pipeline}"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed");
    let consumer: BaseConsumer<EndReader> = config
        .create_with_context(EndReader)
        .map_err(|e| err(e.to_string()))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(|e| err(e.to_string()))?;
    if !metadata
        .topics()
        .iter()
        .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty())
    {
        return Ok(None);
    }
    // Another pipeline's transaction left open in the shared topic would
    // stop a `read_committed` reader short of this sink's newer records
    // (this sink's own transaction was fenced, so it is decided).
    decided_end(&connection, topic, 0, LONGEST_OPEN_TRANSACTION).map_err(err)?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| err(e.to_string()))?;
    consumer.assign(&list).map_err(|e| err(e.to_string()))?;
    let key = commit_key(pipeline, &spec.topic);
    let mut committed = None;
    let started = Instant::now();
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(msg)) if msg.key() == Some(key.as_bytes()) => {
                committed = match msg.payload() {
                    None | Some([]) => None,
                    Some(value) => {
                        let record: CommitRecord = serde_json::from_slice(value)
                            .map_err(|e| err(format!("offset {}: not a commit record: {e}", msg.offset())))?;
                        Some(record.checkpoint)
                    }
                };
            }
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(committed),
            Some(Err(e)) => return Err(err(e.to_string())),
            None if started.elapsed() > TIMEOUT => {
                return Err(err(format!("its end was not reached within {TIMEOUT:?}")));
            }
            None => {}
        }
    }
}

/// Writes each checkpoint interval's records in one Kafka transaction.
pub struct TransactionalKafkaSink {
    producer: BaseProducer<Reported>,
    brokers: String,
    topic: String,
    partition: Option<i32>,
    /// Where each transaction records its checkpoint, and under which key.
    commit_topic: String,
    commit_key: String,
    pipeline: String,
    /// What the brokers take on the topic.
    limits: TopicLimits,
    /// Records produced in the open transaction.
    pending: u64,
    /// When the open transaction began, and how long the brokers let one
    /// stay open.
    opened: Instant,
    timeout: Duration,
    /// Where records the topic's limits refuse go (a record the brokers
    /// still refuse after sending aborts the transaction: the pipeline stops
    /// and replays from its committed checkpoint).
    rejects: FailureHandler,
}

impl TransactionalKafkaSink {
    /// Connects as the pipeline's transactional producer (fencing any older
    /// instance and aborting what it left open), records "nothing committed
    /// yet" in the commit topic when the sink has no record there, and
    /// opens a transaction.
    pub fn open(
        spec: &KafkaSinkSpec,
        pipeline: &str,
        rejects: FailureHandler,
    ) -> Result<Self, ConnectorError> {
        let brokers = spec.bootstrap_servers.value().to_owned();
        let admin = TopicAdmin::new(spec)?;
        let limits = admin.topic_limits()?;
        admin.ensure_commit_topic(&spec.commit_topic)?;
        let mut spec = spec.clone();
        if let Some(max) = limits.max_message_bytes {
            // The producer then refuses a record the topic cannot take
            // before it enters a transaction, and keeps its batches within
            // the topic's limit (librdkafka's floor is 1000).
            spec.options
                .entry("message.max.bytes".to_owned())
                .or_insert_with(|| crate::config_string::ConfigString::new(max.max(1000).to_string()));
        }
        let producer = fenced_producer(&spec, pipeline)?;
        let mut sink = Self {
            producer,
            brokers,
            topic: spec.topic.clone(),
            partition: spec.partition,
            commit_topic: spec.commit_topic.clone(),
            commit_key: commit_key(pipeline, &spec.topic),
            pipeline: pipeline.to_owned(),
            limits,
            pending: 0,
            opened: Instant::now(),
            timeout: transaction_timeout(&spec, TRANSACTION_TIMEOUT),
            rejects,
        };
        sink.begin()?;
        if read_commit_record(&spec, pipeline)?.is_none() {
            // Commits the empty transaction and opens the next.
            sink.commit(0)?;
        }
        Ok(sink)
    }

    fn begin(&mut self) -> Result<(), ConnectorError> {
        self.opened = Instant::now();
        self.producer
            .begin_transaction()
            .map_err(|e| self.failed(e.to_string()))
    }

    /// The error for a failure, saying so when the transaction failed for
    /// staying open past its timeout: the brokers abort it then and bump
    /// the producer's epoch, which fences it as a newer instance would, and
    /// records waiting as long time out. Any other fatal error, or a fence
    /// of a transaction younger than the timeout (a newer instance took
    /// over), is what it says.
    fn failed(&self, message: String) -> ConnectorError {
        let fenced_or_passing = matches!(
            self.producer.client().fatal_error(),
            None | Some((
                RDKafkaErrorCode::Fenced
                    | RDKafkaErrorCode::ProducerFenced
                    | RDKafkaErrorCode::InvalidProducerEpoch,
                _
            ))
        );
        let open_for = self.opened.elapsed();
        if fenced_or_passing && open_for >= self.timeout {
            return ConnectorError::TransactionAborted {
                brokers: self.brokers.clone(),
                topic: self.topic.clone(),
                open_for,
                timeout: self.timeout,
            };
        }
        ConnectorError::Kafka {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            message,
        }
    }

    /// Commits the open transaction with a commit record for checkpoint
    /// `id`, and opens the next.
    fn commit(&mut self, id: u64) -> Result<(), ConnectorError> {
        let value = serde_json::to_vec(&CommitRecord {
            pipeline: self.pipeline.clone(),
            topic: self.topic.clone(),
            checkpoint: id,
        })
        .expect("serialises");
        let record = BaseRecord::to(&self.commit_topic)
            .partition(0)
            .key(&self.commit_key)
            .payload(&value);
        self.producer
            .send(record)
            .map_err(|(e, _)| self.failed(format!("recording checkpoint {id} in the transaction: {e}")))?;
        // A coordinator failing over makes the commit time out or fail
        // retriably: it is asked again (librdkafka resumes the same
        // commit) while the transaction may live.
        let mut faults = FaultLog::default();
        loop {
            match self.producer.commit_transaction(TIMEOUT) {
                Ok(()) => break,
                Err(KafkaError::Transaction(e))
                    if e.is_retriable() && self.opened.elapsed() < self.timeout =>
                {
                    if faults.due() {
                        tracing::warn!(brokers = %self.brokers, topic = %self.topic, checkpoint = id, error = %e, "committing the transaction: the brokers did not answer yet; asking again");
                    }
                }
                // The commit flushes first: records still retried through
                // an outage (until `delivery_timeout`) are waited for.
                Err(e) if still_sending(&e) && self.opened.elapsed() < self.timeout => {
                    if faults.due() {
                        tracing::warn!(brokers = %self.brokers, topic = %self.topic, checkpoint = id, "committing the transaction: the brokers did not take every record yet; waiting (each is retried until `delivery_timeout`)");
                    }
                }
                Err(KafkaError::Transaction(e)) if e.txn_requires_abort() => {
                    return Err(self.aborted(e.to_string()));
                }
                Err(e) => {
                    let refused = self.producer.context().last_refusal().unwrap_or_default();
                    return Err(self.failed(format!(
                        "committing the output of checkpoint {id}: {e}{refused}; the transaction is aborted, and a restart writes this output again from the committed checkpoint"
                    )));
                }
            }
        }
        self.pending = 0;
        self.begin()
    }

    /// Aborts the open transaction, which cannot commit (`reason`): the
    /// error a restart from the committed checkpoint cures.
    fn aborted(&mut self, reason: String) -> ConnectorError {
        if let Err(e) = super::abort_transaction(&self.producer, TIMEOUT) {
            return self.failed(format!("{reason}; aborting the transaction then: {e}"));
        }
        ConnectorError::TransactionAbortable {
            brokers: self.brokers.clone(),
            topic: self.topic.clone(),
            reason,
        }
    }
}

impl Sink for TransactionalKafkaSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let sent = send_batch(
            &self.producer,
            &self.topic,
            self.partition,
            batch,
            &self.rejects,
            self.limits,
        )
        .map_err(|e| self.failed(e))?;
        self.pending += sent;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        let mut faults = FaultLog::default();
        loop {
            match self.producer.flush(TIMEOUT) {
                Ok(()) => return Ok(()),
                Err(e) if still_sending(&e) && self.opened.elapsed() < self.timeout => {
                    if faults.due() {
                        tracing::warn!(brokers = %self.brokers, topic = %self.topic, "flushing: the brokers did not take every record yet; waiting (each is retried until `delivery_timeout`)");
                    }
                }
                Err(e) => return Err(self.failed(format!("flushing: {e}"))),
            }
        }
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        // What no checkpoint covers is replayed from the last one: drop it.
        super::abort_transaction(&self.producer, TIMEOUT)
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
