//! How a join is made on each keyed worker: its state and its late
//! records' way out.

use super::{GlobalJoin, GlobalJoinSpec, IntervalJoin, IntervalJoinSpec, LookupJoin, LookupJoinSpec};
use super::{JoinEmitter, JoinPlugin};
use crate::failure::FailureHandler;
use crate::operators::factory::{InstanceContext, InstantiateError, OperatorIdentity};
use crate::operators::{LateRecords, Operator};
use crate::plugin::{CallMode, LoadedPlugin, PluginLimits};
use crate::swap::PluginSlot;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// Which join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinSpec {
    /// Of two keyed streams, by time interval.
    Interval(IntervalJoinSpec),
    /// Of a keyed stream with a table (a keyed changelog).
    Lookup(LookupJoinSpec),
    /// Of any stream with a global table (every worker reads all of it).
    Global(GlobalJoinSpec),
}

impl JoinSpec {
    /// The input whose records every worker gets: a global table's.
    pub fn broadcast_input(&self) -> Option<usize> {
        matches!(self, JoinSpec::Global(_)).then_some(1)
    }
}

/// A join of a pipeline.
pub struct JoinNode {
    /// What it computes.
    pub spec: JoinSpec,
    /// Whether late records go to the late output (else they are dropped).
    pub side_output: bool,
    /// Late records, counted over all workers.
    pub late_records: Arc<AtomicU64>,
    /// The `join`-world plugin making each pair's output (the JSON
    /// document of both sides without one), its limits and call mode.
    pub plugin: Option<(Arc<LoadedPlugin>, PluginLimits, CallMode)>,
}

impl JoinNode {
    /// A new instance for one worker.
    pub fn instantiate(
        &self,
        node: &OperatorIdentity<'_>,
        ctx: &InstanceContext<'_>,
        failure: FailureHandler,
    ) -> Result<Box<dyn Operator>, InstantiateError> {
        let late = LateRecords::for_worker(self.side_output, &ctx.late_output, self.late_records.clone());
        let plugin = match &self.plugin {
            None => None,
            Some((plugin, limits, mode)) => Some(JoinPlugin {
                name: node.name.to_owned(),
                slot: PluginSlot::new(node.name, node.plugin_instance(plugin, *limits)?),
                mode: *mode,
                failure: failure.clone(),
            }),
        };
        let emit = JoinEmitter::new(plugin);
        Ok(match &self.spec {
            JoinSpec::Interval(spec) => {
                let state = ctx.open_state(node.name)?;
                Box::new(IntervalJoin::new(node.name, *spec, state, late).with_emitter(emit))
            }
            JoinSpec::Lookup(spec) => {
                let state = ctx.open_state(node.name)?;
                Box::new(LookupJoin::new(node.name, *spec, state, late).with_emitter(emit))
            }
            JoinSpec::Global(spec) => {
                let state = ctx.open_replicated_state(node.name)?;
                Box::new(GlobalJoin::new(node.name, spec.clone(), state, failure)?.with_emitter(emit))
            }
        })
    }
}
