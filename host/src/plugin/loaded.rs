//! A compiled, type-checked plugin, ready to be instantiated per worker.

use super::engine::{HostState, PluginEngine};
use super::generated::{aggregate, co_process, filter, flat_map, join, map, process, reduce, window};
use super::{Declared, PluginError, World};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// The pre-linked instance of one world.
#[derive(Clone)]
pub(super) enum WorldPre {
    Map(map::MapPre<HostState>),
    Filter(filter::FilterPre<HostState>),
    FlatMap(flat_map::FlatMapPre<HostState>),
    Reduce(reduce::ReducePre<HostState>),
    Process(process::ProcessPre<HostState>),
    Window(window::WindowPre<HostState>),
    Aggregate(aggregate::AggregatePre<HostState>),
    Join(join::JoinPre<HostState>),
    CoProcess(co_process::CoProcessPre<HostState>),
}

/// A plugin compiled once and checked against its operator's world.
pub struct LoadedPlugin {
    path: PathBuf,
    digest: String,
    world: World,
    size: usize,
    declared: Option<Declared>,
    states: Option<std::collections::BTreeSet<String>>,
    migrates: bool,
    fueled: bool,
    pub(super) engine: Engine,
    pub(super) pre: WorldPre,
}

impl LoadedPlugin {
    pub(super) fn load(
        engine: &PluginEngine,
        path: &Path,
        expected: World,
        operator: &str,
        fueled: bool,
    ) -> Result<Self, PluginError> {
        let (wasm_engine, linker) = engine.compiler(fueled);
        let shown = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| PluginError::Read {
            path: shown.clone(),
            source,
        })?;
        let digest = hex::encode(Sha256::digest(&bytes));
        let component = Component::new(wasm_engine, &bytes).map_err(|e| PluginError::Compile {
            path: shown.clone(),
            reason: format!("{e:#}").split_whitespace().collect::<Vec<_>>().join(" "),
        })?;
        let actual = detect_world(wasm_engine, &component, &shown)?;
        let migrates = component
            .component_type()
            .exports(wasm_engine)
            .any(|(name, _)| name == MIGRATE);
        if !expected.accepts(actual) {
            return Err(PluginError::WrongWorld {
                path: shown,
                operator: operator.to_owned(),
                expected,
                actual,
                actual_type: actual.manifest_type(),
            });
        }
        let link = |e: wasmtime::Error| PluginError::Link {
            path: shown.clone(),
            reason: format!("{e:#}"),
        };
        let pre = linker.instantiate_pre(&component).map_err(link)?;
        let pre = match actual {
            World::Map => WorldPre::Map(map::MapPre::new(pre).map_err(link)?),
            World::Filter => WorldPre::Filter(filter::FilterPre::new(pre).map_err(link)?),
            World::FlatMap => WorldPre::FlatMap(flat_map::FlatMapPre::new(pre).map_err(link)?),
            World::Reduce => WorldPre::Reduce(reduce::ReducePre::new(pre).map_err(link)?),
            World::Process => WorldPre::Process(process::ProcessPre::new(pre).map_err(link)?),
            World::Window => WorldPre::Window(window::WindowPre::new(pre).map_err(link)?),
            World::Aggregate => WorldPre::Aggregate(aggregate::AggregatePre::new(pre).map_err(link)?),
            World::Join => WorldPre::Join(join::JoinPre::new(pre).map_err(link)?),
            World::CoProcess => WorldPre::CoProcess(co_process::CoProcessPre::new(pre).map_err(link)?),
        };
        Ok(Self {
            path: path.to_owned(),
            digest,
            world: actual,
            size: bytes.len(),
            declared: super::version::declared(&bytes),
            states: super::version::declared_states(&bytes),
            migrates,
            fueled,
            engine: wasm_engine.clone(),
            pre,
        })
    }

    /// The file it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the component's bytes, in hex.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The world it implements.
    pub fn world(&self) -> World {
        self.world
    }

    /// The component's size in bytes.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Whether it was compiled to count fuel.
    pub fn fueled(&self) -> bool {
        self.fueled
    }

    /// The name and version it declares, if any.
    pub fn declared(&self) -> Option<&Declared> {
        self.declared.as_ref()
    }

    /// The version of the shape of the keyed state it writes: what it
    /// declares, 1 when it declares none.
    pub fn state_version(&self) -> u32 {
        self.declared.as_ref().and_then(|d| d.state_version).unwrap_or(1)
    }

    /// Whether it exports `migrate` (the migrating process and co-process
    /// worlds): it can bring state of an older state version to its own.
    pub fn migrates(&self) -> bool {
        self.migrates
    }

    /// The keyed states it declares it uses, if it declares them.
    pub fn states(&self) -> Option<&std::collections::BTreeSet<String>> {
        self.states.as_ref()
    }
}

/// The export of the migrating worlds that brings a state value to the
/// plugin's state version.
pub(super) const MIGRATE: &str = "migrate";

/// The world a component implements, told by its batch export.
fn detect_world(engine: &Engine, component: &Component, path: &str) -> Result<World, PluginError> {
    let ty = component.component_type();
    let exports: Vec<&str> = ty.exports(engine).map(|(name, _)| name).collect();
    World::ALL
        .into_iter()
        .find(|w| exports.contains(&w.identifying_export()))
        .ok_or_else(|| PluginError::NoWorld {
            path: path.to_owned(),
            exports: if exports.is_empty() {
                "none".to_owned()
            } else {
                exports.join(", ")
            },
        })
}
