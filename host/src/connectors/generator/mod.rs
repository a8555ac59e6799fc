//! The `generator` source: the benchmark workloads' records, bounded or not.

mod config;
mod source;

pub use config::GeneratorSpec;
pub use source::{GeneratorSource, splitmix64};
