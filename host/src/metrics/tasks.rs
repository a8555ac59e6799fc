//! What each task of a cluster-mode process measures (docs/architecture.md,
//! "Cluster mode"): the records it ran and, for a keyed task, how far the
//! restore of its state from its changelogs has come. A task registers
//! when the group assigns it to the process and leaves when it is revoked.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One task's counts, shared by the cluster engine (which counts) and the
/// admin server (which reads them).
#[derive(Debug, Default)]
pub struct TaskStats {
    /// `<topic>/<partition>`: the partition the task consumes.
    pub name: String,
    /// Records it ran through its operators.
    pub records: AtomicU64,
    /// Changelog records applied to its state so far.
    pub restored: AtomicU64,
    /// Changelog records its restore reads at most (the changelogs' ends
    /// less where the restore began).
    pub to_restore: AtomicU64,
    /// Whether it is restoring now (it runs no record until it is done).
    pub restoring: AtomicBool,
}

impl TaskStats {
    /// The counts of task `name`, all zero.
    pub fn new(name: String) -> Self {
        Self {
            name,
            ..Self::default()
        }
    }

    /// Its counts now.
    pub fn snapshot(&self) -> TaskSnapshot {
        TaskSnapshot {
            name: self.name.clone(),
            records: self.records.load(Ordering::Relaxed),
            restored: self.restored.load(Ordering::Relaxed),
            to_restore: self.to_restore.load(Ordering::Relaxed),
            restoring: self.restoring.load(Ordering::Relaxed),
        }
    }
}

/// One task at one instant (the dashboard's and the metrics' view).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct TaskSnapshot {
    /// `<topic>/<partition>`.
    pub name: String,
    /// Records it ran.
    pub records: u64,
    /// Changelog records restored.
    pub restored: u64,
    /// Changelog records its restore reads at most.
    pub to_restore: u64,
    /// Whether it is restoring now.
    pub restoring: bool,
}
