//! How a window operator is made on each worker: its state, its late
//! records' way out, and its function (built-in aggregates, or a plugin of
//! the `window` or `aggregate` world).

use super::{WasmAggregate, WasmWindow, WindowFunction, WindowOperator, WindowSpec};
use crate::failure::FailureHandler;
use crate::operators::factory::{InstanceContext, InstantiateError, OperatorIdentity};
use crate::operators::{LateRecords, Operator};
use crate::plugin::{LoadedPlugin, PluginInstance, PluginLimits, World};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The window operator of a pipeline.
pub struct WindowNode {
    /// What it computes.
    pub spec: WindowSpec,
    /// The plugin of the window or aggregate world computing each result,
    /// instead of the spec's built-in aggregates.
    pub plugin: Option<(Arc<LoadedPlugin>, PluginLimits)>,
    /// Whether late records go to the late output.
    pub side_output: bool,
    /// Late records, counted over all workers.
    pub late_records: Arc<AtomicU64>,
}

impl WindowNode {
    /// A new instance for one worker.
    pub fn instantiate(
        &self,
        node: &OperatorIdentity<'_>,
        ctx: &InstanceContext<'_>,
        failure: FailureHandler,
    ) -> Result<Box<dyn Operator>, InstantiateError> {
        let state = ctx.open_state(node.name)?;
        let late = LateRecords::for_worker(self.side_output, &ctx.late_output, self.late_records.clone());
        let op = WindowOperator::new(node.name, self.spec.clone(), state, late, failure);
        let Some((plugin, limits)) = &self.plugin else {
            return Ok(Box::new(op));
        };
        let instance = PluginInstance::new(plugin.clone(), *limits)?.with_calls(node.calls.clone());
        let function: Box<dyn WindowFunction> = match plugin.world() {
            World::Aggregate => Box::new(WasmAggregate::new(node.name, instance)),
            _ => Box::new(WasmWindow::new(node.name, instance)),
        };
        Ok(Box::new(op.with_function(function)))
    }
}
