//! The folder a process keeps its tasks' RocksDB databases in
//! (`<state path>/<member>`): locked for the run, so two processes of one
//! machine with the same `instance_id` cannot wipe each other's state. A
//! process without `instance_id` works in `pid-<pid>-<ms>`, which nothing
//! reuses: it is removed when the process ends, and the ones processes
//! that crashed left (unlocked, older than a minute) are removed when
//! another one starts.

use super::error::ClusterError;
use crate::checkpoint::{FolderLock, lock};
use crate::plan::Plan;
use crate::state::BackendKind;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The prefix of a folder of a process without `instance_id`.
pub const UNNAMED: &str = "pid-";

/// The process's member folder, locked; removed when dropped if it is an
/// unnamed one.
#[derive(Debug)]
pub struct MemberFolder {
    dir: PathBuf,
    lock: Option<FolderLock>,
    unnamed: bool,
}

impl MemberFolder {
    /// Locks the member folder of `plan` (with RocksDB; `None` in memory),
    /// named `member`, after removing unnamed folders no process holds.
    pub fn take(plan: &Plan, member: &str) -> Result<Option<Self>, ClusterError> {
        let BackendKind::Rocks { dir, .. } = &plan.state else {
            return Ok(None);
        };
        if let Some(parent) = dir.parent() {
            remove_unheld(parent);
        }
        std::fs::create_dir_all(dir).map_err(|source| ClusterError::StateFolder {
            folder: dir.display().to_string(),
            reason: source.to_string(),
        })?;
        let lock = lock(dir).map_err(|e| ClusterError::StateFolder {
            folder: dir.display().to_string(),
            reason: format!(
                "{e}; in cluster mode each process of a machine needs its own `instance_id` (or none)"
            ),
        })?;
        Ok(Some(Self {
            dir: dir.clone(),
            lock: Some(lock),
            unnamed: member.starts_with(UNNAMED),
        }))
    }
}

impl Drop for MemberFolder {
    fn drop(&mut self) {
        drop(self.lock.take());
        if self.unnamed
            && let Err(e) = std::fs::remove_dir_all(&self.dir)
        {
            tracing::warn!(folder = %self.dir.display(), error = %e, "cannot remove this process's state folder");
        }
    }
}

/// How old an unnamed folder must be to be removed: a process that just
/// made its own has not locked it yet.
const SETTLED: Duration = Duration::from_secs(60);

/// Removes the unnamed member folders in `parent` that no running process
/// holds (their processes crashed), each under its lock, and only once
/// older than [`SETTLED`].
fn remove_unheld(parent: &Path) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let unnamed = entry.file_name().to_string_lossy().starts_with(UNNAMED);
        let settled = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age >= SETTLED));
        if !(unnamed && settled && path.is_dir()) {
            continue;
        }
        // Held while it goes: no process can take the folder meanwhile.
        let Ok(_held) = lock(&path) else { continue };
        tracing::info!(folder = %path.display(), "removing the state folder a crashed process left");
        if let Err(e) = std::fs::remove_dir_all(&path) {
            tracing::warn!(folder = %path.display(), error = %e, "cannot remove the folder");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_settled_unnamed_folders_no_process_holds_are_removed() {
        let root = tempfile::tempdir().unwrap();
        let (left, held, named) = (
            root.path().join("pid-1-2"),
            root.path().join("pid-3-4"),
            root.path().join("a"),
        );
        let fresh = root.path().join("pid-5-6");
        for d in [&left, &held, &named, &fresh] {
            std::fs::create_dir_all(d).unwrap();
        }
        let old = std::time::SystemTime::now() - 2 * SETTLED;
        for d in [&left, &held, &named] {
            std::fs::File::open(d).unwrap().set_modified(old).unwrap();
        }
        let _lock = lock(&held).unwrap();
        remove_unheld(root.path());
        assert!(!left.exists());
        assert!(held.exists() && named.exists() && fresh.exists());
    }
}
