//! Plugins: WebAssembly components run by wasmtime. Compiled once per file,
//! instantiated per worker from a pre-linked instance, called once per batch,
//! each call under a deadline and each instance under a memory limit.

mod calls;
mod captured;
mod engine;
mod generated;
mod instance;
mod keyed_imports;
mod limiter;
mod loaded;
mod log_import;
mod outcome;
mod sandbox;
pub mod store;
mod version;
mod world;

pub use calls::{CallStats, LATENCY_BUCKETS};
pub use engine::{EPOCH_TICK, PluginEngine};
pub use instance::{AggregateStep, CallError, CallMode, PluginInstance, PluginLimits, Sandbox};
pub use loaded::LoadedPlugin;
pub use outcome::{Outcome, OutcomeError, Outcomes, Raw, RecordOutcome};
pub use sandbox::{GRANTED_DIR, Grants};
pub use version::Declared;
pub use world::{World, WorldRow};

/// Why a plugin could not be loaded or instantiated.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    /// The file could not be read.
    #[error("cannot read plugin `{path}`: {source}")]
    Read {
        /// The plugin file.
        path: String,
        /// The operating system's error.
        source: std::io::Error,
    },
    /// The file is not a valid WebAssembly component.
    #[error("plugin `{path}` is not a valid WebAssembly component: {reason}")]
    Compile {
        /// The plugin file.
        path: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The component exports none of the mailer worlds.
    #[error(
        "plugin `{path}` exports none of the mailer:plugin worlds (map, filter, flat-map, reduce, process, window, aggregate, join, co-process); \
         its exports are: {exports}. Build it with the mailer SDK for one operator kind"
    )]
    NoWorld {
        /// The plugin file.
        path: String,
        /// The names it does export.
        exports: String,
    },
    /// The component exports another world than the operator needs.
    #[error(
        "plugin `{path}` implements the `{actual}` world, but operator `{operator}` is a `{expected}` \
         operator: use a `{expected}` plugin or change the operator's type to `{actual_type}`"
    )]
    WrongWorld {
        /// The plugin file.
        path: String,
        /// The operator's name.
        operator: String,
        /// The world the operator needs.
        expected: World,
        /// The world the plugin exports.
        actual: World,
        /// The manifest type matching the plugin's world.
        actual_type: &'static str,
    },
    /// The component imports something the host does not provide, or its
    /// exports do not have the world's types.
    #[error("plugin `{path}` cannot be linked: {reason}")]
    Link {
        /// The plugin file.
        path: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// A new instance could not be created.
    #[error("plugin `{path}` could not be instantiated: {reason}")]
    Instantiate {
        /// The plugin file.
        path: String,
        /// wasmtime's explanation.
        reason: String,
    },
    /// The wasmtime engine could not be set up.
    #[error("cannot set up the WebAssembly engine: {0}")]
    Engine(String),
    /// The plugin a checkpoint recorded as swapped in, which the run
    /// resumes with, cannot be had.
    #[error(
        "operator `{operator}` resumes from checkpoint {checkpoint} with plugin {digest}, swapped in before it, but {reason}"
    )]
    Swapped {
        /// The operator.
        operator: String,
        /// The checkpoint resumed.
        checkpoint: u64,
        /// The plugin's digest.
        digest: String,
        /// What is wrong, and where it was looked for.
        reason: String,
    },
}
