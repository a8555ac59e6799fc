//! What a running pipeline measures, and its exposition: Prometheus text
//! at `/metrics` and a JSON snapshot for the dashboard, both served by the
//! admin server.
//!
//! Counting costs the hot path next to nothing: stages, edges and
//! operators count in the atomics they already own, and a scrape reads
//! them. Only the per-call latency histogram adds work per plugin call (a
//! clock read per batch), and `[admin] metrics = false` turns it off.

mod flow;
mod render;
mod snapshot;
mod tasks;

pub use flow::{EdgeStats, StageStats};
pub use snapshot::{EdgeSnapshot, OperatorSnapshot, PluginInfo, Snapshot, StageSnapshot};
pub use tasks::{TaskSnapshot, TaskStats};

use crate::checkpoint::{CheckpointStats, DURATION_BUCKETS, DURATION_HELP, DURATION_NAME};
use crate::connectors::{Progress, SplitLag};
use crate::failure::FailureStats;
use crate::plugin::CallStats;
use prometheus::{HistogramOpts, HistogramVec, Registry};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The measurements of one pipeline, shared by the runtime (which
/// registers what it builds) and the admin server (which reads them).
pub struct Telemetry {
    pipeline: String,
    timed_calls: bool,
    /// The histograms, registered once.
    registry: Registry,
    call_seconds: HistogramVec,
    checkpoint_seconds: HistogramVec,
    run: Mutex<RunGraph>,
    /// The tasks a cluster-mode process runs: each is gone when its
    /// task is dropped.
    tasks: Mutex<Vec<Weak<TaskStats>>>,
    /// What the source reports.
    pub source: SourceGauges,
    /// The sources' and operators' outputs, for `mailer tap`.
    pub taps: crate::tap::Taps,
}

/// What a run is made of, as the runtime registered it.
#[derive(Default, Clone)]
pub struct RunGraph {
    /// Stages in stream order: the source, the operator stages, the sink,
    /// then the side outputs.
    pub stages: Vec<StageEntry>,
    /// The edges between them.
    pub edges: Vec<EdgeEntry>,
    /// Every operator.
    pub operators: Vec<OperatorEntry>,
    /// The checkpoints, when they are on.
    pub checkpoints: Option<Arc<CheckpointStats>>,
}

/// One stage.
#[derive(Clone)]
pub struct StageEntry {
    /// Its counts.
    pub stats: Arc<StageStats>,
    /// Its workers.
    pub workers: usize,
    /// Each worker's counts (the stage's own when it has one worker).
    pub worker_stats: Vec<Arc<StageStats>>,
    /// Its operators' names.
    pub operators: Vec<String>,
}

/// One edge.
#[derive(Clone)]
pub struct EdgeEntry {
    /// The stage it leaves.
    pub from: String,
    /// The stage it enters.
    pub to: String,
    /// Its counts.
    pub stats: Arc<EdgeStats>,
}

/// One operator.
#[derive(Clone)]
pub struct OperatorEntry {
    /// Its name.
    pub name: String,
    /// Its stage.
    pub stage: String,
    /// Records, failures, dead letters.
    pub failures: Arc<FailureStats>,
    /// Its plugin calls.
    pub calls: Arc<CallStats>,
    /// Records too late for its windows (window operators).
    pub late: Option<Arc<AtomicU64>>,
}

/// What the source stage reports as it runs.
pub struct SourceGauges {
    /// The newest watermark sent, ms (`i64::MIN`: none yet).
    pub watermark: AtomicI64,
    lag: Mutex<Vec<SplitLag>>,
    progress: Mutex<Option<Progress>>,
}

impl Default for SourceGauges {
    fn default() -> Self {
        Self {
            watermark: AtomicI64::new(i64::MIN),
            lag: Mutex::default(),
            progress: Mutex::default(),
        }
    }
}

impl SourceGauges {
    /// The source's lag per split now.
    pub fn set_lag(&self, lag: Vec<SplitLag>) {
        *self.lag.lock().expect("lag lock") = lag;
    }

    /// The lag per split last reported.
    pub fn lag(&self) -> Vec<SplitLag> {
        self.lag.lock().expect("lag lock").clone()
    }

    /// The source's progress now.
    pub fn set_progress(&self, progress: Option<Progress>) {
        *self.progress.lock().expect("progress lock") = progress;
    }

    /// The progress last reported.
    pub fn progress(&self) -> Option<Progress> {
        *self.progress.lock().expect("progress lock")
    }

    /// The newest watermark, if any.
    pub fn watermark(&self) -> Option<i64> {
        Some(self.watermark.load(Ordering::Relaxed)).filter(|&w| w != i64::MIN)
    }
}

impl Telemetry {
    /// The measurements of pipeline `pipeline`; plugin calls are timed
    /// when `timed_calls`.
    pub fn new(pipeline: &str, timed_calls: bool) -> Arc<Self> {
        let registry = Registry::new();
        let call_seconds = HistogramVec::new(
            HistogramOpts::new(
                "mailer_operator_call_seconds",
                "Seconds per plugin call (one per batch)",
            )
            .buckets(crate::plugin::LATENCY_BUCKETS.to_vec()),
            &["pipeline", "operator"],
        )
        .expect("valid histogram options");
        let checkpoint_seconds = HistogramVec::new(
            HistogramOpts::new(DURATION_NAME, DURATION_HELP).buckets(DURATION_BUCKETS.to_vec()),
            &["pipeline"],
        )
        .expect("valid histogram options");
        for h in [&call_seconds, &checkpoint_seconds] {
            registry
                .register(Box::new(h.clone()))
                .expect("distinct metric names");
        }
        Arc::new(Self {
            pipeline: pipeline.to_owned(),
            timed_calls,
            registry,
            call_seconds,
            checkpoint_seconds,
            run: Mutex::default(),
            tasks: Mutex::default(),
            source: SourceGauges::default(),
            taps: Default::default(),
        })
    }

    /// The pipeline's name.
    pub fn pipeline(&self) -> &str {
        &self.pipeline
    }

    /// The call counts of operator `operator`, in this registry.
    pub fn call_stats(&self, operator: &str) -> Arc<CallStats> {
        let latency = self.call_seconds.with_label_values(&[&self.pipeline, operator]);
        Arc::new(CallStats::new(self.timed_calls, latency))
    }

    /// Checkpoint counts whose durations go into this registry.
    pub fn checkpoint_stats(&self) -> Arc<CheckpointStats> {
        let durations = self.checkpoint_seconds.with_label_values(&[&self.pipeline]);
        Arc::new(CheckpointStats::with_durations(durations))
    }

    /// A run starts with this graph (replacing the previous run's).
    pub fn started(&self, graph: RunGraph) {
        *self.run.lock().expect("run lock") = graph;
    }

    /// The graph of the current run.
    pub fn graph(&self) -> RunGraph {
        self.run.lock().expect("run lock").clone()
    }

    /// Task `name` runs in this process now: its counts, all zero, shown
    /// as long as the task holds them.
    pub fn task_started(&self, name: String) -> Arc<TaskStats> {
        let stats = Arc::new(TaskStats::new(name));
        let mut tasks = self.tasks.lock().expect("tasks lock");
        tasks.retain(|t| t.strong_count() > 0);
        tasks.push(Arc::downgrade(&stats));
        stats
    }

    /// The tasks running in this process now, by name.
    pub fn tasks(&self) -> Vec<TaskSnapshot> {
        let tasks = self.tasks.lock().expect("tasks lock");
        let mut now: Vec<TaskSnapshot> = tasks
            .iter()
            .filter_map(|t| Some(t.upgrade()?.snapshot()))
            .collect();
        now.sort_by(|a, b| a.name.cmp(&b.name));
        now
    }
}
