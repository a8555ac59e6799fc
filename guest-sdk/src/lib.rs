//! Write mailer stream operators as WebAssembly components: one attribute,
//! one function.
//!
//! A plugin is a `cdylib` crate built for `wasm32-wasip2`. Its author writes
//! the logic for one record; the SDK writes the component's exports, the batch
//! loop and the (de)serialisation. The same function is plain Rust on the
//! host target, so it is tested with `cargo test`:
//!
//! ```
//! use mailer_sdk::{operator, Record, Result};
//!
//! /// Lower-cases the URL of each click.
//! #[operator(map)]
//! fn normalize(mut rec: Record) -> Result<Record> {
//!     rec.value = rec.value.to_ascii_lowercase();
//!     Ok(rec)
//! }
//!
//! let out = normalize(Record::new("HTTP://Example.COM")).unwrap();
//! assert_eq!(out.value, b"http://example.com");
//! ```
//!
//! The operator kinds and the signature each expects:
//!
//! | attribute | function |
//! |---|---|
//! | `#[operator(map)]` | `fn(Record) -> Result<Record>` |
//! | `#[operator(filter)]` | `fn(&Record) -> Result<bool>` (true keeps the record) |
//! | `#[operator(flat_map)]` | `fn(Record) -> Result<Vec<Record>>` |
//! | `#[operator(reduce)]` | `fn(Option<&[u8]>, Record) -> Result<Vec<u8>>` (the key's accumulator, `None` at first; returns the new one) |
//!
//! An `Err` does not stop the pipeline by itself: the host applies the
//! operator's failure policy (`fail`, `skip`, `dead-letter`) to that record.
//!
//! Build a plugin with `cargo build --release --target wasm32-wasip2`; the
//! `.wasm` file in `target/wasm32-wasip2/release/` is the component to name in
//! a pipeline manifest.

extern crate self as mailer_sdk;

mod batch;
mod error;
mod pool;
mod record;

pub use error::{Error, Result};
pub use mailer_sdk_macros::operator;
pub use record::Record;

/// What the `#[operator]` attribute expands to refers to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::batch::{filter_batch, flat_map_batch, map_batch, reduce_batch};
    #[cfg(target_arch = "wasm32")]
    pub use crate::wit::*;
    pub use wit_bindgen;
}

#[cfg(target_arch = "wasm32")]
mod wit;
