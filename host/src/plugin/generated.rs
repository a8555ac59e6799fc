//! Host bindings generated from `wit/plugin.wit`, one module per world.

/// The `map` world.
pub mod map {
    wasmtime::component::bindgen!({ world: "%map", path: "../wit" });
}

/// The `filter` world.
pub mod filter {
    wasmtime::component::bindgen!({ world: "filter", path: "../wit" });
}

/// The `flat-map` world.
pub mod flat_map {
    wasmtime::component::bindgen!({ world: "flat-map", path: "../wit" });
}

/// The `reduce` world.
pub mod reduce {
    wasmtime::component::bindgen!({ world: "reduce", path: "../wit" });
}

/// The `process` world: its `state` and `timers` imports trap on a failure.
pub mod process {
    wasmtime::component::bindgen!({
        world: "process",
        path: "../wit",
        imports: { default: trappable },
    });
}

/// The `window` world.
pub mod window {
    wasmtime::component::bindgen!({ world: "window", path: "../wit" });
}

/// The `aggregate` world.
pub mod aggregate {
    wasmtime::component::bindgen!({ world: "aggregate", path: "../wit" });
}
