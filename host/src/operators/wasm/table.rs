//! The manifest tables of the operators whose logic is a plugin of a
//! record world: `map`, `filter`, `flat_map`, `reduce`, `process` (one
//! stream) and `co_process` (two keyed streams), all with the settings of
//! [`PluginOperatorSpec`].

use super::WasmNode;
use crate::clock::millis;
use crate::config_problem::ConfigProblem;
use crate::config_string::{ConfigString, ConfigStrings};
use crate::failure::FailurePolicy;
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, Shape};
use crate::operators::plugin_table::{self, GrantsSpec, defaults};
use crate::operators::{NodeKind, OperatorNode, Step};
use crate::plugin::{CallMode, World};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// An operator whose logic is a plugin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginOperatorSpec {
    /// The operator's name (unique in the pipeline); the plugin file's stem
    /// when absent.
    pub name: Option<String>,
    /// The component file, relative to the manifest's folder.
    pub plugin: ConfigString,
    /// What to do with a record the plugin fails on: `fail` (default),
    /// `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// `batch` (default: one call per batch) or `record` (one call per record).
    #[serde(default)]
    pub call: CallMode,
    /// How long one call may run before it is interrupted and counts as a
    /// failure.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel (about one unit per Wasm instruction) one call may burn;
    /// unlimited when absent. Counting fuel slows the plugin down.
    pub fuel: Option<u64>,
    /// The most records one input record may turn into; more fails that
    /// record.
    #[serde(default = "defaults::max_outputs_per_record")]
    pub max_outputs_per_record: u32,
    /// What the plugin may reach; nothing when absent.
    #[serde(default)]
    pub grants: GrantsSpec,
    /// Workers for a stateless operator before any `key_by` (default 1).
    /// After a `key_by`, operators run on its workers instead.
    pub parallelism: Option<usize>,
    /// `process` operators: how long each named state lives after its last
    /// write (`{ declines = "60s" }`); without an entry, state lives until
    /// the plugin clears it.
    #[serde(default)]
    pub state_ttl: BTreeMap<String, humantime_serde::Serde<Duration>>,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
    /// `co_process` operators: the keyed stream handed to `on-left`.
    pub left: Option<String>,
    /// `co_process` operators: the keyed stream handed to `on-right`.
    pub right: Option<String>,
}

impl PluginOperatorSpec {
    /// The checks every record world shares, for an operator of `world`.
    fn check_plugin(&self, cx: &CheckContext<'_>, world: World) -> Result<(), ConfigProblem> {
        self.check_state_ttl(world)?;
        cx.check_parallelism(self.parallelism)?;
        plugin_table::check_limits(self.timeout, self.memory_limit_mb)?;
        cx.check_policy(self.on_error)?;
        plugin_table::check_sandbox(cx, self.fuel, self.max_outputs_per_record, &self.grants)?;
        plugin_table::check_plugin_file(cx, &self.plugin).map(|_| ())
    }

