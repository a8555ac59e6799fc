//! Starting a run from a plan, the way `mailer run` does: the pipeline's
//! folders locked for this process, its checkpoint store opened, the run
//! resumed from where its checkpoints say (or as asked), the plugins
//! swapped in before that checkpoint, their state versions checked, the
//! admin API up when configured, and in cluster mode the group joined. The
//! plan says what to run; all that a run starts from is decided here.

mod state_versions;
mod swapped;

pub use state_versions::StateVersionError;

use crate::admin::{AdminServer, AdminState};
use crate::checkpoint::{CheckpointStore, FolderLock, LockError, Restore, RestoreError, StartFrom};
use crate::connectors::ConnectorError;
use crate::plan::Plan;
use crate::plugin::{PluginEngine, PluginError};
use crate::runtime::{Control, RunError, RunReport, RunStart, Shutdown, StageError};
use crate::state::BackendKind;
use crate::swap::{Probation, Swaps};
use std::path::Path;
use std::sync::Arc;

/// Why a pipeline could not run to its end.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// Another process runs the pipeline (or its folders cannot be locked).
    #[error("pipeline `{pipeline}`: {cause}")]
    Lock {
        /// The pipeline.
        pipeline: String,
        /// Why.
        cause: LockError,
    },
    /// Where to start from cannot be decided without guessing.
    #[error(transparent)]
    Restore(#[from] RestoreError),
    /// A plugin swapped in before the checkpoint cannot be loaded.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A plugin cannot resume the state's state version.
    #[error(transparent)]
    StateVersion(#[from] StateVersionError),
    /// The admin API cannot listen.
    #[error("starting the admin API on {listen}: {cause}")]
    Admin {
        /// Where it was to listen.
        listen: std::net::SocketAddr,
        /// Why it cannot.
        cause: std::io::Error,
    },
    /// This process of the cluster failed.
    #[error("pipeline `{pipeline}` (cluster mode) failed: {cause}")]
    Cluster {
        /// The pipeline.
        pipeline: String,
        /// Why.
        cause: Box<crate::cluster::ClusterError>,
    },
    /// The run failed.
    #[error("pipeline `{pipeline}` failed: {cause}")]
    Run {
        /// The pipeline.
        pipeline: String,
        /// Why.
        cause: Box<RunError>,
    },
}

impl LaunchError {
    /// Whether a restart from the committed checkpoint cures the failure:
    /// the brokers aborted the Kafka sink's transaction for staying open
    /// past its timeout (the process was stopped or stalled), so its output
    /// must be written again.
    pub fn restart_cures(&self) -> bool {
        let LaunchError::Run { cause, .. } = self else {
            return false;
        };
        let aborted = |e: &ConnectorError| {
            matches!(
                e,
                ConnectorError::TransactionAborted { .. } | ConnectorError::TransactionAbortable { .. }
            )
        };
        match &**cause {
            RunError::Stage(StageError::Sink(e)) | RunError::Open { cause: e, .. } => aborted(e),
            _ => false,
        }
    }
}

/// How a run resumes keyed state a plugin wrote at another state version.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resume {
    /// Whether a plugin may resume state of a higher state version than it
    /// declares (`mailer run --force`).
    pub allow_state_downgrade: bool,
    /// Whether a process operator resuming state of an older state version
    /// migrates every key in the background (`mailer run --migrate eager`).
    pub migrate_every_key: bool,
}

