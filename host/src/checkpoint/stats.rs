//! What the checkpoints of a run did: counts for the source and the run
//! report, and the recent history, durations and sizes for the metrics and
//! the dashboard.

use prometheus::{Histogram, HistogramOpts};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

/// Checkpoints kept in the history.
const HISTORY: usize = 50;

/// Bucket bounds of the checkpoint duration, seconds.
pub const DURATION_BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// One checkpoint as it ended.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CheckpointRecord {
    /// Its id.
    pub id: u64,
    /// Whether it completed.
    pub ok: bool,
    /// From its barrier to its end, seconds.
    pub seconds: f64,
    /// Bytes written (0 for a failed one).
    pub bytes: u64,
    /// Bytes uploaded to the checkpoints' bucket (none without one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uploaded_bytes: Option<u64>,
    /// When it ended, ms since 1970.
    pub ended_at_ms: i64,
    /// Why it failed.
    pub reason: Option<String>,
}

/// Counts shared with the source and the run report.
#[derive(Debug)]
pub struct CheckpointStats {
    /// Checkpoints completed.
    pub completed: AtomicU64,
    /// Checkpoints failed.
    pub failed: AtomicU64,
    /// Whether a checkpoint is in flight (the source waits for it to end
    /// before the next barrier).
    pub in_flight: AtomicBool,
    /// When the last one completed, ms since 1970 (0: none yet).
    pub last_success_ms: AtomicI64,
    /// Bytes of the last completed one.
    pub last_bytes: AtomicU64,
    /// Bytes uploaded to the bucket, all checkpoints together.
    pub uploaded_bytes: AtomicU64,
    /// Seconds each completed one took.
    pub durations: Histogram,
    history: Mutex<VecDeque<CheckpointRecord>>,
}

impl Default for CheckpointStats {
    fn default() -> Self {
        let opts = HistogramOpts::new(DURATION_NAME, DURATION_HELP).buckets(DURATION_BUCKETS.to_vec());
        Self::with_durations(Histogram::with_opts(opts).expect("valid histogram options"))
    }
}

/// The duration histogram's name.
pub const DURATION_NAME: &str = "mailer_checkpoint_duration_seconds";
/// Its help.
pub const DURATION_HELP: &str = "Seconds from a checkpoint's barrier to its completion";

impl CheckpointStats {
    /// Fresh counts, durations going into `durations`.
    pub fn with_durations(durations: Histogram) -> Self {
        Self {
            completed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            in_flight: AtomicBool::new(false),
            last_success_ms: AtomicI64::new(0),
            last_bytes: AtomicU64::new(0),
            uploaded_bytes: AtomicU64::new(0),
            durations,
            history: Mutex::new(VecDeque::with_capacity(HISTORY)),
        }
    }

    /// Checkpoint `id` completed after `took`, writing `bytes` (and
    /// uploading `uploaded_bytes` to the bucket).
    pub fn record_success(&self, id: u64, took: Duration, bytes: u64, uploaded_bytes: Option<u64>) {
        let now = crate::clock::now_ms();
        self.completed.fetch_add(1, Ordering::Relaxed);
        self.last_success_ms.store(now, Ordering::Relaxed);
        self.last_bytes.store(bytes, Ordering::Relaxed);
        self.uploaded_bytes
            .fetch_add(uploaded_bytes.unwrap_or(0), Ordering::Relaxed);
        self.durations.observe(took.as_secs_f64());
        self.remember(CheckpointRecord {
            id,
            ok: true,
            seconds: took.as_secs_f64(),
            bytes,
            uploaded_bytes,
            ended_at_ms: now,
            reason: None,
        });
    }

    /// Checkpoint `id` failed after `took`.
    pub fn record_failure(&self, id: u64, took: Duration, reason: &str) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        self.remember(CheckpointRecord {
            id,
            ok: false,
            seconds: took.as_secs_f64(),
            bytes: 0,
            uploaded_bytes: None,
            ended_at_ms: crate::clock::now_ms(),
            reason: Some(reason.to_owned()),
        });
    }

    /// The most recent checkpoints, oldest first.
    pub fn history(&self) -> Vec<CheckpointRecord> {
        self.history
            .lock()
            .expect("history lock")
            .iter()
            .cloned()
            .collect()
    }

    fn remember(&self, record: CheckpointRecord) {
        let mut history = self.history.lock().expect("history lock");
        if history.len() == HISTORY {
            history.pop_front();
        }
        history.push_back(record);
    }
}

/// Bytes of the files under `dir`.
pub fn size_of(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => size_of(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_recent_history_and_the_last_success() {
        let stats = CheckpointStats::default();
        for id in 0..(HISTORY as u64 + 5) {
            stats.record_success(id, Duration::from_millis(3), 100 + id, Some(7));
        }
        stats.record_failure(999, Duration::from_millis(1), "disk full");
        let history = stats.history();
        assert_eq!(history.len(), HISTORY);
        assert_eq!(history[0].id, 6, "the oldest dropped");
        assert_eq!(history.last().unwrap().reason.as_deref(), Some("disk full"));
        assert_eq!(stats.last_bytes.load(Ordering::Relaxed), 100 + HISTORY as u64 + 4);
        assert_eq!(stats.durations.get_sample_count(), HISTORY as u64 + 5);
        assert_eq!(
            stats.uploaded_bytes.load(Ordering::Relaxed),
            7 * (HISTORY as u64 + 5)
        );
        assert!(stats.last_success_ms.load(Ordering::Relaxed) > 0);
    }

    #[test]
    fn sizes_a_folder_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), [0u8; 10]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b"), [0u8; 5]).unwrap();
        assert_eq!(size_of(dir.path()), 15);
    }
}
