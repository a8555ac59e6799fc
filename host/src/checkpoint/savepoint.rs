//! Savepoints: a complete checkpoint copied to a folder or a bucket prefix
//! the user named, kept until the user removes it. A folder copy is made in
//! a temporary folder beside the target, synced, and renamed into place, so
//! the target exists only complete; in a bucket, the metadata is written
//! last (see `remote.rs`). The outcome is reported to `mailer savepoint` in
//! the checkpoint folder: `SAVEPOINT.done` or `SAVEPOINT.failed`.

use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::path::Path;

/// A request for a savepoint: a checkpoint copied to `target`, kept until
/// the user removes it; with `stop`, the pipeline then drains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointRequest {
    /// Where the savepoint goes: a folder that does not exist yet (an
    /// absolute path), or `s3://bucket/prefix` holding no savepoint yet.
    pub target: String,
    /// Whether the pipeline stops once it is written.
    pub stop: bool,
}

/// What the checkpoint coordinator may ask of the running pipeline.
pub trait RunControl: Send + Sync {
    /// Stops the pipeline (it drains), after a savepoint that asked for it.
    fn stop(&self);
    /// Carries a savepoint request over to the next checkpoint.
    fn request_savepoint(&self, request: SavepointRequest);
}

/// Where the pipeline tells `mailer savepoint` that a savepoint failed.
pub const SAVEPOINT_FAILED: &str = "SAVEPOINT.failed";

/// Where the pipeline tells `mailer savepoint` that a savepoint is written
/// (the file holds its target).
pub const SAVEPOINT_DONE: &str = "SAVEPOINT.done";

/// A savepoint that could not be written, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SavepointFailure {
    /// The savepoint's target.
    pub target: String,
    /// What failed.
    pub reason: String,
}

/// Copies the complete checkpoint `from` to the savepoint folder `to`,
/// which appears only once everything in it is written and synced.
pub fn write_savepoint(from: &Path, to: &Path) -> std::io::Result<()> {
    if to.exists() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "it already exists",
        ));
    }
    let name = to
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "it names no folder"))?;
    let parent = to.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(".{}.tmp", name.to_string_lossy()));
    if tmp.exists() {
        fs::remove_dir_all(&tmp)?;
    }
    let copied = copy_tree(from, &tmp).and_then(|()| fs::rename(&tmp, to));
    if copied.is_err() {
        let _ = fs::remove_dir_all(&tmp);
    }
    copied?;
    File::open(parent)?.sync_all()
}

/// Records in the checkpoint folder `dir` that the savepoint `target`
/// failed, for `mailer savepoint` to report.
pub fn report_failure(dir: &Path, target: &str, reason: &str) {
    let failure = SavepointFailure {
        target: target.to_owned(),
        reason: reason.to_owned(),
    };
    report(
        dir,
        SAVEPOINT_FAILED,
        &serde_json::to_vec(&failure).expect("serialises"),
    );
}

/// Records in the checkpoint folder `dir` that the savepoint `target` is
/// written.
pub fn report_done(dir: &Path, target: &str) {
    report(dir, SAVEPOINT_DONE, target.as_bytes());
}

fn report(dir: &Path, file: &str, bytes: &[u8]) {
    let tmp = dir.join(format!("{file}.tmp"));
    let written = fs::write(&tmp, bytes).and_then(|()| fs::rename(&tmp, dir.join(file)));
    if let Err(e) = written {
        tracing::warn!(error = %e, "cannot report the savepoint's outcome to `mailer savepoint`");
    }
}

/// Copies the folder `from` to `to` (which must not exist), hard-linking
/// files where the file system allows (a checkpoint's files never change),
/// and syncs every file and folder.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    fs::create_dir(to)?;
    for entry in fs::read_dir(from)? {
        let path = entry?.path();
        let target = to.join(path.file_name().expect("an entry has a name"));
        if path.is_dir() {
            copy_tree(&path, &target)?;
        } else {
            if fs::hard_link(&path, &target).is_err() {
                fs::copy(&path, &target)?;
            }
            File::open(&target)?.sync_all()?;
        }
    }
    File::open(to)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_savepoint_appears_whole_and_a_failed_one_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("chk");
        fs::create_dir_all(from.join("op-w0")).unwrap();
        fs::write(from.join("_metadata.json"), b"{}").unwrap();
        fs::write(from.join("op-w0/entries"), b"state").unwrap();

        let to = dir.path().join("savepoints/sp-1");
        write_savepoint(&from, &to).unwrap();
        assert_eq!(fs::read(to.join("op-w0/entries")).unwrap(), b"state");
        assert!(
            write_savepoint(&from, &to).is_err(),
            "an existing target is refused"
        );

        // A parent that is a file: nothing can be written under it.
        fs::write(dir.path().join("file"), b"").unwrap();
        let blocked = dir.path().join("file/sp-2");
        assert!(write_savepoint(&from, &blocked).is_err());
        assert!(!blocked.exists());

        report_failure(dir.path(), &blocked.display().to_string(), "no room");
        let failure: SavepointFailure =
            serde_json::from_slice(&fs::read(dir.path().join(SAVEPOINT_FAILED)).unwrap()).unwrap();
        assert_eq!(failure.reason, "no room");
    }
}