/// Runs `plan` from `start` (its state resumed as `resume` says) until its
/// sources end or `shutdown` stops it, taking the savepoints `control`
/// asks for (and the admin API's swaps).
pub fn launch(
    mut plan: Plan,
    engine: PluginEngine,
    start: &StartFrom,
    resume: Resume,
    shutdown: &Shutdown,
    control: &Control,
) -> Result<RunReport, LaunchError> {
    let pipeline = plan.name.clone();
    // Its ticker times the plugins' deadlines: it lives as long as the run.
    let engine = Arc::new(engine);
    if plan.cluster.is_some() {
        // State lives in changelog topics, one process per task by the
        // group's assignment: no folder to lock, no checkpoint to resume.
        let admin = start_admin(&plan, &engine, shutdown, control)?;
        tracing::info!(pipeline = %pipeline, "pipeline started in cluster mode");
        let admin_addr = admin.as_ref().map(AdminServer::addr);
        return crate::cluster::run(plan, admin_addr, shutdown, control).map_err(|cause| {
            LaunchError::Cluster {
                pipeline,
                cause: Box::new(cause),
            }
        });
    }
    // Held for the whole run: nothing else may touch the state.
    let _locks = lock_folders(&plan).map_err(|cause| LaunchError::Lock {
        pipeline: pipeline.clone(),
        cause,
    })?;
    // Opened once for both restoring and the run's checkpoints: with a
    // bucket, opening lists it and reads every kept checkpoint's metadata.
    let store = plan
        .checkpoint
        .as_ref()
        .map(CheckpointStore::open_settings)
        .transpose()
        .map_err(RestoreError::Store)?;
    let mut restore = Restore::resolve(&plan.restore_target(store.as_ref()), start)?;
    if let Some(restore) = &mut restore {
        restore.migrate_every_key = resume.migrate_every_key;
    }
    let swapped_from = swapped::use_swapped_plugins(&mut plan, restore.as_ref(), store.as_ref(), &engine)?;
    state_versions::check_state_versions(&plan, restore.as_ref(), resume.allow_state_downgrade)?;
    let _admin = start_admin(&plan, &engine, shutdown, control)?;
    tracing::info!(pipeline = %pipeline, "pipeline started");
    let start = RunStart {
        store,
        restore,
        swapped_from,
    };
    crate::runtime::run_from(plan, start, shutdown, control).map_err(|cause| LaunchError::Run {
        pipeline,
        cause: Box::new(cause),
    })
}

/// Locks the folders `plan` keeps its state in (the checkpoint folder, the
/// RocksDB state folder) for this process, for as long as the locks live;
/// fails when another process runs the pipeline.
fn lock_folders(plan: &Plan) -> Result<Vec<FolderLock>, LockError> {
    let mut folders: Vec<&Path> = Vec::new();
    if let Some(c) = &plan.checkpoint {
        folders.push(&c.dir);
    }
    if let BackendKind::Rocks { dir, .. } = &plan.state {
        folders.push(dir);
    }
    crate::checkpoint::lock_all(&folders)
}

/// The admin API of `plan`, when it has `[admin]`: its swaps go to the
/// runtime (or the cluster engine) through `control`.
fn start_admin(
    plan: &Plan,
    engine: &Arc<PluginEngine>,
    shutdown: &Shutdown,
    control: &Control,
) -> Result<Option<AdminServer>, LaunchError> {
    let Some(admin) = &plan.admin else {
        return Ok(None);
    };
    let probation = Probation {
        records: admin.probation_records,
        share: admin.rollback_failure_share,
    };
    let run = shutdown.clone();
    let mut swaps = Swaps::new(
        &plan.name,
        engine.clone(),
        (Arc::new(move || run.is_cancelled()), control.swap_queue()),
        plan.plugin_store.clone(),
        probation,
        plan.key_groups,
        plan.plugin_operators(),
    );
    if plan.cluster.is_some() {
        swaps = swaps.with_fixed_state_versions();
    }
    let state = AdminState {
        token: Arc::from(admin.token.as_str()),
        swaps: Arc::new(swaps),
        telemetry: plan.telemetry.clone(),
        metrics: admin.metrics,
        metrics_need_token: admin.metrics_need_token,
        max_plugin_bytes: admin.max_plugin_bytes,
        allowed_hosts: admin.allowed_hosts.clone().into(),
        control: control.clone(),
        cluster: plan.cluster.is_some(),
    };
    let server =
        AdminServer::start(admin.listen, admin.tls.as_ref(), state).map_err(|cause| LaunchError::Admin {
            listen: admin.listen,
            cause,
        })?;
    Ok(Some(server))
}
