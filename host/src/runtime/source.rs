//! The source stage: batches pulled from the source, with the markers the
//! source adds to the stream — watermarks, processing-time ticks, swap
//! points and checkpoint barriers — in their place between the batches.

use super::stage::{StageError, record_count};
use super::{Barrier, Closed, EdgeSender, Message, Shutdown};
use crate::checkpoint::{CheckpointEvent, CheckpointStats, CheckpointStore, SavepointRequest};
use crate::clock::now_ms;
use crate::connectors::{Poll, Source};
use crate::metrics::{StageStats, Telemetry};
use crate::operator::SideOutput;
use crate::plan::WatermarkSettings;
use crate::time::WatermarkGenerator;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
    pub(super) fn barrier(
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

/// Why the source loop ended.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The run was cancelled (a drain).
    Cancelled,
    /// The input ended (`EndOfStream` sent).
    Ended,
    /// The next stage is gone: the run is failing.
    Disconnected,
}

/// Pulls batches from the source until it ends (then sends `EndOfStream`) or
/// the run is cancelled (then just closes: a drain). With watermarks on, a
/// watermark follows every batch that advanced it. With checkpoints on, a
/// barrier follows the batch after each interval (once the previous
/// checkpoint ended), and a last one the end of the input or a graceful
/// stop (C3).
pub fn run_source(
    source: Box<dyn Source>,
    out: EdgeSender,
    batch_size: usize,
    time: SourceTime,
    checkpoints: Option<SourceCheckpoints>,
    shutdown: Shutdown,
    report: SourceReport,
) -> Result<(), StageError> {
    let generator = time
        .watermarks
        .map(|w| WatermarkGenerator::new(source.splits(), w.delay, w.idle_timeout));
    let mut stage = SourceLoop {
        source,
        out,
        batch_size,
        ticks: time.ticks,
        generator,
        checkpoints,
        shutdown,
        report,
        last_report: None,
        last_tick: Instant::now(),
        last_barrier: Instant::now(),
        swaps: Vec::new(),
    };
    let stop = stage.run()?;
    stage.finish(stop)
}

/// The source stage's state between batches.
struct SourceLoop {
    source: Box<dyn Source>,
    out: EdgeSender,
    batch_size: usize,
    ticks: Option<Duration>,
    generator: Option<WatermarkGenerator>,
    checkpoints: Option<SourceCheckpoints>,
    shutdown: Shutdown,
    report: SourceReport,
    last_report: Option<Instant>,
    last_tick: Instant,
    last_barrier: Instant,
    /// Swaps sent since the last barrier: the next checkpoint records them.
    swaps: Vec<(String, String)>,
}

impl SourceLoop {
    fn run(&mut self) -> Result<Stop, StageError> {
        while !self.shutdown.is_cancelled() {
            self.report_progress();
            if self.send_markers().is_err() {
                return Ok(Stop::Disconnected);
            }
            if let Some(stop) = self.poll_once()? {
                return Ok(stop);
            }
        }
        Ok(Stop::Cancelled)
    }

    /// Reads the source's lag and progress into the gauges, every
    /// [`REPORT_EVERY`].
    fn report_progress(&mut self) {
        if self.last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            self.last_report = Some(Instant::now());
            let gauges = &self.report.telemetry.source;
            gauges.set_lag(self.source.lag());
            gauges.set_progress(self.source.progress());
        }
    }

    /// Sends what is due before the next batch: a barrier (interval or
    /// savepoint), the swap points asked for, a processing-time tick.
    fn send_markers(&mut self) -> Result<(), Closed> {
        if let Some(c) = self.checkpoints.as_mut() {
            let savepoint = self.shutdown.take_savepoint_request();
            let due = self.last_barrier.elapsed() >= c.interval && !c.stats.in_flight.load(Ordering::Acquire);
            if savepoint.is_some() || due {
                self.last_barrier = Instant::now();
                if let Some(barrier) = c.barrier(self.source.as_ref(), savepoint, &mut self.swaps) {
                    self.out.send(barrier)?;
                }
            }
        }
        for swap in self.shutdown.take_swaps() {
            tracing::info!(operator = %swap.operator, digest = %swap.plugin.digest(), "swap point sent");
            self.swaps
                .push((swap.operator.clone(), swap.plugin.digest().to_owned()));
            self.out.send(Message::Swap(swap))?;
        }
        if let Some(every) = self.ticks
            && self.last_tick.elapsed() >= every
        {
            self.last_tick = Instant::now();
            self.out.send(Message::ProcessingTime(now_ms()))?;
        }
        Ok(())
    }

    /// Polls the source once and sends what it gave, then the watermark if
    /// it advanced; why the loop stops, if it does.
    fn poll_once(&mut self) -> Result<Option<Stop>, StageError> {
        let msg = match self.source.poll(self.batch_size).map_err(StageError::Source)? {
            Poll::Records(batch) => {
                if let Some(g) = self.generator.as_mut() {
                    match self.source.split_times() {
                        Some(times) => times.iter().for_each(|&(split, ts)| g.observe(split, ts)),
                        None => batch.max_timestamp().into_iter().for_each(|ts| g.observe(0, ts)),
                    }
                }
                Some(Message::Records(batch))
            }
            Poll::Idle => None,
            Poll::End => Some(Message::EndOfStream),
        };
        if let Some(msg) = msg {
            let end = msg == Message::EndOfStream;
            self.report.stats.count_out(record_count(&msg));
            if self.out.send(msg).is_err() {
                return Ok(Some(Stop::Disconnected));
            }
            if end {
                return Ok(Some(Stop::Ended));
            }
        }
        Ok(self.send_watermark().err().map(|Closed| Stop::Disconnected))
    }

    /// Sends the watermark when the generator moved it.
    fn send_watermark(&mut self) -> Result<(), Closed> {
        if let Some(wm) = self.generator.as_mut().and_then(WatermarkGenerator::advance) {
            self.report
                .telemetry
                .source
                .watermark
                .store(wm, Ordering::Relaxed);
            self.out.send(Message::Watermark(wm))?;
        }
        Ok(())
    }

    /// After the loop: the last progress, the last barrier (unless the run
    /// is failing), and the source closed.
    fn finish(mut self, stop: Stop) -> Result<(), StageError> {
        self.report.telemetry.source.set_progress(self.source.progress());
        if stop != Stop::Disconnected
            && !self.shutdown.is_aborted()
            && let Some(barrier) = self
                .checkpoints
                .as_mut()
                .and_then(|c| c.barrier(self.source.as_ref(), None, &mut self.swaps))
        {
            let _ = self.out.send(barrier);
        }
        self.source.close().map_err(StageError::Source)
    }
}
