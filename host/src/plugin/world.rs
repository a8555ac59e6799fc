//! The operator worlds of the `mailer:plugin` WIT package.

use std::fmt;

/// One world of `wit/plugin.wit`: the kind of operator a plugin fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum World {
    /// One record in, one out.
    Map,
    /// Keep or drop each record.
    Filter,
    /// One record in, zero or more out.
    FlatMap,
    /// Fold each key's records into a host-held accumulator.
    Reduce,
    /// Keyed process function with host-held state and timers.
    Process,
    /// Window function over all of a window's records.
    Window,
    /// Incremental window aggregate (create / add / merge / finish).
    Aggregate,
    /// The output of a join's pairs.
    Join,
    /// Keyed process function of two inputs.
    CoProcess,
}

impl World {
    /// Every world.
    pub const ALL: [World; 9] = [
        World::Map,
        World::Filter,
        World::FlatMap,
        World::Reduce,
        World::Process,
        World::Window,
        World::Aggregate,
        World::Join,
        World::CoProcess,
    ];

    /// The world's name in WIT.
    pub fn wit_name(self) -> &'static str {
        match self {
            World::Map => "map",
            World::Filter => "filter",
            World::FlatMap => "flat-map",
            World::Reduce => "reduce",
            World::Process => "process",
            World::Window => "window",
            World::Aggregate => "aggregate",
            World::Join => "join",
            World::CoProcess => "co-process",
        }
    }

    /// The operator `type` in a manifest that takes a plugin of this world.
    pub fn manifest_type(self) -> &'static str {
        match self {
            World::Map => "map",
            World::Filter => "filter",
            World::FlatMap => "flat_map",
            World::Reduce => "reduce",
            World::Process => "process",
            World::Window | World::Aggregate => "window",
            World::Join => "interval_join",
            World::CoProcess => "co_process",
        }
    }

    /// Whether a plugin of world `actual` fits an operator that takes this
    /// world (a window operator takes a window or an aggregate plugin).
    pub fn accepts(self, actual: World) -> bool {
        self == actual || (self == World::Window && actual == World::Aggregate)
    }

    /// The name of the export that identifies the world (the batch export
    /// where there is one).
    pub fn identifying_export(self) -> &'static str {
        match self {
            World::Map => "map-batch",
            World::Filter => "filter-batch",
            World::FlatMap => "flat-map-batch",
            World::Reduce => "reduce-batch",
            World::Process => "process-batch",
            World::Window => "window-batch",
            World::Aggregate => "finish",
            World::Join => "join-batch",
            World::CoProcess => "co-process-batch",
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wit_name())
    }
}
