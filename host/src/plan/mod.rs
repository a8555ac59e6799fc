//! Planning: a validated manifest becomes stages. Consecutive stateless
//! operators of equal parallelism share a stage; `key_by` starts a keyed
//! stage that runs every operator after it on its workers.

mod build;
mod describe;

pub use build::build;
pub use describe::describe;

use crate::connectors::{ConnectorError, Sink, Source};
use crate::operator::{DeadLetterSender, FailureHandler, FailurePolicy, FailureStats, Operator};
use crate::plugin::{
    CallMode, LoadedPlugin, PluginError, PluginInstance, PluginLimits, WasmReduce, WasmStateless, World,
};
use crate::runtime::Routing;
use std::sync::Arc;
use std::time::Duration;

/// Opens a source when the run starts.
pub type OpenSource = Box<dyn FnOnce() -> Result<Box<dyn Source>, ConnectorError> + Send>;
/// Opens a sink when the run starts.
pub type OpenSink = Box<dyn FnOnce() -> Result<Box<dyn Sink>, ConnectorError> + Send>;
/// Makes one native operator instance per worker.
pub type NativeFactory = Arc<dyn Fn() -> Box<dyn Operator> + Send + Sync>;

/// A pipeline ready to run.
pub struct Plan {
    /// The pipeline's name.
    pub name: String,
    /// SHA-256 of the manifest text.
    pub manifest_hash: String,
    /// Records per batch.
    pub batch_size: usize,
    /// Records an edge holds.
    pub edge_capacity: usize,
    /// Graceful drain limit.
    pub shutdown_timeout: Duration,
    /// The source.
    pub source: Endpoint<OpenSource>,
    /// The operator stages, in order.
    pub stages: Vec<OperatorStage>,
    /// The sink.
    pub sink: Endpoint<OpenSink>,
    /// The dead-letter sink, if any operator may need it.
    pub dead_letter: Option<Endpoint<OpenSink>>,
}

impl Plan {
    /// Messages an edge holds: `edge_capacity` records in batches of
    /// `batch_size`.
    pub fn edge_messages(&self) -> usize {
        (self.edge_capacity / self.batch_size).max(1)
    }
}

/// A source or sink: what it is, and how to open it.
pub struct Endpoint<F> {
    /// A one-line description (never holding a secret).
    pub description: String,
    /// Opens it.
    pub open: F,
}

/// One stage of operators.
pub struct OperatorStage {
    /// The stage's name.
    pub name: String,
    /// Workers.
    pub parallelism: usize,
    /// How records are spread over the workers.
    pub routing: Routing,
    /// The operators every worker runs, in order.
    pub operators: Vec<OperatorNode>,
}

/// One operator of a stage.
pub struct OperatorNode {
    /// Its unique name.
    pub name: String,
    /// What runs it.
    pub kind: NodeKind,
    /// What happens to records it fails on.
    pub policy: FailurePolicy,
    /// Counts shared by all of its workers.
    pub failures: Arc<FailureStats>,
}

/// What runs an operator.
pub enum NodeKind {
    /// A plugin.
    Plugin {
        /// The compiled plugin.
        plugin: Arc<LoadedPlugin>,
        /// Limits of each instance.
        limits: PluginLimits,
        /// How calls cross into it.
        mode: CallMode,
    },
    /// Native Rust (benchmarks, built-ins).
    Native(NativeFactory),
}

impl OperatorNode {
    /// A new instance for one worker.
    pub fn instantiate(
        &self,
        dead_letter: Option<DeadLetterSender>,
    ) -> Result<Box<dyn Operator>, PluginError> {
        let failure = FailureHandler::new(&self.name, self.policy, dead_letter, self.failures.clone());
        Ok(match &self.kind {
            NodeKind::Native(factory) => factory(),
            NodeKind::Plugin { plugin, limits, mode } => {
                let instance = PluginInstance::new(plugin.clone(), *limits)?;
                match plugin.world() {
                    World::Reduce => Box::new(WasmReduce::new(&self.name, instance, *mode, failure)),
                    _ => Box::new(WasmStateless::new(&self.name, instance, *mode, failure)),
                }
            }
        })
    }
}
