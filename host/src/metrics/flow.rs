//! What flows through the running pipeline: per stage and per edge counts,
//! written by the runtime's threads and read by metrics and the run report.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

    /// Counts `records` in.
    pub fn count_in(&self, records: usize) {
        self.records_in.fetch_add(records as u64, Ordering::Relaxed);
    }

    /// Counts `records` out.
    pub fn count_out(&self, records: usize) {
        self.records_out.fetch_add(records as u64, Ordering::Relaxed);
    }
}

/// Observations of one edge, shared by its two ends.
#[derive(Debug)]
pub struct EdgeStats {
    /// `from -> to`, for logs and metrics.
    pub name: String,
    /// Messages (batches or markers) the edge holds at most.
    pub capacity: usize,
    /// Nanoseconds senders spent blocked on a full edge.
    pub blocked_nanos: AtomicU64,
    /// Records sent into the edge.
    pub records: AtomicU64,
    /// Records taken out of it.
    pub records_received: AtomicU64,
    /// Messages sent into the edge.
    pub sent: AtomicU64,
    /// Messages taken out of it.
    pub received: AtomicU64,
}

impl EdgeStats {
    /// Messages waiting in the edge now.
    pub fn queued(&self) -> u64 {
        let received = self.received.load(Ordering::Relaxed);
        self.sent.load(Ordering::Relaxed).saturating_sub(received)
    }

    /// Records waiting in the edge now (in the batches it holds).
    pub fn queued_records(&self) -> u64 {
        let received = self.records_received.load(Ordering::Relaxed);
        self.records.load(Ordering::Relaxed).saturating_sub(received)
    }

    /// Seconds senders spent blocked on a full edge.
    pub fn blocked_seconds(&self) -> f64 {
        self.blocked_nanos.load(Ordering::Relaxed) as f64 / 1e9
    }
}
