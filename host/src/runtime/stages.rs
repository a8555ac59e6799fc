//! The loops of the three simple stage kinds: source, operator chain, sink.

use super::{EdgeReceiver, EdgeSender};
use crate::connectors::{ConnectorError, Poll, Sink, Source};
use crate::operator::{Chain, OperatorError};
use crate::plan::WatermarkSettings;
use crate::record::Message;
use crate::runtime::Shutdown;
use crate::time::WatermarkGenerator;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    let handle = std::thread::Builder::new().name(name.clone()).spawn(f)?;
    Ok((name, handle))
}

/// Counts of one stage, shared with metrics and the run report.
#[derive(Debug, Default)]
pub struct StageStats {
    /// The stage's name.
    pub name: String,
    /// Records that entered the stage.
    pub records_in: AtomicU64,
    /// Records that left the stage.
    pub records_out: AtomicU64,
}

impl StageStats {
    /// Fresh counters for the stage `name`.
    pub fn new(name: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            name: name.into(),
            ..Self::default()
        })
    }

    fn count_in(&self, msg: &Message) {
        if let Message::Records(r) = msg {
            self.records_in.fetch_add(r.len() as u64, Ordering::Relaxed);
        }
    }

    fn count_out(&self, msg: &Message) {
        if let Message::Records(r) = msg {
            self.records_out.fetch_add(r.len() as u64, Ordering::Relaxed);
        }
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

/// The wall clock, ms since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Pulls batches from the source until it ends (then sends `EndOfStream`) or
/// the run is cancelled (then just closes: a drain). With watermarks on, a
/// watermark follows every batch that advanced it.
pub fn run_source(
    mut source: Box<dyn Source>,
    out: EdgeSender,
    batch_size: usize,
    time: SourceTime,
    shutdown: Shutdown,
    stats: Arc<StageStats>,
) -> Result<(), StageError> {
    let mut generator = time
        .watermarks
        .map(|w| WatermarkGenerator::new(1, w.delay, w.idle_timeout));
    let mut last_tick = Instant::now();
    while !shutdown.is_cancelled() {
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
                if let (Some(g), Some(ts)) = (generator.as_mut(), batch.max_timestamp()) {
                    g.observe(0, ts);
                }
                Some(Message::Records(batch))
            }
            Poll::Idle => None,
            Poll::End => Some(Message::EndOfStream),
        };
        let end = msg == Some(Message::EndOfStream);
        if let Some(msg) = msg {
            stats.count_out(&msg);
            if out.send(msg).is_err() {
                break;
            }
        }
        if end {
            break;
        }
        if let Some(wm) = generator.as_mut().and_then(WatermarkGenerator::advance)
            && out.send(Message::Watermark(wm)).is_err()
        {
            break;
        }
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
        stats.count_in(&msg);
        for m in chain.on_message(msg)? {
            stats.count_out(&m);
            if out.send(m).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Writes every batch of `input` to the sink; flushes at barriers and at the
/// end.
pub fn run_sink(
    mut sink: Box<dyn Sink>,
    input: EdgeReceiver,
    stats: Arc<StageStats>,
) -> Result<(), StageError> {
    while let Some(msg) = input.recv() {
        stats.count_in(&msg);
        match msg {
            Message::Records(batch) => {
                sink.write(&batch).map_err(StageError::Sink)?;
                stats.records_out.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if input.is_empty() {
                    sink.idle().map_err(StageError::Sink)?;
                }
            }
            Message::Barrier(_) | Message::EndOfStream => sink.flush().map_err(StageError::Sink)?,
            Message::Watermark(_) | Message::ProcessingTime(_) => {}
        }
    }
    sink.close().map_err(StageError::Sink)
}
