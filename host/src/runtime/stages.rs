//! The loops of the three simple stage kinds: source, operator chain, sink.

use super::{Barrier, Message};
use super::{EdgeReceiver, EdgeSender};
use crate::batch::Batch;
use crate::checkpoint::SavepointRequest;
use crate::checkpoint::{CheckpointEvent, CheckpointStats, CheckpointStore};
use crate::clock::now_ms;
use crate::connectors::{ConnectorError, Poll, Sink, Source};
use crate::metrics::{StageStats, Telemetry};
use crate::operator::{Chain, OperatorError, SideOutput};
use crate::plan::WatermarkSettings;
use crate::runtime::Shutdown;
use crate::time::WatermarkGenerator;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Why a stage stopped the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// An operator failed.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// The source failed.
    #[error("source: {0}")]
    Source(ConnectorError),
    /// The sink failed.
    #[error("sink: {0}")]
    Sink(ConnectorError),
    /// Checkpoints failed more often than tolerated.
    #[error("checkpoints: {0}")]
    Checkpoint(crate::checkpoint::CoordinatorError),
    /// A stage thread panicked (a bug in mailer, never a plugin's doing).
    #[error("stage `{0}` panicked")]
    Panicked(String),
}

/// A running stage thread and its name.
pub type StageHandle = (String, JoinHandle<Result<(), StageError>>);

/// Starts a stage on its own named thread.
pub fn spawn_stage(
    name: String,
    f: impl FnOnce() -> Result<(), StageError> + Send + 'static,
) -> std::io::Result<StageHandle> {
    // The thread's events carry the run's fields (the pipeline).
    let run = tracing::Span::current();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || run.in_scope(f))?;
    Ok((name, handle))
}

/// How the source starts checkpoints.
pub struct SourceCheckpoints {
    /// Where they go.
    pub store: CheckpointStore,
    /// Time between barriers.
    pub interval: Duration,
    /// The id of the next checkpoint.
    pub next_id: u64,
    /// Where to announce them.
    pub events: flume::Sender<CheckpointEvent>,
    /// Whether one is in flight.
    pub stats: Arc<CheckpointStats>,
    /// The source's side outputs (dead letters), told of each barrier.
    pub side_outputs: Vec<SideOutput>,
}

