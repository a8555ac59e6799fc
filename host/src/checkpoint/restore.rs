//! Where a run starts: from exactly the checkpoint its sink committed, from
//! the newest complete one (sinks without commits), from one the user
//! names, from a savepoint, or from the beginning. Recovery never guesses:
//! when the sink and the checkpoint folder disagree, the run is refused
//! with what is missing and what the user can choose.

use super::CheckpointSettings;
use super::location::{BucketUrl, Location};
use super::metadata::{Metadata, OperatorMeta};
use super::remote::RemoteCheckpoints;
use super::store::{CheckpointStore, StoreError, read_metadata};
use std::path::PathBuf;

/// Asks a sink that commits with checkpoints which checkpoint's output it
/// last committed (`Some(0)`: none yet; `None`: it has no record).
pub type CommittedCheckpoint =
    Box<dyn Fn() -> Result<Option<u64>, Box<dyn std::error::Error + Send + Sync>> + Send + Sync>;

/// The pipeline a checkpoint is restored into, as far as restoring needs
/// to know it.
pub struct RestoreTarget<'a> {
    /// Its checkpoint settings, if it takes checkpoints.
    pub checkpoint: Option<&'a CheckpointSettings>,
    /// Its checkpoint store, opened from those settings.
    pub store: Option<&'a CheckpointStore>,
    /// Its sink's commit record, if the sink commits with checkpoints.
    pub committed: Option<&'a CommittedCheckpoint>,
    /// Its key groups (fixed for a pipeline's life).
    pub key_groups: u32,
    /// SHA-256 of its manifest.
    pub manifest_hash: &'a str,
    /// Its operators and the worlds of their plugins.
    pub operators: Vec<OperatorMeta>,
    /// Its sources' names, in order.
    pub sources: Vec<&'a str>,
}

/// What the user asked a run to start from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFrom {
    /// Where the pipeline's checkpoints (and its sink's commits) say.
    Resume,
    /// The beginning, ignoring the checkpoints.
    Fresh,
    /// This checkpoint of the pipeline's folder, chosen knowingly.
    Checkpoint(u64),
    /// A savepoint: its folder or bucket prefix.
    Savepoint(Location),
}

/// A checkpoint to resume from: its folder and what it holds.
#[derive(Debug, Clone)]
pub struct Restore {
    /// Its folder.
    pub dir: PathBuf,
    /// Its metadata.
    pub metadata: Metadata,
    /// Whether a process operator resuming state of an older state version
    /// migrates every key in the background (`mailer run --migrate
    /// eager`), not only each key when next handled.
    pub migrate_every_key: bool,
}

/// What to tell a user whose run cannot resume as it is.
const CHOICES: &str = "`mailer run --from-checkpoint <id>` resumes from a checkpoint you pick (output the sink committed after it is written again), `mailer run --fresh` starts from the source's start";

/// Why a pipeline cannot start where it was asked to.
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
    /// The sink committed a checkpoint's output that the folder no longer
    /// holds whole.
    #[error(
        "the sink committed the output of checkpoint {id}, but `{dir}` does not hold that checkpoint whole ({reason}): resuming from any other would write output twice or lose it. Restore the checkpoint folder, or choose: {CHOICES}"
    )]
    CommittedMissing {
        /// The committed checkpoint.
        id: u64,
        /// The checkpoint folder.
        dir: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The folder holds checkpoints, but the sink has no record of any.
    #[error(
        "`{dir}` holds checkpoints (newest: {newest}), but the sink has no record of having committed any (its commit record is gone, or it is a new topic or table): which output is in is unknown. Choose: {CHOICES}"
    )]
    CommitRecordLost {
        /// The checkpoint folder.
        dir: String,
        /// Its newest checkpoint.
        newest: u64,
    },
    /// A savepoint whose output and the sink's disagree.
    #[error(
        "the savepoint in `{dir}` was taken at checkpoint {savepoint}, but the sink committed the output of checkpoint {committed}: starting from it would write output twice or lose it. Take the savepoint with `mailer savepoint --stop` (the sink then commits exactly its output), or write to a new topic or table"
    )]
    SavepointMismatch {
        /// The savepoint's folder.
        dir: String,
        /// Its checkpoint id.
        savepoint: u64,
        /// The sink's committed checkpoint.
        committed: u64,
    },
    /// `--from-checkpoint` named a checkpoint the folder does not hold.
    #[error("checkpoint {id} cannot be used: {reason}")]
    NotUsable {
        /// The checkpoint.
        id: u64,
        /// Why.
        reason: String,
    },
}

impl Restore {
    /// The checkpoint `target` starts from as `start` asks, checked against
    /// the pipeline; `None` to start from the source's start.
    pub fn resolve(target: &RestoreTarget<'_>, start: &StartFrom) -> Result<Option<Restore>, RestoreError> {
        match start {
            StartFrom::Fresh => Ok(None),
            StartFrom::Savepoint(at) => Self::from_savepoint(target, at).map(Some),
            StartFrom::Checkpoint(id) => {
                let store = target.store.ok_or_else(|| RestoreError::NotUsable {
                    id: *id,
                    reason: "the manifest has no `[checkpoint]` section".into(),
                })?;
                let (dir, metadata) = store
                    .read(*id)
                    .map_err(|reason| RestoreError::NotUsable { id: *id, reason })?;
                tracing::warn!(
                    checkpoint = id,
                    "resuming from the checkpoint named by --from-checkpoint"
                );
                Self::checked(target, dir, metadata).map(Some)
            }
            StartFrom::Resume => Self::resume(target),
        }
    }

