//! The dashboard's view of a [`Telemetry`]: the graph with its counts now,
//! as JSON. The dashboard polls it and derives rates from two snapshots.

use super::{TaskSnapshot, Telemetry};
use crate::checkpoint::CheckpointRecord;
use crate::connectors::{Progress, SplitLag};
use serde::Serialize;
use std::sync::atomic::Ordering;

/// A plugin as it runs now.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PluginInfo {
    /// The operator running it.
    pub operator: String,
    /// The name it declares, or its file's.
    pub name: String,
    /// The version it declares.
    pub version: Option<String>,
    /// SHA-256 of the component, hex.
    pub digest: String,
    /// Its world.
    pub world: String,
    /// The canary running on some of its key groups, if any, as `GET
    /// /api/operators` shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<serde_json::Value>,
}

/// Everything the dashboard shows, at one instant.
#[derive(Debug, Clone, Serialize)]
pub struct Snapshot {
    /// The pipeline.
    pub pipeline: String,
    /// When it was taken, ms since 1970.
    pub at_ms: i64,
    /// Stages in stream order.
    pub stages: Vec<StageSnapshot>,
    /// Edges between them.
    pub edges: Vec<EdgeSnapshot>,
    /// Every operator.
    pub operators: Vec<OperatorSnapshot>,
    /// The recent checkpoints, oldest first.
    pub checkpoints: Vec<CheckpointRecord>,
    /// The source's lag per split.
    pub lag: Vec<SplitLag>,
    /// The newest watermark, ms.
    pub watermark_ms: Option<i64>,
    /// A bounded source's progress.
    pub progress: Option<Progress>,
    /// The plugins running now.
    pub plugins: Vec<PluginInfo>,
    /// The tasks of a cluster-mode process (none in one process).
    pub tasks: Vec<TaskSnapshot>,
}

/// One stage.
#[derive(Debug, Clone, Serialize)]
pub struct StageSnapshot {
    /// Its name.
    pub name: String,
    /// Its workers.
    pub workers: usize,
    /// Its operators.
    pub operators: Vec<String>,
    /// Records in so far.
    pub records_in: u64,
    /// Records out so far.
    pub records_out: u64,
}

/// One edge.
#[derive(Debug, Clone, Serialize)]
pub struct EdgeSnapshot {
    /// The stage it leaves.
    pub from: String,
    /// The stage it enters.
    pub to: String,
    /// Messages waiting.
    pub queued: u64,
    /// Records waiting (in those messages).
    pub queued_records: u64,
    /// Messages it holds at most.
    pub capacity: usize,
    /// Seconds senders were blocked on it.
    pub blocked_seconds: f64,
}

/// One operator.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorSnapshot {
    /// Its name.
    pub name: String,
    /// Its stage.
    pub stage: String,
    /// Records it failed on.
    pub failures: u64,
    /// Plugin calls so far.
    pub calls: u64,
    /// Seconds spent in them.
    pub call_seconds: f64,
}

impl Telemetry {
    /// The dashboard's view now; `plugins` are the versions running.
    pub fn snapshot(&self, plugins: Vec<PluginInfo>) -> Snapshot {
        let graph = self.graph();
        Snapshot {
            pipeline: self.pipeline.clone(),
            at_ms: crate::clock::now_ms(),
            stages: graph
                .stages
                .iter()
                .map(|s| StageSnapshot {
                    name: s.stats.name.clone(),
                    workers: s.workers,
                    operators: s.operators.clone(),
                    records_in: s.stats.records_in.load(Ordering::Relaxed),
                    records_out: s.stats.records_out.load(Ordering::Relaxed),
                })
                .collect(),
            edges: graph
                .edges
                .iter()
                .map(|e| EdgeSnapshot {
                    from: e.from.clone(),
                    to: e.to.clone(),
                    queued: e.stats.queued(),
                    queued_records: e.stats.queued_records(),
                    capacity: e.stats.capacity,
                    blocked_seconds: e.stats.blocked_seconds(),
                })
                .collect(),
            operators: graph
                .operators
                .iter()
                .map(|o| OperatorSnapshot {
                    name: o.name.clone(),
                    stage: o.stage.clone(),
                    failures: o.failures.failures.load(Ordering::Relaxed),
                    calls: o.calls.latency.get_sample_count(),
                    call_seconds: o.calls.latency.get_sample_sum(),
                })
                .collect(),
            checkpoints: graph.checkpoints.map(|c| c.history()).unwrap_or_default(),
            lag: self.source.lag(),
            watermark_ms: self.source.watermark(),
            progress: self.source.progress(),
            plugins,
            tasks: self.tasks(),
        }
    }
}