impl SourceCheckpoints {
    /// Announces checkpoint `next_id` at `source`'s position (a savepoint
    /// too, when `savepoint` asks) and returns its barrier; `None` when its
    /// folder cannot be made (logged; the next interval tries again).
    fn barrier(
        &mut self,
        source: &dyn Source,
        savepoint: Option<SavepointRequest>,
        swaps: &mut Vec<(String, String)>,
    ) -> Option<Message> {
        let id = self.next_id;
        self.next_id += 1;
        if let Err(e) = self.store.begin(id) {
            tracing::warn!(checkpoint = id, error = %e, "cannot start a checkpoint");
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.stats.in_flight.store(true, Ordering::Release);
        let position = source.position();
        let _ = self.events.send(CheckpointEvent::Started {
            id,
            position,
            savepoint,
            swaps: std::mem::take(swaps),
        });
        for side in &self.side_outputs {
            side.barrier(id);
        }
        Some(Message::Barrier(Barrier { id }))
    }
}

/// What the source stage adds to the stream besides records.
#[derive(Debug, Clone, Copy, Default)]
pub struct SourceTime {
    /// Watermark generation, if configured.
    pub watermarks: Option<WatermarkSettings>,
    /// How often to send the processing time, if an operator needs it.
    pub ticks: Option<Duration>,
}

/// Where the source stage reports what it did.
pub struct SourceReport {
    /// Records out.
    pub stats: Arc<StageStats>,
    /// Watermark, lag and progress.
    pub telemetry: Arc<Telemetry>,
}

/// How often the source's lag and progress are read.
const REPORT_EVERY: Duration = Duration::from_millis(500);

/// Pulls batches from the source until it ends (then sends `EndOfStream`) or
/// the run is cancelled (then just closes: a drain). With watermarks on, a
/// watermark follows every batch that advanced it. With checkpoints on, a
/// barrier follows the batch after each interval (once the previous
/// checkpoint ended), and a last one the end of the input or a graceful
/// stop (C3).
pub fn run_source(
    mut source: Box<dyn Source>,
    out: EdgeSender,
    batch_size: usize,
    time: SourceTime,
    mut checkpoints: Option<SourceCheckpoints>,
    shutdown: Shutdown,
    report: SourceReport,
) -> Result<(), StageError> {
    let SourceReport { stats, telemetry } = report;
    let gauges = &telemetry.source;
    let mut last_report: Option<Instant> = None;
    let mut generator = time
        .watermarks
        .map(|w| WatermarkGenerator::new(source.splits(), w.delay, w.idle_timeout));
    let mut last_tick = Instant::now();
    let mut last_barrier = Instant::now();
    let mut connected = true;
    // Swaps sent since the last barrier: the next checkpoint records them.
    let mut swaps = Vec::new();
    while !shutdown.is_cancelled() {
        if last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            last_report = Some(Instant::now());
            gauges.set_lag(source.lag());
            gauges.set_progress(source.progress());
        }
        if let Some(c) = checkpoints.as_mut() {
            let savepoint = shutdown.take_savepoint_request();
            let due = last_barrier.elapsed() >= c.interval && !c.stats.in_flight.load(Ordering::Acquire);
            if savepoint.is_some() || due {
                last_barrier = Instant::now();
                if let Some(barrier) = c.barrier(source.as_ref(), savepoint, &mut swaps)
                    && out.send(barrier).is_err()
                {
                    connected = false;
                    break;
                }
            }
        }
        for swap in shutdown.take_swaps() {
            tracing::info!(operator = %swap.operator, digest = %swap.plugin.digest(), "swap point sent");
            swaps.push((swap.operator.clone(), swap.plugin.digest().to_owned()));
            if out.send(Message::Swap(swap)).is_err() {
                connected = false;
                break;
            }
        }
        if let Some(every) = time.ticks
            && last_tick.elapsed() >= every
        {
            last_tick = Instant::now();
            if out.send(Message::ProcessingTime(now_ms())).is_err() {
                break;
            }
        }
        let msg = match source.poll(batch_size).map_err(StageError::Source)? {
            Poll::Records(batch) => {
                if let Some(g) = generator.as_mut() {
                    match source.split_times() {
                        Some(times) => times.iter().for_each(|&(split, ts)| g.observe(split, ts)),
                        None => {
                            if let Some(ts) = batch.max_timestamp() {
                                g.observe(0, ts);
                            }
                        }
                    }
                }
                Some(Message::Records(batch))
            }
            Poll::Idle => None,
            Poll::End => Some(Message::EndOfStream),
        };
        let end = msg == Some(Message::EndOfStream);
        if let Some(msg) = msg {
            stats.count_out(record_count(&msg));
            if out.send(msg).is_err() {
                connected = false;
                break;
            }
        }
        if end {
            break;
        }
        if let Some(wm) = generator.as_mut().and_then(WatermarkGenerator::advance) {
            gauges.watermark.store(wm, Ordering::Relaxed);
            if out.send(Message::Watermark(wm)).is_err() {
                connected = false;
                break;
            }
        }
    }
    gauges.set_progress(source.progress());
    if connected
        && !shutdown.is_aborted()
        && let Some(barrier) = checkpoints
            .as_mut()
            .and_then(|c| c.barrier(source.as_ref(), None, &mut swaps))
    {
        let _ = out.send(barrier);
    }
    source.close().map_err(StageError::Source)
}

