//! The operator kinds a manifest can name: each `type = "…"` of an
//! `[[operators]]` table and the spec it parses into. Adding a kind is its
//! own folder or file (its spec implementing [`OperatorConfig`], its
//! operator and its tests) and one line here.

use super::branch::BranchOperatorSpec;
use super::builtin::{AggregateSpec, FieldFilterSpec, KeyBySpec, ProjectSpec, RenameSpec, SetSpec};
use super::config::OperatorConfig;
use super::join::{IntervalJoinOperatorSpec, LookupJoinOperatorSpec};
use super::sample::SampleSpec;
use super::wasm::{CoProcessSpec, FilterSpec, FlatMapSpec, MapSpec, ProcessSpec, ReduceSpec};
use super::window::WindowOperatorSpec;
use serde::Deserialize;

/// An enum of operator specs tagged by `type`, and its dispatch to
/// [`OperatorConfig`].
macro_rules! registry {
    ($(#[$meta:meta])* $name:ident { $($(#[$doc:meta])* $type:literal => $variant:ident($spec:ty),)* }) => {
        $(#[$meta])*
        #[derive(Debug, Deserialize)]
        #[serde(tag = "type")]
        pub enum $name {
            $($(#[$doc])* #[serde(rename = $type)] $variant(Box<$spec>),)*
        }

        impl $name {
            /// Its `type`.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => $type,)*
                }
            }

            /// The operator's table.
            pub fn config(&self) -> &dyn OperatorConfig {
                match self {
                    $(Self::$variant(spec) => spec.as_ref(),)*
                }
            }

            /// The operator's table, to fill its `${VAR}`s.
            pub fn config_mut(&mut self) -> &mut dyn OperatorConfig {
                match self {
                    $(Self::$variant(spec) => spec.as_mut(),)*
                }
            }
        }
    };
}

registry! {
    /// One operator: an `[[operators]]` table.
    OperatorSpec {
        /// A plugin of the `map` world.
        "map" => Map(MapSpec),
        /// A plugin of the `filter` world.
        "filter" => Filter(FilterSpec),
        /// A plugin of the `flat-map` world.
        "flat_map" => FlatMap(FlatMapSpec),
        /// A plugin of the `reduce` world; needs a `key_by` before it.
        "reduce" => Reduce(ReduceSpec),
        /// A plugin of the `process` world (keyed state and timers); needs
        /// a `key_by` before it.
        "process" => Process(ProcessSpec),
        /// A plugin of the `co-process` world: a keyed process function of
        /// two keyed streams (`left` and `right`).
        "co_process" => CoProcess(CoProcessSpec),
        /// Starts a keyed stage: records are spread over its workers by key.
        "key_by" => KeyBy(KeyBySpec),
        /// Windows with built-in aggregates or a plugin window function;
        /// needs a `key_by` before it.
        "window" => Window(WindowOperatorSpec),
        /// Keeps records whose JSON field compares true with a constant.
        "field_filter" => FieldFilter(FieldFilterSpec),
        /// Keeps only some fields of each JSON value.
        "project" => Project(ProjectSpec),
        /// Renames fields of each JSON value.
        "rename" => Rename(RenameSpec),
        /// Sets fields of each JSON value to constants.
        "set" => Set(SetSpec),
        /// Running count / sum / min / max / avg per key; needs a `key_by`
        /// before it.
        "aggregate" => Aggregate(AggregateSpec),
        /// Joins two keyed streams: records of equal keys whose times are
        /// within an interval of each other.
        "interval_join" => IntervalJoin(IntervalJoinOperatorSpec),
        /// Joins a stream with a table (a keyed changelog, or a global one).
        "lookup_join" => LookupJoin(LookupJoinOperatorSpec),
        /// Splits a stream into named outputs (`<name>.<branch>`).
        "branch" => Branch(BranchOperatorSpec),
        /// Keeps about 1 in N records, chosen by their hash.
        "sample" => Sample(SampleSpec),
    }
}
