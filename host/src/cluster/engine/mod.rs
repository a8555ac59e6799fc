//! One process's share of the cluster's work, run on the member's thread:
//! the source partitions the group gave it (each source part's operators,
//! stateless, shared by all of its partitions), and one keyed task per
//! repartition partition it holds. What a part produces goes to the
//! repartition topic of the part it feeds (the partition of the record's
//! key, tagged with the input it feeds when not the first) or to the sink;
//! every `commit_interval` the process commits its output, its tasks'
//! state changes (to their changelogs), its watermark markers and the
//! offsets it consumed at once (one Kafka transaction with `exactly_once`).

use super::committed::{CommittedPartitions, PlanShape};
use super::error::ClusterError;
use super::kept::KeptStates;
use super::member::{TopicPartition, position_of};
use super::restore::WATERMARK_ENTRY;
use super::standby::{Standbys, WarmStates};
use super::task::{KeyedTask, PartChains, changelog_topics};
use super::topics::{ClusterTopics, INPUT_HEADER, RepartitionPurge, TopicRole, topic_name};
use super::watermarks::{IDLE, MARKER_HEADER, marker, read_marker};
use crate::batch::Batch;
use crate::connectors::kafka::{
    RecordReader, Reported, abort_transaction, raw_record, send_record, send_record_with, send_waiting,
};
use crate::failure::FailureHandler;
use crate::key_group::{of_key, worker_of};
use crate::metrics::TaskStats;
use crate::plan::{Feed, Part, PartInput, Plan};
use crate::record::Record;
use crate::swap::SwapPoint;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::message::{BorrowedMessage, Headers, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

mod markers;
mod moves;
mod start;

const TIMEOUT: Duration = Duration::from_secs(30);

/// The marker id of keyed part `k`'s task `p` (the top bit set: a source
/// task's id never has it).
fn keyed_task_id(k: usize, p: i32) -> u32 {
    (1 << 31) | ((k as u32) << 20) | p as u32
}

/// The marker id of partition `p` of the source topic `topic`-th in name
/// order: the same in every process, for partitions added while the
/// cluster runs too (below 2^20 partitions a topic and 2^11 topics).
fn source_task_id(topic: usize, p: i32) -> u32 {
    ((topic as u32) << 20) | p as u32
}

/// How often every task's mark is written again, risen or not: a keyed
/// task that moved starts with none, and would otherwise never hear from
/// a source partition quiet (or idle) since before the move.
const MARKS_AGAIN: Duration = Duration::from_secs(5);

/// Where a part's output goes: input `input` of keyed part `keyed` (an
/// index into [`Engine::keyed`]).
#[derive(Debug, Clone, Copy)]
struct Route {
    keyed: usize,
    input: usize,
}

/// A source part: what reads one source, run for every partition of its
/// topics this process holds (stateless: one instance for all of them).
struct SourcePart {
    chains: PartChains,
    reader: RecordReader,
    rejects: FailureHandler,
    /// Records read and not yet run.
    pending: Vec<Record>,
    /// Where its output goes; `None`: to the sink.
    route: Option<Route>,
}

/// A source partition's event time.
#[derive(Debug)]
struct SourceTask {
    /// Its id in the markers it writes.
    id: u32,
    /// Its source (and source part).
    source: usize,
    /// The largest event time read from it.
    max_time: Option<i64>,
    /// The watermark it last marked ([`IDLE`] once it marked itself idle).
    marked: Option<i64>,
    /// When it last read a record (or was assigned).
    last_record: Instant,
    /// Its counts, in the metrics.
    stats: Arc<TaskStats>,
}

/// A keyed part: its repartition topic and the tasks this process runs.
struct KeyedPart {
    part: Part,
    topic: String,
    partitions: usize,
    /// How many tasks feed each of its tasks (the parts' feeding it).
    upstream: usize,
    tasks: BTreeMap<i32, KeyedTask>,
    /// Where its output goes; `None`: to the sink.
    route: Option<Route>,
}

/// What an engine is made of.
pub struct EngineParts {
    /// The plan, with its cluster settings.
    pub plan: Plan,
    /// The producer (transactional with `exactly_once`, its first
    /// transaction begun).
    pub producer: BaseProducer<Reported>,
    /// The client settings of the brokers (restores read with them).
    pub client: ClientConfig,
    /// The cluster topics' admin.
    pub topics: ClusterTopics,
    /// Every partition of the sources' topics, in id order.
    pub source_partitions: Vec<TopicPartition>,
    /// Partitions of each repartition topic.
    pub repartition_partitions: usize,
    /// This process's `client.id` in the group.
    pub client_id: String,
}

/// One process's tasks and what they owe the next commit.
pub struct Engine {
    plan: Plan,
    producer: BaseProducer<Reported>,
    client: ClientConfig,
    topics: ClusterTopics,
    /// Changelog topics known to exist.
    ensured: HashSet<String>,
    /// Where tasks leaving cleanly keep their state (RocksDB only).
    kept: Option<KeptStates>,
    exactly_once: bool,
    brokers: String,
    /// Each source's part, in the sources' order.
    source_parts: Vec<SourcePart>,
    /// The source reading each source topic.
    source_of: HashMap<String, usize>,
    /// Each source topic's place in name order (its tasks' marker ids).
    source_topics: HashMap<String, usize>,
    sources: HashMap<TopicPartition, SourceTask>,
    /// When every task's mark was last written again (see [`MARKS_AGAIN`]).
    marks_written: Instant,
    keyed: Vec<KeyedPart>,
    sink_topic: String,
    sink_partition: Option<i32>,
    /// The watermark delay (ms), when the pipeline has event time.
    delay: Option<i64>,
    /// How long a source partition without records may hold keyed tasks'
    /// watermarks back.
    idle_timeout: Option<Duration>,
    /// The standby replicas this process keeps, with `standby_replicas`.
    standby: Option<Standbys>,
    /// The plugins swapped in while this process runs, the newest of
    /// each operator: tasks assigned later run them too.
    swapped: Vec<Arc<SwapPoint>>,
    /// Whether anything was read since the last commit.
    dirty: bool,
    /// The partitions whose position was committed before.
    committed: CommittedPartitions,
    /// Deletes the repartition topics' records below the committed offsets.
    purge: RepartitionPurge,
    /// A failure inside a rebalance callback, for the member's loop.
    failed: Option<ClusterError>,
    /// Whether the group moved on without this process: its work was
    /// dropped, and the member's loop joins the group again.
    rejoin: bool,
    /// Records read from the source and written to the sink.
    pub counts: (u64, u64),
}

impl Engine {
    /// The topics the member subscribes to: the sources' and each keyed
    /// part's repartition topic.
    pub fn subscriptions(&self) -> Vec<String> {
        let mut topics: Vec<String> = self.source_of.keys().cloned().collect();
        topics.sort();
        topics.extend(self.keyed.iter().map(|k| k.topic.clone()));
        topics
    }

    /// Refuses `partitions`, just assigned through `consumer`, when one's
    /// committed position is gone (`committed.rs`).
    pub fn check_positions<C: ConsumerContext>(
        &self,
        consumer: &BaseConsumer<C>,
        partitions: &[TopicPartition],
    ) -> Result<(), ClusterError> {
        self.committed.check(consumer, &self.client, partitions)
    }

    /// Records per poll round.
    pub fn batch_size(&self) -> usize {
        self.plan.batch_size
    }

    /// The failure a rebalance callback met, if any.
    pub fn take_failure(&mut self) -> Option<ClusterError> {
        self.failed.take()
    }

    /// Keeps `failure` for the member's loop (a callback cannot return it).
    pub fn fail(&mut self, failure: ClusterError) {
        self.failed.get_or_insert(failure);
    }

    /// [`Engine::commit`], unless the group moved on without this process
    /// (its commit refused, see [`ClusterError::group_moved_on`]): then
    /// its uncommitted work is dropped and the member is to join again
    /// ([`Engine::take_rejoin`]). Whether it committed.
    pub fn commit_unless_moved_on<C: ConsumerContext>(
        &mut self,
        consumer: &BaseConsumer<C>,
    ) -> Result<bool, ClusterError> {
        match self.commit(consumer) {
            Ok(()) => Ok(true),
            Err(e) if e.group_moved_on() => {
                tracing::warn!(error = %e, "the group moved on without this process (it was away from it too long): what it read since its last commit is dropped, and it joins the group again");
                self.lost()?;
                self.rejoin = true;
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the member is to join the group again (asked once).
    pub fn take_rejoin(&mut self) -> bool {
        std::mem::take(&mut self.rejoin)
    }

    /// Takes in one consumed message: a source record, or a repartition
    /// record or marker for one of the keyed tasks.
    pub fn on_message(&mut self, msg: &BorrowedMessage<'_>) -> Result<(), ClusterError> {
        self.dirty = true;
        if let Some(&i) = self.source_of.get(msg.topic()) {
            let source = &self.source_parts[i];
            let rec = match source.reader.read(msg) {
                Ok(rec) => rec,
                Err((raw, reason)) => {
                    return crate::connectors::refuse(&source.rejects, raw, &reason)
                        .map_err(ClusterError::Record);
                }
            };
            let task = self.source_task((msg.topic().to_owned(), msg.partition()));
            task.max_time = task.max_time.max(Some(rec.timestamp));
            task.last_record = Instant::now();
            if task.marked == Some(IDLE) {
                // Active again: its next marker holds keyed tasks back again.
                task.marked = None;
            }
            task.stats.records.fetch_add(1, Ordering::Relaxed);
            self.counts.0 += 1;
            self.source_parts[i].pending.push(rec);
            return Ok(());
        }
        let Some(k) = self.keyed.iter().position(|k| k.topic == msg.topic()) else {
            return Ok(());
        };
        let (mut is_marker, mut input) = (false, 0);
        for h in msg.headers().iter().flat_map(|h| h.iter()) {
            if h.key == MARKER_HEADER {
                is_marker = true;
            } else if h.key == INPUT_HEADER {
                input = h.value.and_then(|v| v.first()).map_or(0, |n| usize::from(*n));
            }
        }
        if is_marker {
            let mark = read_marker(msg.key().unwrap_or_default(), msg.payload().unwrap_or_default());
            if let Some((upstream, watermark)) = mark {
                self.observe_marker(k, msg.partition(), upstream, watermark)?;
            }
            return Ok(());
        }
        let Some(task) = self.keyed[k].tasks.get_mut(&msg.partition()) else {
            return Ok(());
        };
        let mut rec = raw_record(msg);
        if input != 0 {
            rec.headers.retain(|(name, _)| name != INPUT_HEADER);
        }
        task.pending.push(input, rec);
        Ok(())
    }

    /// The task of source partition `at`, made when it has none.
    fn source_task(&mut self, at: TopicPartition) -> &mut SourceTask {
        let id = source_task_id(self.source_topics[&at.0], at.1);
        let source = self.source_of[&at.0];
        let telemetry = &self.plan.telemetry;
        self.sources
            .entry(at)
            .or_insert_with_key(|(topic, p)| SourceTask {
                id,
                source,
                max_time: None,
                marked: None,
                last_record: Instant::now(),
                stats: telemetry.task_started(format!("{topic}/{p}")),
            })
    }

    /// `partitions` are this process's now: each source partition among
    /// them is a source task (from now on, for its idle timeout).
    fn assigned_sources(&mut self, partitions: &[TopicPartition]) {
        for at in partitions {
            if self.source_of.contains_key(&at.0) {
                self.source_task(at.clone());
            }
        }
    }

    /// Whether a source task was quiet for `idle_timeout` and has not
    /// marked itself idle yet.
    fn idle_due(&self, task: &SourceTask) -> bool {
        self.delay.is_some()
            && task.marked != Some(IDLE)
            && self
                .idle_timeout
                .is_some_and(|timeout| task.last_record.elapsed() >= timeout)
    }

    /// Runs what every task read and has not run yet.
    pub fn flush(&mut self) -> Result<(), ClusterError> {
        for i in 0..self.source_parts.len() {
            let source = &mut self.source_parts[i];
            if !source.pending.is_empty() {
                let batch = Batch::Records(std::mem::take(&mut source.pending));
                let (out, route) = (source.chains.on_records(batch)?, source.route);
                self.route(route, &out)?;
            }
        }
        for k in 0..self.keyed.len() {
            let partitions: Vec<i32> = self.keyed[k].tasks.keys().copied().collect();
            for p in partitions {
                self.run_task(k, p)?;
            }
        }
        Ok(())
    }

    fn run_task(&mut self, k: usize, partition: i32) -> Result<(), ClusterError> {
        let Some(task) = self.keyed[k].tasks.get_mut(&partition) else {
            return Ok(());
        };
        if task.pending.is_empty() {
            return Ok(());
        }
        let mut out = Vec::new();
        for (input, run) in task.pending.take() {
            task.stats.records.fetch_add(run.len() as u64, Ordering::Relaxed);
            out.extend(task.chains.on_input(input, Batch::Records(run))?);
        }
        self.route(self.keyed[k].route, &out)
    }

    /// Sends what a part produced on, as `route` says: to the repartition
    /// topic of the part it feeds, at its key's partition, or to the sink.
    fn route(&mut self, route: Option<Route>, batches: &[Batch]) -> Result<(), ClusterError> {
        let producer = &self.producer;
        // Made only on a failure: a record's send must not allocate.
        let failed = |topic: &str| ClusterError::kafka(&self.brokers, format!("writing to topic `{topic}`"));
        match route {
            Some(Route { keyed, input }) => {
                let next = &self.keyed[keyed];
                let key_groups = self.plan.key_groups;
                let number = [input as u8];
                let tag = (input != 0).then_some((INPUT_HEADER, &number[..]));
                for batch in batches {
                    batch.try_for_each(|rec| {
                        let group = of_key(rec.key_bytes(), key_groups);
                        let p = worker_of(group, key_groups, next.partitions) as i32;
                        send_record_with(producer, (&next.topic, Some(p)), rec, tag)
                            .map_err(|e| failed(&next.topic)(e))
                    })?;
                }
            }
            None => {
                let (topic, partition) = (&self.sink_topic, self.sink_partition);
                for batch in batches {
                    batch.try_for_each(|rec| {
                        send_record(producer, topic, partition, rec).map_err(|e| failed(topic)(e))
                    })?;
                    self.counts.1 += batch.len() as u64;
                }
            }
        }
        self.producer.poll(Duration::ZERO);
        Ok(())
    }

    /// Processing time reached `now` (ms): every keyed task's timers due.
    pub fn on_processing_time(&mut self, now: i64) -> Result<(), ClusterError> {
        for k in 0..self.keyed.len() {
            let partitions: Vec<i32> = self.keyed[k].tasks.keys().copied().collect();
            for p in partitions {
                self.run_task(k, p)?;
                let task = self.keyed[k].tasks.get_mut(&p).expect("listed");
                let fired = task.chains.on_processing_time(now)?;
                if !fired.is_empty() {
                    self.dirty = true;
                }
                self.route(self.keyed[k].route, &fired)?;
            }
        }
        Ok(())
    }

    /// Commits everything since the last commit through `consumer`'s
    /// position: the output, the state changes, the markers and the
    /// offsets, in one transaction with `exactly_once`.
    pub fn commit<C: ConsumerContext>(&mut self, consumer: &BaseConsumer<C>) -> Result<(), ClusterError> {
        self.flush()?;
        // A source task turning idle must say so even when nothing was read,
        // and every mark is written again now and then.
        let again = self.delay.is_some() && self.marks_written.elapsed() >= MARKS_AGAIN;
        self.dirty |= again || self.sources.values().any(|t| self.idle_due(t));
        if !self.dirty {
            self.purge.purge_due(&self.topics);
            return Ok(());
        }
        self.send_markers(again)?;
        if again {
            self.marks_written = Instant::now();
        }
        self.send_changes()?;
        let position = position_of(consumer);
        self.committed.name_new(&self.producer, &position.offsets)?;
        let kafka = |what: &str| ClusterError::kafka(&self.brokers, what.to_owned());
        if self.exactly_once {
            if position.offsets.count() > 0 {
                let Some(metadata) = position.metadata.as_ref() else {
                    return Err(ClusterError::NoGeneration);
                };
                self.producer
                    .send_offsets_to_transaction(&position.offsets, metadata, TIMEOUT)
                    .map_err(kafka("committing the consumed offsets in the transaction"))?;
            }
            self.producer
                .commit_transaction(TIMEOUT)
                .map_err(kafka("committing the transaction"))?;
            self.producer
                .begin_transaction()
                .map_err(kafka("beginning a transaction"))?;
        } else {
            self.producer
                .flush(TIMEOUT)
                .map_err(kafka("flushing the output"))?;
            if let Some(refused) = self.producer.context().last_refusal() {
                return Err(ClusterError::Record(format!(
                    "the output was not delivered{refused}"
                )));
            }
            if position.offsets.count() > 0 {
                consumer
                    .commit(&position.offsets, CommitMode::Sync)
                    .map_err(kafka("committing the consumed offsets"))?;
            }
        }
        self.committed.committed();
        self.purge.committed(&self.topics, &position.offsets);
        self.dirty = false;
        Ok(())
    }

    /// Sends every keyed task's state changes (and its watermark, when it
    /// moved) to its changelogs, at the task's partition.
    fn send_changes(&mut self) -> Result<(), ClusterError> {
        let producer = &self.producer;
        for part in &mut self.keyed {
            for (&p, task) in &mut part.tasks {
                let failed = |topic: &str| {
                    ClusterError::kafka(&self.brokers, format!("writing state changes to `{topic}`"))
                };
                for log in &task.changelogs {
                    let mut sent = Ok(());
                    log.state
                        .lock()
                        .take_changes(&mut |entry, value| {
                            let mut record = BaseRecord::<[u8], [u8]>::to(&log.topic).partition(p).key(entry);
                            if let Some(v) = value {
                                record = record.payload(v);
                            }
                            if sent.is_ok() {
                                sent = send_waiting(producer, record);
                            }
                            Ok(())
                        })
                        .map_err(|e| {
                            ClusterError::Operator(crate::failure::OperatorError::state(&log.topic, e))
                        })?;
                    sent.map_err(failed(&log.topic))?;
                }
                let now = task.watermarks.current();
                if let (Some(first), Some(w)) = (task.changelogs.first(), now)
                    && task.logged_watermark < now
                {
                    let value = w.to_le_bytes();
                    let record = BaseRecord::to(&first.topic)
                        .partition(p)
                        .key(WATERMARK_ENTRY)
                        .payload(&value[..]);
                    send_waiting(producer, record).map_err(failed(&first.topic))?;
                    task.logged_watermark = now;
                }
            }
        }
        Ok(())
    }

    /// The group took every partition without a revoke (this process was
    /// silent too long, and another may own them already): everything
    /// since the last commit is dropped — the transaction aborted, the
    /// tasks and their state gone — so whoever gets the partitions next,
    /// this process included, resumes from the last commit.
    pub fn lost(&mut self) -> Result<(), ClusterError> {
        let kafka = |what: &str| ClusterError::kafka(&self.brokers, what.to_owned());
        if self.exactly_once {
            abort_transaction(&self.producer, TIMEOUT).map_err(kafka("aborting the transaction"))?;
            self.producer
                .begin_transaction()
                .map_err(kafka("beginning a transaction"))?;
        }
        self.committed.aborted();
        self.sources.clear();
        for source in &mut self.source_parts {
            source.pending.clear();
        }
        for part in &mut self.keyed {
            part.tasks.clear();
        }
        self.dirty = false;
        Ok(())
    }

    /// Ends the open transaction (empty after the last commit).
    pub fn close(&mut self) {
        if self.exactly_once
            && let Err(e) = abort_transaction(&self.producer, TIMEOUT)
        {
            tracing::debug!(error = %e, "ending the last, empty transaction");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marker_ids_are_unique_across_topics_partitions_and_keyed_tasks() {
        let mut seen = HashSet::new();
        for topic in 0..4 {
            for p in 0..300 {
                assert!(seen.insert(source_task_id(topic, p)), "source {topic}/{p}");
            }
        }
        for k in 0..3 {
            for p in 0..300 {
                assert!(seen.insert(keyed_task_id(k, p)), "keyed {k}/{p}");
            }
        }
    }
}
