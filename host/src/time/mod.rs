//! Event time: watermarks from the sources, window assignment, incremental
//! aggregates, and the window operator that fires on watermarks.

mod aggregate;
mod assigner;
mod wasm_window;
mod watermark;
mod window_function;
mod window_operator;

pub use aggregate::{Accumulator, AggregateKind, Number, needs_values, number_of};
pub use assigner::{Assigner, Window, millis};
pub use wasm_window::{WasmAggregate, WasmWindow};
pub use watermark::WatermarkGenerator;
pub use window_function::{
    AccumulatorGroup, BuiltinAggregates, DueWindow, WindowFnError, WindowFunction, corrupt, emit_each,
};
pub use window_operator::{LatePolicy, WindowOperator, WindowSpec};