/// Runs every message of `input` through `chain` until `input` closes.
pub fn run_chain(
    mut chain: Chain,
    input: EdgeReceiver,
    out: EdgeSender,
    stats: Arc<StageStats>,
) -> Result<(), StageError> {
    while let Some(msg) = input.recv() {
        stats.count_in(record_count(&msg));
        let (produced, marker) = step(&mut chain, msg)?;
        let produced = (!produced.is_empty()).then_some(Message::Records(produced));
        for m in produced.into_iter().chain(marker) {
            stats.count_out(record_count(&m));
            if out.send(m).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// How the sink takes part in checkpoints.
pub struct SinkCheckpoints {
    /// Which sink it is (`sink`, `dead-letter`, `late-output`).
    pub name: &'static str,
    /// Where it acknowledges barriers.
    pub events: flume::Sender<CheckpointEvent>,
    /// The checkpoints, told which one's output the sink committed.
    pub store: CheckpointStore,
    /// How each checkpoint ended, for a sink that commits with them.
    pub outcomes: Option<flume::Receiver<(u64, bool)>>,
    /// The sink's side outputs (dead letters), told of each barrier.
    pub side_outputs: Vec<SideOutput>,
    /// The run's control (a failing run stops the wait for an outcome).
    pub shutdown: Shutdown,
}

impl SinkCheckpoints {
    /// Acknowledges barrier `id` with the sink's position, after its
    /// [`flush`](Sink::flush); a sink that commits with checkpoints then
    /// waits for the checkpoint's outcome and commits.
    pub(super) fn acknowledge(&self, sink: &mut dyn Sink, id: u64) -> Result<(), StageError> {
        let _ = self.events.send(CheckpointEvent::SinkAcked {
            id,
            sink: self.name,
            position: sink.position(),
        });
        for side in &self.side_outputs {
            side.barrier(id);
        }
        if let Some(complete) = self.outcome(id) {
            #[cfg(debug_assertions)]
            if complete {
                super::test_hooks::before_commit(id);
            }
            sink.checkpoint_done(id, complete).map_err(StageError::Sink)?;
            if complete {
                self.store.set_committed(id);
            }
        }
        Ok(())
    }

    /// Waits for the outcome of checkpoint `id`; `None` when the run stops
    /// first.
    fn outcome(&self, id: u64) -> Option<bool> {
        let outcomes = self.outcomes.as_ref()?;
        loop {
            match outcomes.recv_timeout(Duration::from_millis(50)) {
                Ok((done, ok)) if done == id => return Some(ok),
                Ok(_) => {}
                Err(flume::RecvTimeoutError::Timeout) if !self.shutdown.is_aborted() => {}
                Err(_) => return None,
            }
        }
    }
}

/// Writes every batch of `input` to the sink; flushes at barriers (and
/// acknowledges them to `checkpoints`; a sink that commits with checkpoints
/// then waits for the outcome) and at the end.
pub fn run_sink(
    mut sink: Box<dyn Sink>,
    input: EdgeReceiver,
    stats: Arc<StageStats>,
    checkpoints: Option<SinkCheckpoints>,
) -> Result<(), StageError> {
    while let Some(msg) = input.recv() {
        stats.count_in(record_count(&msg));
        match msg {
            Message::Records(batch) => {
                sink.write(&batch).map_err(StageError::Sink)?;
                stats.records_out.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if input.is_empty() {
                    sink.idle().map_err(StageError::Sink)?;
                }
            }
            Message::Barrier(b) => {
                sink.flush().map_err(StageError::Sink)?;
                if let Some(c) = &checkpoints {
                    c.acknowledge(sink.as_mut(), b.id)?;
                }
            }
            Message::EndOfStream => sink.flush().map_err(StageError::Sink)?,
            Message::Watermark(_) | Message::ProcessingTime(_) | Message::Swap(_) => {}
        }
    }
    sink.close().map_err(StageError::Sink)
}

/// Runs one message through `chain`: what leaves it is the records it
/// produced, then the marker itself (if the message was one).
fn step(chain: &mut Chain, msg: Message) -> Result<(Batch, Option<Message>), OperatorError> {
    let marker = match msg {
        Message::Records(batch) => return Ok((chain.on_records(batch)?, None)),
        marker => marker,
    };
    let produced = match &marker {
        Message::Records(_) => unreachable!("returned above"),
        Message::Watermark(wm) => chain.on_watermark(*wm)?,
        Message::ProcessingTime(now) => chain.on_processing_time(*now)?,
        Message::EndOfStream => chain.on_end()?,
        Message::Barrier(b) => {
            chain.on_barrier(b.id);
            Batch::Records(Vec::new())
        }
        Message::Swap(swap) => {
            let swapped = chain.on_swap(&swap.operator, &swap.plugin)?;
            swap.applied.fetch_add(swapped, Ordering::Relaxed);
            Batch::Records(Vec::new())
        }
    };
    Ok((produced, Some(marker)))
}

/// The records a message carries (0 for markers), for the stage counts.
fn record_count(msg: &Message) -> usize {
    match msg {
        Message::Records(r) => r.len(),
        _ => 0,
    }
}
