//! Host bindings generated from `wit/plugin.wit`, one module per world.
//! The interfaces every world shares (`types`, `log`, and the `state` and
//! `timers` of the process world) are generated once, in [`process`]; the
//! other worlds take them from there (bindgen's `with`), so a record has one
//! host type whatever world it crosses into.

/// The `process` world: its `state` and `timers` imports trap on a failure.
pub mod process {
    wasmtime::component::bindgen!({
        world: "process",
        path: "../wit",
        imports: { default: trappable },
    });
}

/// The `map`, `filter`, `flat-map`, `reduce`, `window`, `aggregate` and
/// `join` worlds, on the shared interfaces of [`process`].
macro_rules! world {
    ($(#[$doc:meta])* $module:ident, $world:literal) => {
        $(#[$doc])*
        pub mod $module {
            wasmtime::component::bindgen!({
                world: $world,
                path: "../wit",
                with: {
                    "mailer:plugin/types": crate::plugin::generated::process::mailer::plugin::types,
                    "mailer:plugin/log": crate::plugin::generated::process::mailer::plugin::log,
                },
            });
        }
    };
}

world!(
    /// The `map` world.
    map,
    "%map"
);
world!(
    /// The `filter` world.
    filter,
    "filter"
);
world!(
    /// The `flat-map` world.
    flat_map,
    "flat-map"
);
world!(
    /// The `reduce` world.
    reduce,
    "reduce"
);
world!(
    /// The `window` world.
    window,
    "window"
);
world!(
    /// The `aggregate` world.
    aggregate,
    "aggregate"
);
world!(
    /// The `join` world.
    join,
    "join"
);

/// The `co-process` world, on the shared interfaces of [`process`]
/// (state and timers included).
pub mod co_process {
    wasmtime::component::bindgen!({
        world: "co-process",
        path: "../wit",
        with: {
            "mailer:plugin/types": crate::plugin::generated::process::mailer::plugin::types,
            "mailer:plugin/log": crate::plugin::generated::process::mailer::plugin::log,
            "mailer:plugin/state": crate::plugin::generated::process::mailer::plugin::state,
            "mailer:plugin/timers": crate::plugin::generated::process::mailer::plugin::timers,
        },
    });
}

/// The record type every world shares.
pub use process::mailer::plugin::types::{Header, Record};
