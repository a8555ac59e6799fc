//! Running a plan the way `mailer run` does: the pipeline's folders locked
//! for this process, the run resumed from where its checkpoints say (or as
//! asked), the plugins swapped in before a checkpoint restored, the admin
//! API up when configured.

use crate::admin::{AdminServer, AdminState};
use crate::checkpoint::{LockError, Restore, RestoreError, StartFrom};
use crate::connectors::ConnectorError;
use crate::plan::Plan;
use crate::plugin::{PluginEngine, PluginError};
use crate::runtime::{Control, RunError, RunReport, Shutdown, StageError};
use crate::swap::{Probation, Swaps};
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
    StateVersion(#[from] crate::plan::StateVersionError),
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

/// Runs `plan` from `start` until its sources end or `shutdown` stops it,
/// taking the savepoints `control` asks for (and the admin API's swaps).
pub fn launch(
    mut plan: Plan,
    engine: PluginEngine,
    start: &StartFrom,
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
    let _locks = plan.lock_folders().map_err(|cause| LaunchError::Lock {
        pipeline: pipeline.clone(),
        cause,
    })?;
    plan.open_checkpoint_store().map_err(RestoreError::Store)?;
    plan.restore = Restore::resolve(&plan.restore_target(), start)?;
    if let Some(restore) = &mut plan.restore {
        restore.migrate_every_key = plan.migrate_every_key;
    }
    plan.use_swapped_plugins(&engine)?;
    plan.check_state_versions()?;
    let _admin = start_admin(&plan, &engine, shutdown, control)?;
    tracing::info!(pipeline = %pipeline, "pipeline started");
    crate::runtime::run_with(plan, shutdown, control).map_err(|cause| LaunchError::Run {
        pipeline,
        cause: Box::new(cause),
    })
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
    let mut swaps = Swaps::new(
        &plan.name,
        engine.clone(),
        (shutdown.clone(), control.clone()),
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
