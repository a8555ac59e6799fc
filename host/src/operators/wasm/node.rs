//! How an operator running a plugin of a record world is made on each
//! worker: the world picks the operator.

use super::{WasmProcess, WasmReduce, WasmStateless};
use crate::failure::FailureHandler;
use crate::operators::Operator;
use crate::operators::factory::{InstanceContext, InstantiateError, OperatorIdentity};
use crate::plugin::{CallMode, LoadedPlugin, PluginLimits, World};
use crate::state::KeyedContext;
use std::collections::HashMap;
use std::sync::Arc;

/// An operator running a plugin of the map, filter, flat-map, reduce or
/// process world.
pub struct WasmNode {
    /// The compiled plugin.
    pub plugin: Arc<LoadedPlugin>,
    /// Limits of each instance.
    pub limits: PluginLimits,
    /// How calls cross into it.
    pub mode: CallMode,
    /// Time-to-live in ms per state name (process plugins).
    pub state_ttl: HashMap<String, i64>,
}

impl WasmNode {
    /// A new instance for one worker.
    pub fn instantiate(
        &self,
        node: &OperatorIdentity<'_>,
        ctx: &InstanceContext<'_>,
        failure: FailureHandler,
    ) -> Result<Box<dyn Operator>, InstantiateError> {
        let instance = node.plugin_instance(&self.plugin, self.limits)?;
        let name = node.name;
        Ok(match self.plugin.world() {
            World::Reduce => {
                let state = ctx.open_state(name)?;
                Box::new(WasmReduce::new(name, instance, self.mode, failure, state))
            }
            World::Process | World::CoProcess => {
                let state = ctx.open_state(name)?;
                let keyed = KeyedContext::new(state, self.state_ttl.clone(), Arc::new(crate::clock::now_ms))
                    .with_call_limit(self.limits.memory_bytes);
                let mut process = WasmProcess::new(name, instance, keyed, self.mode, failure);
                if let Some(restore) = ctx.restore
                    && let Some(restored) = restore.metadata.state_versions_of(name)
                {
                    process =
                        process.with_unmarked_state_version(restored.unmarked, restore.migrate_every_key);
                }
                Box::new(process)
            }
            World::Map | World::Filter | World::FlatMap => {
                Box::new(WasmStateless::new(name, instance, self.mode, failure))
            }
            World::Window | World::Aggregate | World::Join => {
                unreachable!("window, aggregate and join plugins are loaded by windows and joins")
            }
        })
    }
}
