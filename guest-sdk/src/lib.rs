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
//! | `#[operator(filter)]` | `fn(&Record) -> Result<bool>` (true keeps the record); with `RecordView<'_>` instead, each record is read where it lies in the batch, never copied (fastest) |
//! | `#[operator(flat_map)]` | `fn(Record) -> Result<Vec<Record>>` |
//! | `#[operator(reduce)]` | `fn(Option<&[u8]>, Record) -> Result<Vec<u8>>` (the key's accumulator, `None` at first; returns the new one); with `&Record` instead, the SDK reuses each record's buffers (faster); with `RecordView<'_>`, records are read in place (fastest) |
//! | `#[operator(process)]` or `#[operator(process, on_timer = f)]` | `fn(Record, handles…) -> Result<()>` |
//! | `#[operator(timer)]` (the `on_timer` of a process operator) | `fn(Timer, handles…) -> Result<()>` |
//! | `state_version = n, migrate = m` added to a process or co-process operator's attribute (its state changed shape) | `m`: `fn(u32, &str, Vec<u8>) -> Result<Vec<u8>>`: one stored value of a state, written by an older state version, in this version's shape (see docs/sdk.md) |
//! | `#[operator(co_process, right = g)]` (optionally `on_timer = f`) and `#[operator(right)]` on `g` | `fn(Record, handles…) -> Result<()>` each: the left input's and the right input's records, sharing the key's state and timers |
//! | `#[operator(join)]` | `fn(Option<Record>, Option<Record>) -> Result<Vec<Record>>` (a join's pair: left and right, one absent for an unmatched record; for a stream-table join, the stream record and the table row) |
//! | `#[operator(window)]` | `fn(Option<&[u8]>, Window, Vec<Record>, &mut Emit) -> Result<()>` (a window's key, bounds and records) |
//! | `#[operator(aggregate)]` on `impl Aggregate for T` | see [`Aggregate`] |
//!
//! A process operator runs after a `key_by`. Its handles are any of
//! `&mut ValueState<T>`, `&mut ListState<T>`, `&mut MapState<K, V>`,
//! `&mut Timers` and `&mut Emit`, in any order: each state is the current
//! key's, named after its parameter, kept by the host (so it is
//! checkpointed and survives an upgrade of the plugin), never by the plugin:
//!
//! ```
//! use mailer_sdk::{operator, Emit, Record, Result, ValueState};
//!
//! #[operator(process)]
//! fn count(rec: Record, state: &mut ValueState<u64>, out: &mut Emit) -> Result<()> {
//!     let n = state.get()?.unwrap_or(0) + 1;
//!     state.set(&n)?;
//!     if n % 100 == 0 {
//!         out.emit(rec.key(), n.to_string())?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! `#[operator(process)]` also makes `count_operator()`, which
//! [`testing::Harness`] runs natively with in-memory state and a fake clock.
//!
//! An `Err` does not stop the pipeline by itself: the host applies the
//! operator's failure policy (`fail`, `skip`, `dead-letter`) to that record.
//!
//! Build a plugin with `cargo build --release --target wasm32-wasip2`; the
//! `.wasm` file in `target/wasm32-wasip2/release/` is the component to name in
//! a pipeline manifest.
//!
//! The guide to every world, keyed state, timers and the harness, with
//! examples in Rust, Python and JavaScript, is `docs/sdk.md` in the mailer
//! repository; its Rust examples run as doctests of this crate.

extern crate self as mailer_sdk;

mod batch;
mod emit;
mod error;
mod host;
mod keyed;
pub mod log;
mod pool;
mod record;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;
mod timers;
mod view;
mod window;

pub use emit::{CoProcessOperator, Emit, ProcessOperator};
pub use error::{Error, Result};
pub use keyed::{ListState, MapState, Named, ValueState};
pub use mailer_sdk_macros::operator;
pub use record::{Record, parse_i64, write_i64};
pub use timers::{TimeDomain, Timer, Timers};
pub use view::RecordView;
pub use window::{Aggregate, Window};

/// What the `#[operator]` attribute expands to refers to; not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::batch::{
        co_process_batch, filter_batch, filter_batch_view, flat_map_batch, join_batch, map_batch,
        process_batch, reduce_batch, reduce_batch_by_ref, reduce_batch_view,
    };
    pub use crate::emit::no_timer;
    pub use crate::window::{
        aggregate_add, aggregate_add_batch, aggregate_create, aggregate_finish, aggregate_finish_batch,
        aggregate_merge, window_batch,
    };
    #[cfg(target_arch = "wasm32")]
    pub use crate::wit::*;
    pub use wit_bindgen;

    /// Puts the plugin crate's `name@version` into the component as the
    /// custom section `mailer-plugin`, where the host reads the version it
    /// shows (in the admin API and the metrics); with a state version, a
    /// second line `state_version=<n>` (see `#[operator(process,
    /// state_version = n)]`).
    #[macro_export]
    #[doc(hidden)]
    macro_rules! __plugin_version {
        () => {
            $crate::__plugin_version!(@section concat!(env!("CARGO_PKG_NAME"), "@", env!("CARGO_PKG_VERSION")));
        };
        ($state_version:literal) => {
            $crate::__plugin_version!(@section concat!(
                env!("CARGO_PKG_NAME"),
                "@",
                env!("CARGO_PKG_VERSION"),
                "\nstate_version=",
                $state_version
            ));
        };
        (@section $id:expr) => {
            const _: () = {
                const ID: &str = $id;
                #[cfg(target_arch = "wasm32")]
                #[used]
                #[unsafe(link_section = "mailer-plugin")]
                static VERSION: [u8; ID.len()] = {
                    let mut out = [0u8; ID.len()];
                    let mut i = 0;
                    while i < out.len() {
                        out[i] = ID.as_bytes()[i];
                        i += 1;
                    }
                    out
                };
            };
        };
    }
}

#[cfg(target_arch = "wasm32")]
mod wit;

/// The examples of docs/sdk.md, run as doctests (`cargo test -p mailer-sdk
/// --doc`): every `rust` block there is a test of this crate.
#[cfg(doctest)]
#[doc = include_str!("../../docs/sdk.md")]
pub struct SdkGuide;
