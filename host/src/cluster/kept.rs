//! A keyed task's state kept in the process's state folder (RocksDB only)
//! when the task leaves it cleanly: a snapshot of each keyed operator's
//! database, taken just after the commit that wrote its last changes, and
//! the changelog offset it stands for. When the group gives the task back
//! to this process (a restart under the same `instance_id`, or a later
//! rebalance), the task opens a copy of that snapshot and restores only
//! the changelog records written after it, by whoever ran the task in
//! between. A snapshot is used once: a task that then dies uncleanly
//! restores from the changelog's start, as one that never left does. One
//! older than 12 hours is not used: the changelog may have dropped the
//! tombstones of deletions since.

use crate::state::{BackendKind, SnapshotSource, StateBackend, StateError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How old a kept state may be: well within the day a compacted
/// changelog keeps its tombstones.
pub(super) const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

/// Where a state is as of its snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptMark {
    /// The changelog offset the snapshot holds everything before.
    pub next_offset: i64,
    /// The task's watermark then, when it had one.
    pub watermark: Option<i64>,
}

/// The folder of the states kept by this process.
#[derive(Debug, Clone)]
pub struct KeptStates {
    dir: PathBuf,
}

impl KeptStates {
    /// The kept states of a process whose keyed state is `state`: a folder
    /// of its RocksDB folder; none in memory.
    pub fn of(state: &BackendKind) -> Option<Self> {
        match state {
            BackendKind::Rocks { dir, .. } => Some(Self {
                dir: dir.join("kept"),
            }),
            BackendKind::Memory => None,
        }
    }

    /// Keeps `state`, task `task`'s state of the keyed stage and operator
    /// `name`, as of `mark` (committed: nothing in it is newer).
    pub fn keep(
        &self,
        name: &str,
        task: i32,
        state: &mut dyn StateBackend,
        mark: KeptMark,
    ) -> Result<(), StateError> {
        let (snapshot, mark_file) = self.paths(name, task);
        let err = |what: &str, path: &Path, e: std::io::Error| {
            StateError::Restore(format!(
                "keeping a task's state: {what} `{}`: {e}",
                path.display()
            ))
        };
        remove(&mark_file).map_err(|e| err("removing", &mark_file, e))?;
        if snapshot.exists() {
            std::fs::remove_dir_all(&snapshot).map_err(|e| err("removing", &snapshot, e))?;
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| err("creating", &self.dir, e))?;
        state.snapshot(&snapshot)?;
        let written = mark_file.with_extension("json.new");
        let json = serde_json::to_vec(&mark).expect("a mark serializes");
        std::fs::write(&written, json).map_err(|e| err("writing", &written, e))?;
        std::fs::rename(&written, &mark_file).map_err(|e| err("writing", &mark_file, e))
    }

    /// Takes what was kept of task `task`'s state of `name`: the snapshot
    /// to open a copy of, and its mark. The mark is gone after this, so the
    /// snapshot is never used twice.
    pub fn take(&self, name: &str, task: i32) -> Option<(SnapshotSource, KeptMark)> {
        let (snapshot, mark_file) = self.paths(name, task);
        let bytes = std::fs::read(&mark_file).ok()?;
        let age = std::fs::metadata(&mark_file)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|at| at.elapsed().ok());
        if age.is_none_or(|age| age > MAX_AGE) {
            // Compaction drops tombstones after `delete.retention.ms` (a
            // day by default): an older state could miss a deletion.
            tracing::info!(file = %mark_file.display(), "a kept state is too old to trust; the task restores from its changelog's start");
            let _ = remove(&mark_file);
            return None;
        }
        if let Err(e) = remove(&mark_file) {
            tracing::warn!(file = %mark_file.display(), error = %e, "a kept state cannot be taken; the task restores from its changelog's start");
            return None;
        }
        let Ok(mark) = serde_json::from_slice(&bytes) else {
            tracing::warn!(file = %mark_file.display(), "a kept state's mark is unreadable; the task restores from its changelog's start");
            return None;
        };
        let source = SnapshotSource {
            path: snapshot,
            backend: "rocksdb".into(),
            same_key_groups: true,
        };
        Some((source, mark))
    }

    /// Removes the snapshot of `name`'s task `task` (its copy is open).
    pub fn discard(&self, name: &str, task: i32) {
        let (snapshot, _) = self.paths(name, task);
        if let Err(e) = std::fs::remove_dir_all(&snapshot) {
            tracing::debug!(folder = %snapshot.display(), error = %e, "a used kept state stays on disk");
        }
    }

    fn paths(&self, name: &str, task: i32) -> (PathBuf, PathBuf) {
        let base = format!("{name}-task-{task}");
        (self.dir.join(&base), self.dir.join(format!("{base}.json")))
    }
}

/// Removes `file` when it is there.
fn remove(file: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_mark_is_taken_once() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptStates {
            dir: dir.path().join("kept"),
        };
        let mut state = crate::state::MemoryBackend::default();
        state.put(b"k", b"v").unwrap();
        let mark = KeptMark {
            next_offset: 42,
            watermark: Some(7),
        };
        kept.keep("counts", 3, &mut state, mark).unwrap();
        assert!(kept.take("counts", 2).is_none(), "another task's");
        let (source, taken) = kept.take("counts", 3).expect("kept");
        assert_eq!(taken, mark);
        assert!(source.path.exists());
        assert!(kept.take("counts", 3).is_none(), "taken once");
        kept.discard("counts", 3);
        assert!(!source.path.exists());
    }
}
