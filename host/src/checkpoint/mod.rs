//! Checkpoints: consistent snapshots of every operator's state and the
//! source's position, taken as barriers pass (contract C1), kept in a local
//! folder, and used to resume after a crash or a stop.

mod coordinator;
mod metadata;
mod stats;
mod store;

pub use coordinator::{CheckpointEvent, CoordinatorError, CoordinatorSetup, run_coordinator};
pub use metadata::{Metadata, OperatorMeta, SnapshotMeta};
pub use stats::{CheckpointRecord, CheckpointStats, DURATION_BUCKETS, DURATION_HELP, DURATION_NAME};
pub use store::{CheckpointStore, StoreError, read_metadata};

use std::path::{Path, PathBuf};
use std::time::Duration;

/// A pipeline's checkpoint settings, from `[checkpoint]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointSettings {
    /// Time between barriers.
    pub interval: Duration,
    /// Where checkpoints go.
    pub dir: PathBuf,
    /// Complete checkpoints kept.
    pub keep: usize,
    /// Failures in a row that do not stop the pipeline.
    pub tolerable_failures: u32,
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

/// A checkpoint to resume from: its folder and what it holds.
#[derive(Debug, Clone)]
pub struct Restore {
    /// Its folder.
    pub dir: PathBuf,
    /// Its metadata.
    pub metadata: Metadata,
}

/// Why a pipeline cannot resume from its checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The checkpoint folder cannot be read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The sink cannot say which checkpoint it committed.
    #[error("cannot find out which checkpoint the sink committed: {0}")]
    Sink(String),
    /// The checkpoint does not fit the manifest.
    #[error(
        "cannot resume from checkpoint {id} in `{dir}`: {reason}; fix the manifest, or start over with `mailer run --fresh`"
    )]
    Incompatible {
        /// The checkpoint.
        id: u64,
        /// Its folder.
        dir: String,
        /// What does not fit.
        reason: String,
    },
}

impl Restore {
    /// The newest complete checkpoint of `plan`'s pipeline, checked against
    /// it; `None` when checkpoints are off or there is none yet.
    pub fn latest(plan: &crate::plan::Plan) -> Result<Option<Restore>, RestoreError> {
        let Some(settings) = &plan.checkpoint else {
            return Ok(None);
        };
        let store = CheckpointStore::open(&settings.dir, settings.keep)?;
        // A sink that commits with checkpoints says which checkpoint's
        // output is in: a later one's output was lost with a crash and is
        // made again from that one.
        let limit = match &plan.committed_checkpoint {
            None => u64::MAX,
            Some(committed) => match committed().map_err(|e| RestoreError::Sink(e.to_string()))? {
                Some(id) => id,
                None => {
                    tracing::info!(
                        "the sink never committed a checkpoint's output: starting from the beginning"
                    );
                    return Ok(None);
                }
            },
        };
        let Some((dir, metadata)) = store.latest_up_to(limit)? else {
            return Ok(None);
        };
        let restore = Restore { dir, metadata };
        restore.check(plan)?;
        Ok(Some(restore))
    }

    /// Refuses a checkpoint whose state the plan cannot take over.
    pub fn check(&self, plan: &crate::plan::Plan) -> Result<(), RestoreError> {
        let m = &self.metadata;
        let refuse = |reason: String| RestoreError::Incompatible {
            id: m.id,
            dir: self.dir.display().to_string(),
            reason,
        };
        if m.key_groups != plan.key_groups {
            return Err(refuse(format!(
                "it has {} key groups and the manifest {} (`max_parallelism` is fixed for a pipeline's life)",
                m.key_groups, plan.key_groups
            )));
        }
        let planned: Vec<&crate::plan::OperatorNode> =
            plan.stages.iter().flat_map(|s| &s.operators).collect();
        for s in &m.snapshots {
            if !planned.iter().any(|op| op.name == s.operator) {
                return Err(refuse(format!(
                    "it holds state of operator `{}`, which the manifest no longer has",
                    s.operator
                )));
            }
        }
        for before in &m.operators {
            let Some(now) = planned.iter().find(|op| op.name == before.name) else {
                continue;
            };
            let world = match &now.kind {
                crate::plan::NodeKind::Plugin { plugin, .. } => Some(plugin.world().to_string()),
                crate::plan::NodeKind::Window { plugin, .. } => {
                    plugin.as_ref().map(|(p, _)| p.world().to_string())
                }
                crate::plan::NodeKind::Native(_) => None,
            };
            if before.world != world {
                return Err(refuse(format!(
                    "operator `{}` ran {} and now runs {}: its state cannot carry over",
                    before.name,
                    before
                        .world
                        .as_deref()
                        .map_or("no plugin".to_owned(), |w| format!("a `{w}` plugin")),
                    world
                        .as_deref()
                        .map_or("no plugin".to_owned(), |w| format!("a `{w}` plugin")),
                )));
            }
        }
        if m.manifest_hash != plan.manifest_hash {
            tracing::info!(
                checkpoint = m.id,
                "the manifest changed since this checkpoint; its state carries over"
            );
        }
        Ok(())
    }
}

impl Restore {
    /// The savepoint (or checkpoint) in `dir`, checked against `plan`.
    pub fn from_dir(plan: &crate::plan::Plan, dir: &Path) -> Result<Restore, RestoreError> {
        let metadata = read_metadata(dir).map_err(|reason| RestoreError::Incompatible {
            id: 0,
            dir: dir.display().to_string(),
            reason,
        })?;
        let restore = Restore {
            dir: dir.to_owned(),
            metadata,
        };
        restore.check(plan)?;
        Ok(restore)
    }
}
