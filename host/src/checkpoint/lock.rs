//! One running instance per pipeline state: `mailer run` holds an exclusive
//! `flock(2)` on `mailer.lock` in each folder its state lives in (the
//! checkpoint folder, the RocksDB state folder) for the whole run. The
//! kernel releases the lock when the process ends, however it ends, so a
//! crash never leaves a stale lock, and a reused process id is never
//! mistaken for the pipeline: the id written into the file is only read
//! while somebody holds the lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name in a locked folder.
pub const LOCK_FILE: &str = "mailer.lock";

/// Why a folder could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process runs the pipeline.
    #[error(
        "`{path}` is locked by {holder}: a pipeline's state serves one running instance; stop that one first, or give this run other `[checkpoint] path` and `[state] path` folders"
    )]
    Held {
        /// The lock file.
        path: String,
        /// Who holds it, as far as the file says.
        holder: String,
    },
    /// The lock file cannot be made or locked.
    #[error("cannot lock `{path}`: {source}")]
    Io {
        /// The lock file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
}

/// A held lock on a folder, released when dropped (or when the process
/// ends).
#[derive(Debug)]
pub struct FolderLock {
    _file: File,
}

fn open(dir: &Path) -> Result<(File, PathBuf), LockError> {
    let path = dir.join(LOCK_FILE);
    let io = |source| LockError::Io {
        path: path.display().to_string(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    Ok((file, path))
}

/// Tries to take the lock in `mode` without waiting: `Ok(false)` when
/// another process holds it.
fn try_flock(file: &File, mode: libc::c_int) -> std::io::Result<bool> {
    // SAFETY: flock(2) on a file descriptor this `File` owns.
    if unsafe { libc::flock(file.as_raw_fd(), mode | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

fn pid_in(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

/// Locks `dir` (created when missing) for this process, writing its id into
/// the lock file; fails at once when another process holds it.
pub fn lock(dir: &Path) -> Result<FolderLock, LockError> {
    let (mut file, path) = open(dir)?;
    let io = |source| LockError::Io {
        path: path.display().to_string(),
        source,
    };
    if !try_flock(&file, libc::LOCK_EX).map_err(io)? {
        let holder = match pid_in(&mut file) {
            Some(pid) => format!("process {pid}"),
            None => "another process".to_owned(),
        };
        return Err(LockError::Held {
            path: path.display().to_string(),
            holder,
        });
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    file.write_all(std::process::id().to_string().as_bytes())
        .map_err(io)?;
    Ok(FolderLock { _file: file })
}

/// Locks each of `folders` (a pipeline's checkpoint and state folders)
/// for this process, for as long as the locks live; fails when another
/// process holds one of them.
pub fn lock_all(folders: &[&Path]) -> Result<Vec<FolderLock>, LockError> {
    folders.iter().map(|dir| lock(dir)).collect()
}

/// The process holding the lock on `dir`: `None` when nobody does.
pub fn holder(dir: &Path) -> Result<Option<u32>, LockError> {
    if !dir.join(LOCK_FILE).exists() {
        return Ok(None);
    }
    let (mut file, path) = open(dir)?;
    let free = try_flock(&file, libc::LOCK_SH).map_err(|source| LockError::Io {
        path: path.display().to_string(),
        source,
    })?;
    if free {
        // Ours only for this look: closing the file releases it.
        return Ok(None);
    }
    Ok(pid_in(&mut file))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// flock(2) locks belong to an open file description, so a second
    /// `open` in the same process stands in for a second process.
    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(holder(dir.path()).unwrap(), None);
        let first = lock(dir.path()).unwrap();
        assert_eq!(holder(dir.path()).unwrap(), Some(std::process::id()));
        let refused = lock(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains(&format!("process {}", std::process::id())),
            "{refused}"
        );
        drop(first);
        assert_eq!(holder(dir.path()).unwrap(), None);
        lock(dir.path()).unwrap();
    }
}
