//! The source stage: batches pulled from the source, with the markers the
//! source adds to the stream — watermarks, processing-time ticks, swap
//! points and checkpoint barriers — in their place between the batches.

use super::stage::StageError;
use super::watermark::WatermarkGenerator;
use super::{Barrier, Closed, Control, Message, Outlet, Shutdown};
use crate::checkpoint::{CheckpointEvent, CheckpointStats, CheckpointStore, PluginSwap, SavepointRequest};
use crate::clock::now_ms;
use crate::connectors::{Poll, Progress, Source};
use crate::failure::SideOutput;
use crate::metrics::{StageStats, Telemetry};
use crate::plan::WatermarkSettings;
use crate::tap::TapPoint;
use std::collections::BTreeMap;
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
    /// Announces checkpoint `next_id` at the sources' `positions` (a
    /// savepoint too, when `savepoint` asks) and returns its barrier; `None`
    /// when its folder cannot be made (logged; the next interval tries again).
    pub(super) fn barrier(
        &mut self,
        positions: BTreeMap<String, serde_json::Value>,
        savepoint: Option<SavepointRequest>,
        swaps: &mut Vec<PluginSwap>,
    ) -> Option<Message> {
        let id = self.next_id;
        self.next_id += 1;
        if let Err(e) = self.store.begin(id) {
            tracing::warn!(checkpoint = id, error = %e, "cannot start a checkpoint");
            self.stats.failed.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        self.stats.in_flight.store(true, Ordering::Release);
        let _ = self.events.send(CheckpointEvent::Started {
            id,
            positions,
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

/// One source of the source stage, with the stream it feeds.
pub struct SourceSlot {
    /// Its name (keys its position in checkpoints).
    pub name: String,
    /// The source.
    pub source: Box<dyn Source>,
    /// Where its records go.
    pub out: Outlet,
    /// Its records out.
    pub stats: Arc<StageStats>,
    /// Whether it feeds a global table: it is read first, alone, until it
    /// has nothing more for now (or ended).
    pub loads_table: bool,
}

/// How often the sources' lag and progress are read.
const REPORT_EVERY: Duration = Duration::from_millis(500);

/// Why the source loop ended.
#[derive(Debug, PartialEq, Eq)]
enum Stop {
    /// The run was cancelled (a drain).
    Cancelled,
    /// Every input ended (`EndOfStream` sent).
    Ended,
    /// A next stage is gone: the run is failing.
    Disconnected,
}

/// Polls every source in turn, one batch each, until all of them ended
/// (then sends `EndOfStream` into every stream) or the run is cancelled
/// (then just closes: a drain).
///
/// Every marker goes into every stream at one point of the loop, so each
/// stream sees the markers in one order, and a checkpoint's positions are
/// read at one instant: its barrier follows exactly the records before them
/// in every stream. With watermarks on, a watermark follows every batch
/// that advanced its source's; a source that ended before the others then
/// sends the highest watermark, so it holds back no window, and takes part
/// in barriers (at its final position) until all ended. With checkpoints
/// on, a barrier follows the batches after each interval (once the previous
/// checkpoint ended), and a last one the end of the inputs or a graceful
/// stop (C3).
pub fn run_sources(
    slots: Vec<SourceSlot>,
    batch_size: usize,
    time: SourceTime,
    checkpoints: Option<SourceCheckpoints>,
    (shutdown, control): (Shutdown, Control),
    telemetry: Arc<Telemetry>,
) -> Result<(), StageError> {
    let slots = slots
        .into_iter()
        .map(|slot| Running {
            generator: time
                .watermarks
                .map(|w| WatermarkGenerator::new(slot.source.splits(), w.delay, w.idle_timeout)),
            watermark: i64::MIN,
            ended: false,
            loading: slot.loads_table,
            tap: telemetry.taps.point(&slot.name),
            slot,
        })
        .collect();
    let mut stage = SourceLoop {
        slots,
        batch_size,
        ticks: time.ticks,
        checkpoints,
        shutdown,
        control,
        telemetry,
        last_report: None,
        last_tick: Instant::now(),
        last_barrier: Instant::now(),
        swaps: Vec::new(),
    };
    let stop = stage.run()?;
    stage.finish(stop)
}

/// A source and where it is.
struct Running {
    slot: SourceSlot,
    generator: Option<WatermarkGenerator>,
    /// The newest watermark sent.
    watermark: i64,
    /// Whether its input ended.
    ended: bool,
    /// Whether it is still loading a global table (read alone).
    loading: bool,
    /// What it reads, for `mailer tap`.
    tap: Arc<TapPoint>,
}

/// The source stage's state between batches.
struct SourceLoop {
    slots: Vec<Running>,
    batch_size: usize,
    ticks: Option<Duration>,
    checkpoints: Option<SourceCheckpoints>,
    shutdown: Shutdown,
    control: Control,
    telemetry: Arc<Telemetry>,
    last_report: Option<Instant>,
    last_tick: Instant,
    last_barrier: Instant,
    /// Swaps sent since the last barrier: the next checkpoint records them.
    swaps: Vec<PluginSwap>,
}

impl SourceLoop {
    fn run(&mut self) -> Result<Stop, StageError> {
        while !self.shutdown.is_cancelled() {
            self.report_progress(false);
            if self.send_markers().is_err() {
                return Ok(Stop::Disconnected);
            }
            let loading = self.slots.iter().any(|s| s.loading);
            for i in 0..self.slots.len() {
                let s = &self.slots[i];
                if !s.ended && (s.loading || !loading) && self.poll_once(i)?.is_err() {
                    return Ok(Stop::Disconnected);
                }
            }
            if loading && self.slots.iter().all(|s| !s.loading) {
                tracing::info!("the global tables are loaded: the other sources start");
                if self.send_to_all(Message::TablesLoaded).is_err() {
                    return Ok(Stop::Disconnected);
                }
            }
            if self.slots.iter().all(|s| s.ended) {
                return Ok(match self.send_to_all(Message::EndOfStream) {
                    Ok(()) => Stop::Ended,
                    Err(Closed) => Stop::Disconnected,
                });
            }
        }
        Ok(Stop::Cancelled)
    }

    /// Reads the sources' lag and progress into the gauges, every
    /// [`REPORT_EVERY`] (now, when `now`).
    fn report_progress(&mut self, now: bool) {
        if now || self.last_report.is_none_or(|t| t.elapsed() >= REPORT_EVERY) {
            self.last_report = Some(Instant::now());
            let gauges = &self.telemetry.source;
            gauges.set_lag(self.slots.iter().flat_map(|s| s.slot.source.lag()).collect());
            gauges.set_progress(combined(self.slots.iter().map(|s| s.slot.source.progress())));
        }
    }

    /// Sends what is due before the next batches: a barrier (interval or
    /// savepoint), the swap points and state queries asked for, a
    /// processing-time tick.
    fn send_markers(&mut self) -> Result<(), Closed> {
        if let Some(c) = self.checkpoints.as_ref() {
            let savepoint = self.control.take_savepoint_request();
            let due = self.last_barrier.elapsed() >= c.interval && !c.stats.in_flight.load(Ordering::Acquire);
            if savepoint.is_some() || due {
                self.last_barrier = Instant::now();
                self.send_barrier(savepoint)?;
            }
        }
        for swap in self.control.take_swaps() {
            tracing::info!(operator = %swap.operator, digest = %swap.plugin.digest(), "swap point sent");
            // A shadow or a canary is a trial, not the operator's version:
            // the checkpoint keeps naming the current one.
            if !swap.kind.is_trial() {
                self.swaps.push(PluginSwap {
                    operator: swap.operator.clone(),
                    digest: swap.plugin.digest().to_owned(),
                    file: swap.plugin.path().to_owned(),
                });
            }
            self.send_to_all(Message::Swap(swap))?;
        }
        for query in self.control.take_queries() {
            self.send_to_all(Message::Query(query))?;
        }
        if let Some(every) = self.ticks
            && self.last_tick.elapsed() >= every
        {
            self.last_tick = Instant::now();
            self.send_to_all(Message::ProcessingTime(now_ms()))?;
        }
        Ok(())
    }

    /// Starts a checkpoint at the sources' positions now and sends its
    /// barrier into every stream.
    fn send_barrier(&mut self, savepoint: Option<SavepointRequest>) -> Result<(), Closed> {
        let positions = self
            .slots
            .iter()
            .map(|s| (s.slot.name.clone(), s.slot.source.position()))
            .collect();
        let Some(c) = self.checkpoints.as_mut() else {
            return Ok(());
        };
        match c.barrier(positions, savepoint, &mut self.swaps) {
            Some(barrier) => self.send_to_all(barrier),
            None => Ok(()),
        }
    }

    fn send_to_all(&self, msg: Message) -> Result<(), Closed> {
        for s in &self.slots {
            s.slot.out.send(msg.clone())?;
        }
        Ok(())
    }

    /// Polls source `i` once and sends what it gave, then its watermark if
    /// it advanced.
    fn poll_once(&mut self, i: usize) -> Result<Result<(), Closed>, StageError> {
        let several = self.slots.len() > 1;
        let s = &mut self.slots[i];
        let watermark = match s.slot.source.poll(self.batch_size).map_err(StageError::Source)? {
            Poll::Records(batch) => {
                if let Some(g) = s.generator.as_mut() {
                    match s.slot.source.split_times() {
                        Some(times) => times.iter().for_each(|&(split, ts)| g.observe(split, ts)),
                        None => batch.max_timestamp().into_iter().for_each(|ts| g.observe(0, ts)),
                    }
                }
                s.slot.stats.count_out(batch.len());
                s.tap.offer(&batch);
                if s.slot.out.send(Message::Records(batch)).is_err() {
                    return Ok(Err(Closed));
                }
                s.generator.as_mut().and_then(WatermarkGenerator::advance)
            }
            Poll::Idle => s.generator.as_mut().and_then(WatermarkGenerator::advance),
            Poll::End => {
                s.ended = true;
                (several && s.generator.is_some()).then_some(i64::MAX)
            }
        };
        s.loading &= !s.ended && !s.slot.source.caught_up();
        if let Some(wm) = watermark {
            s.watermark = wm;
            if s.slot.out.send(Message::Watermark(wm)).is_err() {
                return Ok(Err(Closed));
            }
            self.report_watermark();
        }
        Ok(Ok(()))
    }

    /// The watermark gauge: the lowest of the sources'.
    fn report_watermark(&self) {
        let lowest = self.slots.iter().map(|s| s.watermark).min().unwrap_or(i64::MIN);
        self.telemetry.source.watermark.store(lowest, Ordering::Relaxed);
    }

    /// After the loop: the last progress, the last barrier (unless the run
    /// is failing), and the sources closed.
    fn finish(mut self, stop: Stop) -> Result<(), StageError> {
        self.control.close_queries();
        self.report_progress(true);
        if stop != Stop::Disconnected && !self.shutdown.is_aborted() {
            let _ = self.send_barrier(None);
        }
        for s in &mut self.slots {
            s.slot.source.close().map_err(StageError::Source)?;
        }
        Ok(())
    }
}

/// The progress of several sources as one: records summed, totals where
/// every source knows its own.
fn combined(progress: impl Iterator<Item = Option<Progress>>) -> Option<Progress> {
    let all: Vec<Progress> = progress.collect::<Option<_>>()?;
    let sum = |f: fn(&Progress) -> Option<u64>| all.iter().map(f).sum::<Option<u64>>();
    Some(Progress {
        records: all.iter().map(|p| p.records).sum(),
        records_total: sum(|p| p.records_total),
        bytes: sum(|p| p.bytes),
        bytes_total: sum(|p| p.bytes_total),
    })
}