    fn checked(
        target: &RestoreTarget<'_>,
        dir: PathBuf,
        metadata: Metadata,
    ) -> Result<Restore, RestoreError> {
        let restore = Restore {
            dir,
            metadata,
            migrate_every_key: false,
        };
        restore.check(target)?;
        Ok(restore)
    }

    /// The checkpoint a restart resumes from: the one the sink committed
    /// when it commits with checkpoints, else the newest complete one.
    fn resume(target: &RestoreTarget<'_>) -> Result<Option<Restore>, RestoreError> {
        let Some(store) = target.store else {
            return Ok(None);
        };
        let Some(committed) = target.committed else {
            // The sink's output is rewound to the checkpoint (or not
            // rewindable): the newest checkpoint that reads back is right.
            return match store.latest()? {
                Some((dir, metadata)) => Self::checked(target, dir, metadata).map(Some),
                None => {
                    tracing::info!(at = %store.location(), "no checkpoint yet: starting from the source's start");
                    Ok(None)
                }
            };
        };
        let dir = store.location();
        match committed().map_err(|e| RestoreError::Sink(e.to_string()))? {
            None => match store.complete_ids()?.first() {
                None => Ok(None),
                Some(&newest) => Err(RestoreError::CommitRecordLost { dir, newest }),
            },
            Some(0) => {
                tracing::info!("the sink never committed a checkpoint's output: starting from the beginning");
                Ok(None)
            }
            Some(id) => match store.read(id) {
                Ok((path, metadata)) => Self::checked(target, path, metadata).map(Some),
                Err(reason) => Err(RestoreError::CommittedMissing { id, dir, reason }),
            },
        }
    }

    /// The savepoint at `at` (downloaded first from a bucket), checked
    /// against `target` and against the checkpoint its sink committed.
    fn from_savepoint(target: &RestoreTarget<'_>, at: &Location) -> Result<Restore, RestoreError> {
        let unusable = |reason| RestoreError::Incompatible {
            id: 0,
            dir: at.to_string(),
            reason,
        };
        let (dir, metadata) = match at {
            Location::Folder(dir) => (dir.clone(), read_metadata(dir).map_err(unusable)?),
            Location::Bucket(url) => Self::download_savepoint(target, url).map_err(unusable)?,
        };
        let restore = Self::checked(target, dir, metadata)?;
        if let Some(committed) = target.committed {
            match committed().map_err(|e| RestoreError::Sink(e.to_string()))? {
                Some(id) if id != restore.metadata.id => {
                    return Err(RestoreError::SavepointMismatch {
                        dir: at.to_string(),
                        savepoint: restore.metadata.id,
                        committed: id,
                    });
                }
                _ => {}
            }
        }
        Ok(restore)
    }

    /// The savepoint at `url`, downloaded into the checkpoint folder's
    /// `savepoint-download` (a temporary folder without one).
    fn download_savepoint(
        target: &RestoreTarget<'_>,
        url: &BucketUrl,
    ) -> Result<(PathBuf, Metadata), String> {
        let (into, s3) = match target.checkpoint {
            Some(c) => (c.dir.join("savepoint-download"), c.s3.clone()),
            None => (
                std::env::temp_dir().join(format!("mailer-savepoint-{}", std::process::id())),
                Default::default(),
            ),
        };
        if let Some(parent) = into.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("creating `{}`: {e}", parent.display()))?;
        }
        tracing::info!(savepoint = %url, into = %into.display(), "downloading the savepoint");
        let bucket = RemoteCheckpoints::savepoint(url, &s3).map_err(|e| e.to_string())?;
        let metadata = bucket.read_savepoint(&into)?;
        Ok((into, metadata))
    }

    /// Refuses a checkpoint whose state the pipeline cannot take over.
    pub fn check(&self, target: &RestoreTarget<'_>) -> Result<(), RestoreError> {
        let m = &self.metadata;
        let refuse = |reason: String| RestoreError::Incompatible {
            id: m.id,
            dir: self.dir.display().to_string(),
            reason,
        };
        if m.key_groups != target.key_groups {
            return Err(refuse(format!(
                "it has {} key groups and the manifest {} (`max_parallelism` is fixed for a pipeline's life)",
                m.key_groups, target.key_groups
            )));
        }
        m.positions_of(&target.sources).map_err(refuse)?;
        for s in &m.snapshots {
            if !target.operators.iter().any(|op| op.name == s.operator) {
                return Err(refuse(format!(
                    "it holds state of operator `{}`, which the manifest no longer has",
                    s.operator
                )));
            }
        }
        for before in &m.operators {
            let Some(now) = target.operators.iter().find(|op| op.name == before.name) else {
                continue;
            };
            let world = &now.world;
            if before.world != *world {
                let ran = |w: Option<&str>| w.map_or("no plugin".to_owned(), |w| format!("a `{w}` plugin"));
                return Err(refuse(format!(
                    "operator `{}` ran {} and now runs {}: its state cannot carry over",
                    before.name,
                    ran(before.world.as_deref()),
                    ran(world.as_deref()),
                )));
            }
        }
        if m.manifest_hash != target.manifest_hash {
            tracing::info!(
                checkpoint = m.id,
                "the manifest changed since this checkpoint; its state carries over"
            );
        }
        Ok(())
    }
}
