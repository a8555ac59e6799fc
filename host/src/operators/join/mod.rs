//! Joins of two inputs: the interval join of two keyed streams. A join's
//! input 0 is its left side, input 1 its right side.

mod interval;
mod node;
mod output;

pub use interval::{IntervalJoin, IntervalJoinSpec};
pub use node::JoinNode;
pub use output::{JoinKind, Side};
