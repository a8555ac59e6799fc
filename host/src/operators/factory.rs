//! What making an operator instance takes: the worker's context, the
//! operator's identity, and the error when it cannot be made. Each family
//! (`builtin`, `wasm`, `window`) makes its own instances from these.

use super::Operator;
use crate::checkpoint::Restore;
use crate::failure::{FailureHandler, SideOutput};
use crate::plugin::{CallStats, Grants, LoadedPlugin, PluginError, PluginInstance, PluginLimits, Sandbox};
use crate::state::{BackendKind, KeyedState, SnapshotSource, StateBackend, StateError};
use std::sync::Arc;

/// Why an operator instance could not be created.
#[derive(Debug, thiserror::Error)]
pub enum InstantiateError {
    /// Its plugin could not be instantiated.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// Its state backend could not be opened.
    #[error(transparent)]
    State(#[from] StateError),
}

/// Makes one native operator instance per worker.
pub type NativeFactory = Arc<
    dyn Fn(&InstanceContext<'_>, FailureHandler) -> Result<Box<dyn Operator>, InstantiateError> + Send + Sync,
>;

/// What an operator instance is given when a worker creates it.
pub struct InstanceContext<'a> {
    /// The dead-letter channel, if the pipeline has one.
    pub dead_letter: Option<SideOutput>,
    /// The late-record channel, if the pipeline has one.
    pub late_output: Option<SideOutput>,
    /// Where state lives.
    pub state: &'a BackendKind,
    /// The stage's name (names state folders).
    pub stage: &'a str,
    /// The worker's index in its stage.
    pub worker: usize,
    /// The operator's index in the pipeline (its state namespace).
    pub op_index: u16,
    /// The number of key groups.
    pub key_groups: u32,
    /// The stage's parallelism.
    pub parallelism: usize,
    /// The checkpoint to restore state from, if any.
    pub restore: Option<&'a Restore>,
    /// Opens each keyed operator's backend instead of `state` (cluster
    /// mode's tasks: backends recording their changes for the changelog).
    pub open_state: Option<&'a StateOpener<'a>>,
}

/// Opens the backend of the keyed operator named by its argument.
pub type StateOpener<'a> = dyn Fn(&str) -> Result<Box<dyn StateBackend>, StateError> + 'a;

impl InstanceContext<'_> {
    /// The keyed state of operator `operator` on this worker: fresh, or
    /// holding this worker's key groups from the checkpoint restored.
    pub fn open_state(&self, operator: &str) -> Result<KeyedState, StateError> {
        let backend = self.open_backend(operator, false)?;
        Ok(KeyedState::new(backend, self.op_index, self.key_groups))
    }

    /// The state of operator `operator` that every worker holds whole (a
    /// global table): fresh, or all of one worker's snapshot from the
    /// checkpoint restored (each worker's is the same), at any parallelism.
    pub fn open_replicated_state(&self, operator: &str) -> Result<KeyedState, StateError> {
        let backend = self.open_backend(operator, true)?;
        Ok(KeyedState::new(backend, self.op_index, self.key_groups))
    }

    fn open_backend(&self, operator: &str, replicated: bool) -> Result<Box<dyn StateBackend>, StateError> {
        if let Some(open) = self.open_state {
            return open(operator);
        }
        let stage = format!("{}-{operator}", self.stage);
        let Some(restore) = self.restore else {
            return self.state.open(&stage, self.worker);
        };
        let own = |s: &crate::checkpoint::SnapshotMeta| {
            s.parallelism == self.parallelism && s.worker == self.worker
        };
        let mut snapshots: Vec<_> = restore.metadata.of_operator(operator).collect();
        if replicated {
            // One copy: this worker's own when the parallelism is the same.
            snapshots.sort_by_key(|s| (!own(s), s.worker));
            snapshots.truncate(1);
        }
        let sources: Vec<SnapshotSource> = snapshots
            .into_iter()
            .map(|s| SnapshotSource {
                path: restore.dir.join(&s.path),
                backend: s.backend.clone(),
                same_key_groups: own(s),
            })
            .collect();
        if sources.is_empty() {
            return Err(StateError::Restore(format!(
                "checkpoint {} has no state for operator `{operator}`",
                restore.metadata.id
            )));
        }
        let (key_groups, parallelism, worker) = (self.key_groups, self.parallelism, self.worker);
        let owns = move |kg: u16| {
            replicated || crate::key_group::worker_of(u32::from(kg), key_groups, parallelism) == worker
        };
        self.state.restore(&stage, self.worker, &sources, &owns)
    }
}

/// The operator an instance is made for: its name and what all of its
/// workers share.
pub struct OperatorIdentity<'a> {
    /// Its unique name.
    pub name: &'a str,
    /// Its plugin calls, counted over all workers.
    pub calls: &'a Arc<CallStats>,
    /// What its plugin may reach.
    pub grants: &'a Arc<Grants>,
}

impl OperatorIdentity<'_> {
    /// An instance of `plugin` in this operator's sandbox, counting its calls.
    pub fn plugin_instance(
        &self,
        plugin: &Arc<LoadedPlugin>,
        limits: PluginLimits,
    ) -> Result<PluginInstance, PluginError> {
        let sandbox = Sandbox {
            operator: self.name.to_owned(),
            grants: self.grants.clone(),
        };
        Ok(PluginInstance::sandboxed(plugin.clone(), limits, sandbox)?.with_calls(self.calls.clone()))
    }
}
