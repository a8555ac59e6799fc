//! Event-time windows: window assignment, incremental aggregates, window
//! functions (built-in or a plugin of the `window` or `aggregate` world),
//! and the window operator that fires them on watermarks.

mod aggregate;
mod assigner;
mod function;
mod node;
mod operator;
mod table;
mod wasm;

pub use aggregate::{Accumulator, AggregateKind, Number, needs_values, number_of};
pub use assigner::{Assigner, Window};
pub use function::{
    AccumulatorGroup, BuiltinAggregates, DueWindow, WindowFnError, WindowFunction, corrupt, emit_each,
};
pub use node::WindowNode;
pub use operator::{WindowOperator, WindowSpec};
pub use table::{TimeDomain, WindowKind, WindowOperatorSpec};
pub use wasm::{WasmAggregate, WasmWindow};
