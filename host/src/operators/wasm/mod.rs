//! Operators that run a Wasm plugin of the record worlds: map, filter and
//! flat-map ([`WasmStateless`]), reduce ([`WasmReduce`]) and process
//! ([`WasmProcess`]), with the retry of a failed batch record by record.

mod migrate;
mod node;
mod process;
mod reduce;
mod retry;
mod stateless;
mod table;

pub use node::WasmNode;
pub use process::WasmProcess;
pub use reduce::WasmReduce;
pub use retry::fatal;
pub use stateless::{WasmPredicate, WasmStateless};
pub use table::{
    CoProcessSpec, FilterSpec, FlatMapSpec, MapSpec, PluginOperatorSpec, ProcessSpec, ReduceSpec,
};

use crate::failure::OperatorError;
use crate::plugin::{LoadedPlugin, PluginInstance};

/// A second instance of operator `name`'s `instance` running `plugin`, for
/// a `trial` (a shadow, a canary); `None` (logged) when it cannot start:
/// this worker then runs no trial and the pipeline goes on.
pub(crate) fn trial_instance(
    name: &str,
    instance: &PluginInstance,
    plugin: &std::sync::Arc<LoadedPlugin>,
    trial: &str,
) -> Option<PluginInstance> {
    instance
        .sibling(plugin.clone())
        .inspect_err(
            |e| tracing::warn!(operator = name, error = %e, "the {trial} cannot start in this worker"),
        )
        .ok()
}

/// Switches operator `name`'s `instance` to `plugin`, keeping its state.
pub(crate) fn swap_instance(
    name: &str,
    instance: &mut PluginInstance,
    plugin: &std::sync::Arc<LoadedPlugin>,
) -> Result<(), OperatorError> {
    let old = instance.swap(plugin.clone()).map_err(|e| OperatorError::Swap {
        operator: name.to_owned(),
        reason: e.to_string(),
    })?;
    tracing::debug!(
        operator = name,
        from = old.digest(),
        to = plugin.digest(),
        "plugin swapped"
    );
    Ok(())
}
