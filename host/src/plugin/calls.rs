//! What the calls into one operator's plugin cost, shared by its workers.

use prometheus::{Histogram, HistogramOpts};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Bucket bounds of the call latency, seconds: 10 µs to 10 s.
pub const LATENCY_BUCKETS: [f64; 16] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.5, 1.0, 10.0,
];

/// Counts of one operator's plugin calls.
#[derive(Debug)]
pub struct CallStats {
    /// Whether calls are timed (metrics on).
    pub timed: bool,
    /// Seconds per call (one call per batch in batch mode).
    pub latency: Histogram,
    /// Calls that trapped (panic, out-of-bounds, memory exhausted, …).
    pub traps: AtomicU64,
    /// Calls interrupted at their deadline.
    pub deadline_hits: AtomicU64,
    /// Fuel burned (operators with `fuel`).
    pub fuel_consumed: AtomicU64,
    /// Calls stopped when their fuel ran out.
    pub fuel_exhausted: AtomicU64,
    /// `log` import lines dropped past the per-call limit.
    pub log_dropped: AtomicU64,
}

impl CallStats {
    /// Fresh counts into `latency`; calls are timed when `timed`.
    pub fn new(timed: bool, latency: Histogram) -> Self {
        Self {
            timed,
            latency,
            traps: AtomicU64::new(0),
            deadline_hits: AtomicU64::new(0),
            fuel_consumed: AtomicU64::new(0),
            fuel_exhausted: AtomicU64::new(0),
            log_dropped: AtomicU64::new(0),
        }
    }

    /// Fresh counts in no registry (tests, benchmarks).
    pub fn detached(timed: bool) -> Self {
        let opts = HistogramOpts::new("mailer_operator_call_seconds", "Seconds per plugin call")
            .buckets(LATENCY_BUCKETS.to_vec());
        Self::new(
            timed,
            Histogram::with_opts(opts).expect("valid histogram options"),
        )
    }

    /// A call took `took`.
    pub fn observe(&self, took: Duration) {
        self.latency.observe(took.as_secs_f64());
    }

    /// A call trapped.
    pub fn trapped(&self) {
        self.traps.fetch_add(1, Ordering::Relaxed);
    }

    /// A call burned `fuel`.
    pub fn fuel_burned(&self, fuel: u64) {
        self.fuel_consumed.fetch_add(fuel, Ordering::Relaxed);
    }

    /// A call ran out of fuel.
    pub fn fuel_ran_out(&self) {
        self.fuel_exhausted.fetch_add(1, Ordering::Relaxed);
    }

    /// A call logged `n` lines past its limit.
    pub fn log_lines_dropped(&self, n: u64) {
        self.log_dropped.fetch_add(n, Ordering::Relaxed);
    }

    /// A call hit its deadline.
    pub fn deadline_hit(&self) {
        self.deadline_hits.fetch_add(1, Ordering::Relaxed);
    }
}

impl Default for CallStats {
    fn default() -> Self {
        Self::detached(true)
    }
}
