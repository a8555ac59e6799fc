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
}

impl World {
    /// Every world.
    pub const ALL: [World; 5] = [
        World::Map,
        World::Filter,
        World::FlatMap,
        World::Reduce,
        World::Process,
    ];

    /// The world's name in WIT.
    pub fn wit_name(self) -> &'static str {
        match self {
            World::Map => "map",
            World::Filter => "filter",
            World::FlatMap => "flat-map",
            World::Reduce => "reduce",
            World::Process => "process",
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
        }
    }

    /// The name of the world's batch export, which identifies it.
    pub fn batch_export(self) -> &'static str {
        match self {
            World::Map => "map-batch",
            World::Filter => "filter-batch",
            World::FlatMap => "flat-map-batch",
            World::Reduce => "reduce-batch",
            World::Process => "process-batch",
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wit_name())
    }
}
