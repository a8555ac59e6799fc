//! Operators that run a Wasm plugin of the record worlds: map, filter and
//! flat-map ([`WasmStateless`]), reduce ([`WasmReduce`]) and process
//! ([`WasmProcess`]), with the retry of a failed batch record by record.

mod node;
mod process;
mod reduce;
mod retry;
mod stateless;
mod table;

pub use node::WasmNode;
pub use process::WasmProcess;
pub use reduce::WasmReduce;
pub use retry::fatal;
pub use stateless::{WasmPredicate, WasmStateless};
pub use table::{
    CoProcessSpec, FilterSpec, FlatMapSpec, MapSpec, PluginOperatorSpec, ProcessSpec, ReduceSpec,
};
