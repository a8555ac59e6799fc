//! Checkpoints: consistent snapshots of every operator's state and the
//! source's position, taken as barriers pass (contract C1), kept in a local
//! folder (and, with `s3://` paths, in an S3 bucket), and used to resume
//! after a crash or a stop.

mod coordinator;
mod lease;
mod location;
mod lock;
mod metadata;
mod plugins;
mod remote;
mod restore;
pub mod s3;
mod savepoint;
mod stats;
mod store;

pub use coordinator::{CheckpointEvent, CoordinatorError, CoordinatorSetup, run_coordinator};
pub use lease::LeaseError;
pub use location::{BucketUrl, Location};
pub use lock::{FolderLock, LOCK_FILE, LockError, holder as lock_holder, lock, lock_all};
pub use metadata::{Metadata, OperatorMeta, SnapshotMeta, file_sizes};
pub use plugins::{PluginSwap, file_in as plugin_in, read_checked as read_plugin};
pub use remote::RemoteCheckpoints;
pub use restore::{CommittedCheckpoint, Restore, RestoreError, RestoreTarget, StartFrom};
pub use s3::S3Settings;
pub use savepoint::{RunControl, SAVEPOINT_DONE, SAVEPOINT_FAILED, SavepointFailure, SavepointRequest};
pub use stats::{CheckpointRecord, CheckpointStats, DURATION_BUCKETS, DURATION_HELP, DURATION_NAME};
pub use store::{CheckpointStore, Completed, StoreError, read_metadata};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A pipeline's checkpoint settings, from `[checkpoint]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Time between barriers.
    pub interval: Duration,
    /// The local folder checkpoints are written into (and, without a
    /// bucket, kept in); it holds the run's lock.
    pub dir: PathBuf,
    /// The bucket prefix checkpoints go to, if any (`s3://…` paths).
    pub bucket: Option<BucketUrl>,
    /// How to reach S3 (for the bucket, and for savepoints in buckets).
    pub s3: S3Settings,
    /// Complete checkpoints kept.
    pub keep: usize,
    /// Failures in a row that do not stop the pipeline.
    pub tolerable_failures: u32,
    /// How long a checkpoint may take before it counts as failed.
    pub timeout: Duration,
}

/// The folder checkpoint `id` is written into before it completes.
pub fn pending_dir(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("chk-{id:020}.tmp"))
}

/// What a worker of an operator stage needs to take its part of a
/// checkpoint.
#[derive(Debug, Clone)]
pub struct WorkerCheckpoints {
    /// The checkpoint folder.
    pub dir: PathBuf,
    /// The worker's index in its stage.
    pub worker: usize,
    /// The stage's parallelism.
    pub parallelism: usize,
    /// The state backend's name.
    pub backend: &'static str,
    /// Where to acknowledge.
    pub events: flume::Sender<CheckpointEvent>,
}
