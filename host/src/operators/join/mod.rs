//! Joins of two inputs: the interval join of two keyed streams, the
//! stream-table join, and the join with a global table (every worker's
//! copy). A join's input 0 is its left side (the stream), input 1 its right
//! side (the table).

mod emit;
mod global;
mod interval;
mod items;
mod keyed;
mod lookup;
mod node;
mod output;
mod table;
mod timed;

pub use emit::{JoinEmitter, JoinPlugin};
pub use global::{GlobalJoin, GlobalJoinSpec};
pub use interval::{IntervalJoin, IntervalJoinSpec};
pub use keyed::KeyedJoin;
pub use lookup::{AsOf, LookupJoin, LookupJoinSpec};
pub use node::{JoinNode, JoinSpec};
pub use output::{JoinKind, Side};
pub use table::{IntervalJoinOperatorSpec, LookupJoinOperatorSpec};

/// The [`Operator`](super::Operator) methods every join shares, for a type
/// with its `name`, its keyed `state` and its `emit`ter: a batch of its
/// one-input face is input 0's, a swap replaces the emitter's plugin, a
/// snapshot writes the state. `timed` adds those of a join that fires on
/// the watermark (its `time` and `fire`), the end firing everything left.
macro_rules! join_operator_methods {
    () => {
        fn name(&self) -> &str {
            &self.name
        }

        fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
            self.process_input(0, input)
        }

        fn plugin_slot(&mut self) -> Option<&mut crate::swap::PluginSlot> {
            self.emit.plugin_slot()
        }

        fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
            crate::operators::snapshot_state(&self.name, &mut self.state, dir)
        }
    };
    (timed) => {
        $crate::operators::join::join_operator_methods!();

        fn on_watermark(&mut self, watermark: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
            if let Some((from, upto)) = self.time.advance(watermark) {
                self.fire(from, upto, out)?;
            }
            self.emit.flush(out)
        }

        fn on_end(&mut self, out: &mut Vec<Record>) -> Result<(), OperatorError> {
            self.on_watermark(i64::MAX, out)
        }
    };
}
use join_operator_methods;
