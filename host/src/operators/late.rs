//! Records too late for an event-time operator (a window, a join): counted
//! over all of its workers, then dropped or sent to the late output.

use crate::failure::SideOutput;
use crate::record::Record;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a manifest says happens to records too late for an operator
/// (its `late`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LateSpec {
    /// Dropped (counted).
    #[default]
    Drop,
    /// Sent to `[late_output]` (counted).
    SideOutput,
}

/// What happens to records too late for every window or join they belong to.
#[derive(Debug, Clone)]
pub enum LatePolicy {
    /// Counted and dropped.
    Drop,
    /// Counted and sent here.
    SideOutput(SideOutput),
}

/// One worker's way out for its late records.
#[derive(Debug, Clone)]
pub struct LateRecords {
    policy: LatePolicy,
    count: Arc<AtomicU64>,
}

impl LateRecords {
    /// Late records handled by `policy`, counted in `count`.
    pub fn new(policy: LatePolicy, count: Arc<AtomicU64>) -> Self {
        Self { policy, count }
    }

    /// A worker's late records, counted in `count`: sent to `late_output`
    /// (the pipeline's, if it has one) when the operator asks for it
    /// (`to_output`), else dropped.
    pub fn for_worker(to_output: bool, late_output: &Option<SideOutput>, count: Arc<AtomicU64>) -> Self {
        let policy = match (to_output, late_output) {
            (true, Some(tx)) => LatePolicy::SideOutput(tx.clone()),
            _ => LatePolicy::Drop,
        };
        Self::new(policy, count)
    }

    /// Late records counted and dropped.
    pub fn dropped() -> Self {
        Self::new(LatePolicy::Drop, Arc::default())
    }

    /// How many late records the operator had, over all of its workers.
    pub fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Counts `rec` and drops it or sends it to the late output.
    pub fn handle(&self, rec: Record) {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let LatePolicy::SideOutput(tx) = &self.policy {
            // A stopped side output means the pipeline is stopping.
            let _ = tx.send(rec);
        }
    }
}
