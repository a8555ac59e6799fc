//! Joins of two inputs: the interval join of two keyed streams, the
//! stream-table join, and the join with a global table (every worker's
//! copy). A join's input 0 is its left side (the stream), input 1 its right
//! side (the table).

mod emit;
mod global;
mod interval;
mod items;
mod lookup;
mod node;
mod output;
mod table;
mod timed;

pub use emit::{JoinEmitter, JoinPlugin};
pub use global::{GlobalJoin, GlobalJoinSpec};
pub use interval::{IntervalJoin, IntervalJoinSpec};
pub use lookup::{AsOf, LookupJoin, LookupJoinSpec};
pub use node::{JoinNode, JoinSpec};
pub use output::{JoinKind, Side};
pub use table::{IntervalJoinOperatorSpec, LookupJoinOperatorSpec};
