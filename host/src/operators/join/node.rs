//! How a join is made on each keyed worker: its state and its late
//! records' way out.

use super::{IntervalJoin, IntervalJoinSpec};
use crate::operators::factory::{InstanceContext, InstantiateError, OperatorIdentity};
use crate::operators::{LatePolicy, LateRecords, Operator};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// The interval join of a pipeline.
pub struct JoinNode {
    /// What it computes.
    pub spec: IntervalJoinSpec,
    /// Whether late records go to the late output (else they are dropped).
    pub side_output: bool,
    /// Late records, counted over all workers.
    pub late_records: Arc<AtomicU64>,
}

impl JoinNode {
    /// A new instance for one worker.
    pub fn instantiate(
        &self,
        node: &OperatorIdentity<'_>,
        ctx: &InstanceContext<'_>,
    ) -> Result<Box<dyn Operator>, InstantiateError> {
        let late = LatePolicy::choose(self.side_output, &ctx.late_output);
        let late = LateRecords::new(late, self.late_records.clone());
        let state = ctx.open_state(node.name)?;
        Ok(Box::new(IntervalJoin::new(node.name, self.spec, state, late)))
    }
}
