//! mailer: a stream processing engine whose operators are sandboxed
//! WebAssembly components.
//!
//! A pipeline is a TOML manifest ([`manifest`]) or built in Rust
//! ([`Pipeline`]), planned into stages ([`plan`]) and run by the stage
//! engine ([`runtime`]): sources and sinks ([`connectors`]) at the ends,
//! operators ([`operators`]) in between, the user's logic in plugins
//! ([`plugin`]) or native closures. See [`pipeline`] for an example.

pub mod admin;
#[cfg(feature = "jemalloc")]
mod allocator;
pub mod batch;
pub mod checkpoint;
pub mod clock;
pub mod cluster;
pub mod config_problem;
pub mod config_string;
pub mod connectors;
pub mod failure;
pub mod json;
pub mod key_group;
pub mod launch;
pub mod manifest;
pub mod metrics;
pub mod operators;
pub mod pipeline;
pub mod pipeline_test;
pub mod plan;
pub mod plugin;
pub mod progress;
pub mod record;
pub mod replay;
pub mod runtime;
pub mod scaffold;
pub mod state;
pub mod swap;
pub mod tap;

pub use pipeline::Pipeline;