    fn check_state_ttl(&self, world: World) -> Result<(), ConfigProblem> {
        if !self.state_ttl.is_empty() && !matches!(world, World::Process | World::CoProcess) {
            return Err(ConfigProblem::field(
                "state_ttl",
                "`state_ttl` is for `process` and `co_process` operators (only they have named state): remove it",
            ));
        }
        for (name, ttl) in &self.state_ttl {
            if name.len() > 255 {
                return Err(ConfigProblem::field(
                    "state_ttl",
                    format!("state name `{name:.40}…` is longer than 255 bytes"),
                ));
            }
            if ttl.is_zero() {
                return Err(ConfigProblem::field(
                    "state_ttl",
                    format!(
                        "the time-to-live of state `{name}` is zero: give a positive duration such as \"60s\""
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The node running the plugin, loaded for `world`.
    fn node(&self, cx: &BuildContext<'_>, world: World) -> Result<OperatorNode, ConfigProblem> {
        let plugin = plugin_table::load(cx, &self.plugin, world, self.fuel)?;
        let wasm = WasmNode {
            plugin,
            limits: plugin_table::limits(
                self.timeout,
                self.memory_limit_mb,
                self.fuel,
                self.max_outputs_per_record,
            ),
            mode: self.call,
            state_ttl: self
                .state_ttl
                .iter()
                .map(|(name, ttl)| (name.clone(), millis(**ttl)))
                .collect(),
        };
        let mut node = OperatorNode::new(cx.name, NodeKind::Plugin(wasm), self.on_error);
        node.grants = self.grants.grants(cx.dir);
        Ok(node)
    }

    fn config_strings(&mut self) -> ConfigStrings<'_> {
        let mut strings: ConfigStrings<'_> = vec![("plugin", &mut self.plugin)];
        strings.extend(self.grants.config_string());
        strings
    }
}

/// The operator kinds of the record worlds reading one stream: each a
/// [`PluginOperatorSpec`] whose plugin is of its world.
macro_rules! one_stream_worlds {
    ($($(#[$doc:meta])* $kind:ident: $world:ident, keyed: $keyed:literal, state: $state:literal;)*) => {$(
        $(#[$doc])*
        #[derive(Debug, Deserialize)]
        #[serde(transparent)]
        pub struct $kind(pub PluginOperatorSpec);

        impl OperatorConfig for $kind {
            fn name(&self) -> Option<&str> {
                self.0.name.as_deref()
            }

            fn default_name(&self) -> String {
                plugin_table::name_of_plugin(&self.0.plugin)
            }

            fn shape(&self) -> Shape<'_> {
                Shape::Stream {
                    input: self.0.input.as_ref(),
                    inputs: self.0.inputs.as_ref(),
                }
            }

            fn config_strings(&mut self) -> ConfigStrings<'_> {
                self.0.config_strings()
            }

            fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
                if $keyed {
                    cx.needs_keyed()?;
                }
                if let Some(key) = [("left", &self.0.left), ("right", &self.0.right)]
                    .into_iter()
                    .find_map(|(key, side)| side.as_ref().map(|_| key))
                {
                    return Err(ConfigProblem::field(
                        key,
                        "`left` and `right` are the inputs of a `co_process` (or a join): read one stream with `input`",
                    ));
                }
                self.0.check_plugin(cx, World::$world)
            }

            fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
                Ok(Step::Operator {
                    node: self.0.node(cx, World::$world)?,
                    parallelism: self.0.parallelism.unwrap_or(1),
                })
            }

            fn keeps_state(&self) -> bool {
                $state
            }
        }
    )*};
}

one_stream_worlds! {
    /// `map`: a plugin of the `map` world.
    MapSpec: Map, keyed: false, state: false;
    /// `filter`: a plugin of the `filter` world.
    FilterSpec: Filter, keyed: false, state: false;
    /// `flat_map`: a plugin of the `flat-map` world.
    FlatMapSpec: FlatMap, keyed: false, state: false;
    /// `reduce`: a plugin of the `reduce` world, after a `key_by`.
    ReduceSpec: Reduce, keyed: true, state: true;
    /// `process`: a plugin of the `process` world (keyed state and
    /// timers), after a `key_by`.
    ProcessSpec: Process, keyed: true, state: true;
}

/// `co_process`: a plugin of the `co-process` world, a keyed process
/// function of two keyed streams (`left` and `right`) sharing each key's
/// state and timers.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct CoProcessSpec(pub PluginOperatorSpec);

impl OperatorConfig for CoProcessSpec {
    fn name(&self) -> Option<&str> {
        self.0.name.as_deref()
    }

    fn default_name(&self) -> String {
        plugin_table::name_of_plugin(&self.0.plugin)
    }

    fn shape(&self) -> Shape<'_> {
        Shape::Sides {
            sides: [("left", self.0.left.as_ref()), ("right", self.0.right.as_ref())],
        }
    }

    fn config_strings(&mut self) -> ConfigStrings<'_> {
        self.0.config_strings()
    }

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        let p = &self.0;
        cx.check_sides()?;
        if p.input.is_some() || p.inputs.is_some() || p.parallelism.is_some() {
            return Err(ConfigProblem::field(
                "input",
                "a `co_process` reads `left` and `right` on their keyed workers: remove `input`, `inputs` and `parallelism`",
            ));
        }
        p.check_plugin(cx, World::CoProcess)
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        Ok(Step::Apart {
            node: self.0.node(cx, World::CoProcess)?,
            input_numbers: vec![0, 1],
            parallelism: 1,
            broadcast: None,
        })
    }

    fn keeps_state(&self) -> bool {
        true
    }
}
