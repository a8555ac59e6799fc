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

/// What mailer knows of one world: the host (loading and checking
/// plugins, naming operators), the scaffold (`mailer new-plugin`) and the
/// CLI all read this row; adding a world is one row here besides its WIT
/// and its operator.
pub struct WorldRow {
    /// The world.
    pub world: World,
    /// Its name in `wit/plugin.wit` (and as `--world` takes it).
    pub wit_name: &'static str,
    /// The world a Python or JavaScript build names for it (`map` is
    /// `map-plugin` there: see `wit/aliases.wit`).
    pub build_world: &'static str,
    /// The export that identifies it (its batch export where it has one).
    pub identifying_export: &'static str,
    /// The operator `type` in a manifest that runs a plugin of it.
    pub manifest_type: &'static str,
    /// Whether its operator runs after a `key_by`.
    pub keyed: bool,
    /// Whether its operator reads two keyed streams told apart.
    pub two_inputs: bool,
}

/// One row per world, in the order of [`World`]'s variants.
const ROWS: [WorldRow; 9] = [
    row(World::Map, "map", "map-plugin", "map-batch", "map", false, false),
    row(
        World::Filter,
        "filter",
        "filter",
        "filter-batch",
        "filter",
        false,
        false,
    ),
    row(
        World::FlatMap,
        "flat-map",
        "flat-map",
        "flat-map-batch",
        "flat_map",
        false,
        false,
    ),
    row(
        World::Reduce,
        "reduce",
        "reduce",
        "reduce-batch",
        "reduce",
        true,
        false,
    ),
    row(
        World::Process,
        "process",
        "process",
        "process-batch",
        "process",
        true,
        false,
    ),
    row(
        World::Window,
        "window",
        "window",
        "window-batch",
        "window",
        true,
        false,
    ),
    row(
        World::Aggregate,
        "aggregate",
        "aggregate",
        "finish",
        "window",
        true,
        false,
    ),
    row(
        World::Join,
        "join",
        "join",
        "join-batch",
        "interval_join",
        true,
        true,
    ),
    row(
        World::CoProcess,
        "co-process",
        "co-process",
        "co-process-batch",
        "co_process",
        true,
        true,
    ),
];

const fn row(
    world: World,
    wit_name: &'static str,
    build_world: &'static str,
    identifying_export: &'static str,
    manifest_type: &'static str,
    keyed: bool,
    two_inputs: bool,
) -> WorldRow {
    WorldRow {
        world,
        wit_name,
        build_world,
        identifying_export,
        manifest_type,
        keyed,
        two_inputs,
    }
}

impl World {
    /// Every world.
    pub const ALL: [World; 9] = {
        let mut all = [World::Map; 9];
        let mut i = 0;
        while i < all.len() {
            all[i] = ROWS[i].world;
            i += 1;
        }
        all
    };

    /// Its row of the table.
    pub fn row(self) -> &'static WorldRow {
        &ROWS[self as usize]
    }

    /// The world named `name` in WIT.
    pub fn from_wit_name(name: &str) -> Option<World> {
        ROWS.iter().find(|r| r.wit_name == name).map(|r| r.world)
    }

    /// The world's name in WIT.
    pub fn wit_name(self) -> &'static str {
        self.row().wit_name
    }

    /// The operator `type` in a manifest that takes a plugin of this world.
    pub fn manifest_type(self) -> &'static str {
        self.row().manifest_type
    }

    /// Whether a plugin of world `actual` fits an operator that takes this
    /// world (a window operator takes a window or an aggregate plugin).
    pub fn accepts(self, actual: World) -> bool {
        self == actual || (self == World::Window && actual == World::Aggregate)
    }

    /// The name of the export that identifies the world (the batch export
    /// where there is one).
    pub fn identifying_export(self) -> &'static str {
        self.row().identifying_export
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.wit_name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_world_has_its_own_row_found_by_its_name() {
        for (i, world) in World::ALL.into_iter().enumerate() {
            assert_eq!(world as usize, i);
            assert_eq!(world.row().world, world);
            assert_eq!(World::from_wit_name(world.wit_name()), Some(world));
        }
        assert_eq!(World::from_wit_name("nope"), None);
    }
}
