//! The wasmtime engine shared by every plugin of a process, its linker (WASI
//! with nothing granted) and the epoch ticker behind per-call deadlines.

use super::loaded::LoadedPlugin;
use super::{PluginError, World};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Config, Engine};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

/// One epoch tick: the granularity of call deadlines.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);

/// What a plugin instance's store holds.
pub struct HostState {
    pub(super) wasi: WasiCtx,
    pub(super) table: ResourceTable,
    /// What its memories and tables may hold.
    pub(super) budget: super::limiter::InstanceBudget,
    /// Keyed state and timers (process plugins only).
    pub(super) keyed: Option<crate::state::KeyedContext>,
    /// The operator, for the plugin's log lines.
    pub(super) operator: std::sync::Arc<str>,
    /// The `log` import's lines in the current call.
    pub(super) log: super::log_import::LogBudget,
}

impl super::log_import::LogView for HostState {
    fn log(&mut self) -> super::log_import::LogImport<'_> {
        super::log_import::LogImport {
            operator: &self.operator,
            budget: &mut self.log,
        }
    }
}

impl super::keyed_imports::KeyedView for HostState {
    fn keyed(&mut self) -> super::keyed_imports::KeyedImport<'_> {
        super::keyed_imports::KeyedImport(self.keyed.as_mut())
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// A wasmtime engine and its linker.
struct Compiler {
    engine: Engine,
    linker: Linker<HostState>,
}

impl Compiler {
    fn new(fuel: bool) -> Result<Self, PluginError> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .consume_fuel(fuel);
        #[cfg(feature = "profiling")]
        if std::env::var("MAILER_WASM_PROFILER").as_deref() == Ok("perfmap") {
            config.profiler(wasmtime::ProfilingStrategy::PerfMap);
        }
        let engine = Engine::new(&config).map_err(|e| PluginError::Engine(e.to_string()))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker).map_err(|e| PluginError::Engine(e.to_string()))?;
        super::keyed_imports::add_to_linker(&mut linker).map_err(|e| PluginError::Engine(e.to_string()))?;
        super::log_import::add_to_linker(&mut linker).map_err(|e| PluginError::Engine(e.to_string()))?;
        Ok(Self { engine, linker })
    }
}

/// Compiles and links plugins; one per process. Plugins of operators with
/// `fuel` are compiled by a second engine that counts it (counting costs
/// every instruction, so the others do without).
pub struct PluginEngine {
    plain: Compiler,
    fueled: Compiler,
    loaded: Mutex<HashMap<(std::path::PathBuf, World, bool), Arc<LoadedPlugin>>>,
    ticking: Arc<AtomicBool>,
}

impl PluginEngine {
    /// An engine with deadlines on and a linker offering WASI with no
    /// capability granted (no files, network, environment or arguments).
    pub fn new() -> Result<Self, PluginError> {
        let (plain, fueled) = (Compiler::new(false)?, Compiler::new(true)?);
        let ticking = Arc::new(AtomicBool::new(true));
        let engines = [plain.engine.clone(), fueled.engine.clone()];
        let flag = ticking.clone();
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engines.iter().for_each(Engine::increment_epoch);
                }
            })
            .map_err(|e| PluginError::Engine(e.to_string()))?;
        Ok(Self {
            plain,
            fueled,
            loaded: Mutex::default(),
            ticking,
        })
    }

    /// The wasmtime engine of plugins without fuel.
    pub fn engine(&self) -> &Engine {
        &self.plain.engine
    }

    /// The engine and linker for plugins with (`fuel`) or without fuel.
    pub(super) fn compiler(&self, fuel: bool) -> (&Engine, &Linker<HostState>) {
        let c = if fuel { &self.fueled } else { &self.plain };
        (&c.engine, &c.linker)
    }

    /// Loads the plugin at `path` for an operator of world `expected` named
    /// `operator`: compiled once per file, shared by every worker.
    pub fn load(
        &self,
        path: &Path,
        expected: World,
        operator: &str,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.load_with(path, expected, operator, false)
    }

    /// [`load`](Self::load) for an operator whose calls have `fuel`.
    pub fn load_fueled(
        &self,
        path: &Path,
        expected: World,
        operator: &str,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.load_with(path, expected, operator, true)
    }

    /// Loads with or without fuel counting.
    pub fn load_with(
        &self,
        path: &Path,
        expected: World,
        operator: &str,
        fuel: bool,
    ) -> Result<Arc<LoadedPlugin>, PluginError> {
        let key = (path.to_owned(), expected, fuel);
        if let Some(p) = self.loaded.lock().expect("plugin cache lock").get(&key) {
            return Ok(p.clone());
        }
        let plugin = Arc::new(LoadedPlugin::load(self, path, expected, operator, fuel)?);
        self.loaded
            .lock()
            .expect("plugin cache lock")
            .insert(key, plugin.clone());
        Ok(plugin)
    }
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.ticking.store(false, Ordering::Relaxed);
    }
}
