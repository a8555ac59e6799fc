//! One plugin instance, owned by one worker: its store, its limits, and the
//! calls into it. A trap or a missed deadline poisons the instance; the next
//! call gets a fresh one from the pre-linked instance.

use super::CallStats;
use super::PluginError;
use super::captured::CapturedOutput;
use super::engine::HostState;
use super::generated::{Header as WitHeader, Record as WitRecord};
use super::generated::{aggregate, co_process, filter, flat_map, join, map, process, reduce, window};
use super::loaded::{LoadedPlugin, WorldPre};
use super::outcome::{Outcome, Outcomes, RecordOutcome};
use super::sandbox::Grants;
use crate::record::Record;
use crate::state::KeyedContext;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use wasmtime::component::{Func, ResourceTable};
use wasmtime::{Store, Trap};

/// How the host crosses into the plugin.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallMode {
    /// One call per batch through the flat encoding (fast).
    #[default]
    Batch,
    /// One typed call per record (for comparison and debugging).
    Record,
}

/// The limits of one instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PluginLimits {
    /// How long one call may run.
    pub timeout: Duration,
    /// The most its linear memories and tables may hold together, in bytes;
    /// also the most state one call may write or read.
    pub memory_bytes: usize,
    /// Fuel (roughly, Wasm instructions) one call may burn; unlimited when
    /// `None`. Only for a plugin loaded with fuel on
    /// ([`PluginEngine::load_fueled`](super::PluginEngine::load_fueled)).
    pub fuel: Option<u64>,
    /// The most records one input record may turn into (flat-map, process,
    /// window); more fails that record.
    pub max_outputs_per_record: u32,
}

impl Default for PluginLimits {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            fuel: None,
            max_outputs_per_record: 10_000,
        }
    }
}

/// Who an instance runs for and what it may reach.
#[derive(Debug, Clone, Default)]
pub struct Sandbox {
    /// The operator, named in the log lines of the plugin's output.
    pub operator: String,
    /// The WASI capabilities granted.
    pub grants: Arc<Grants>,
}

/// Why a call did not return a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call ran past its deadline and was interrupted.
    #[error("plugin call exceeded its deadline of {0:?}")]
    Deadline(Duration),
    /// The plugin trapped (a panic, an out-of-bounds access, memory exhausted, ...).
    #[error("plugin trapped: {0}")]
    Trap(String),
    /// The call burned its fuel.
    #[error("plugin call ran out of its fuel ({0} units)")]
    OutOfFuel(u64),
    /// A fresh instance could not be created after a trap.
    #[error(transparent)]
    Instantiate(#[from] PluginError),
}

enum Bindings {
    Map(map::Map),
    Filter(filter::Filter),
    FlatMap(flat_map::FlatMap),
    Reduce(reduce::Reduce),
    /// With the `migrate` export of a migrating plugin.
    Process(process::Process, Option<Func>),
    Window(window::Window),
    Aggregate(aggregate::Aggregate),
    Join(join::Join),
    /// With the `migrate` export of a migrating plugin.
    CoProcess(co_process::CoProcess, Option<Func>),
}

/// A live instance of a plugin.
pub struct PluginInstance {
    plugin: Arc<LoadedPlugin>,
    limits: PluginLimits,
    deadline_ticks: u64,
    live: Option<(Store<HostState>, Bindings)>,
    /// The keyed state while no instance is live (after a trap).
    parked: Option<KeyedContext>,
    /// What its calls cost, shared by the operator's workers.
    calls: Arc<CallStats>,
    sandbox: Sandbox,
    stdout: CapturedOutput,
    stderr: CapturedOutput,
}

impl PluginInstance {
    /// Instantiates `plugin` under `limits`, granted nothing.
    pub fn new(plugin: Arc<LoadedPlugin>, limits: PluginLimits) -> Result<Self, PluginError> {
        Self::sandboxed(plugin, limits, Sandbox::default())
    }

    /// Instantiates `plugin` under `limits` in `sandbox`.
    pub fn sandboxed(
        plugin: Arc<LoadedPlugin>,
        limits: PluginLimits,
        sandbox: Sandbox,
    ) -> Result<Self, PluginError> {
        let deadline_ticks = (limits.timeout.as_micros() / super::EPOCH_TICK.as_micros()).max(1) as u64;
        let mut me = Self {
            plugin,
            limits,
            deadline_ticks,
            live: None,
            parked: None,
            calls: Arc::new(CallStats::detached(false)),
            sandbox,
            stdout: CapturedOutput::default(),
            stderr: CapturedOutput::default(),
        };
        me.live = Some(me.instantiate()?);
        Ok(me)
    }

    /// The same instance with keyed state and timers behind its imports
    /// (for plugins of the process and co-process worlds).
    pub fn with_keyed(mut self, keyed: KeyedContext) -> Self {
        match &mut self.live {
            Some((store, _)) => store.data_mut().keyed = Some(keyed),
            None => self.parked = Some(keyed),
        }
        self
    }

    /// Takes the keyed state from behind the imports (to hand it to
    /// another instance of the operator: a canary's).
    pub fn take_keyed(&mut self) -> Option<KeyedContext> {
        match &mut self.live {
            Some((store, _)) => store.data_mut().keyed.take(),
            None => self.parked.take(),
        }
    }

    /// Puts `keyed` behind the imports.
    pub fn set_keyed(&mut self, keyed: KeyedContext) {
        match &mut self.live {
            Some((store, _)) => store.data_mut().keyed = Some(keyed),
            None => self.parked = Some(keyed),
        }
    }

    /// The same instance counting its calls into `calls`.
    pub fn with_calls(mut self, calls: Arc<CallStats>) -> Self {
        self.calls = calls;
        self
    }

    /// The keyed state behind the imports, if any.
    pub fn keyed(&mut self) -> Option<&mut KeyedContext> {
        match &mut self.live {
            Some((store, _)) => store.data_mut().keyed.as_mut(),
            None => self.parked.as_mut(),
        }
    }

    /// Its limits.
    pub fn limits(&self) -> &PluginLimits {
        &self.limits
    }

    /// The plugin this is an instance of.
    pub fn plugin(&self) -> &Arc<LoadedPlugin> {
        &self.plugin
    }

    /// A new instance of `plugin` (of the same world) beside this one: the
    /// same limits and sandbox, its calls counted apart (a shadow run's).
    pub fn sibling(&self, plugin: Arc<LoadedPlugin>) -> Result<Self, PluginError> {
        self.same_world(&plugin)?;
        Self::sandboxed(plugin, self.limits, self.sandbox.clone())
    }

    /// Whether `plugin` implements this instance's world.
    fn same_world(&self, plugin: &LoadedPlugin) -> Result<(), PluginError> {
        if plugin.world() == self.plugin.world() {
            return Ok(());
        }
        Err(PluginError::Instantiate {
            path: plugin.path().display().to_string(),
            reason: format!(
                "it implements the {} world, the running version the {} world",
                plugin.world(),
                self.plugin.world()
            ),
        })
    }

    /// Runs `plugin` (of the same world) from now on, with the same limits
    /// and the same keyed state; the previous plugin when it worked. On
    /// failure nothing changed.
    pub fn swap(&mut self, plugin: Arc<LoadedPlugin>) -> Result<Arc<LoadedPlugin>, PluginError> {
        self.same_world(&plugin)?;
        let old = std::mem::replace(&mut self.plugin, plugin);
        let parked = self.parked.take();
        match self.instantiate() {
            Ok((mut store, bindings)) => {
                store.data_mut().keyed = match self.live.take() {
                    Some((mut old_store, _)) => old_store.data_mut().keyed.take(),
                    None => parked,
                };
                self.live = Some((store, bindings));
                Ok(old)
            }
            Err(e) => {
                self.plugin = old;
                self.parked = parked;
                Err(e)
            }
        }
    }

    fn instantiate(&mut self) -> Result<(Store<HostState>, Bindings), PluginError> {
        let path = self.plugin.path().display().to_string();
        let wasi = super::sandbox::wasi_ctx(&self.sandbox.grants, self.stdout.clone(), self.stderr.clone())
            .map_err(|reason| PluginError::Instantiate {
            path: path.clone(),
            reason,
        })?;
        let state = HostState {
            keyed: self.parked.take(),
            operator: std::sync::Arc::from(self.sandbox.operator.as_str()),
            log: Default::default(),
            wasi,
            table: ResourceTable::new(),
            budget: super::limiter::InstanceBudget::new(self.limits.memory_bytes),
        };
        let mut store = Store::new(&self.plugin.engine, state);
        store.limiter(|s| &mut s.budget);
        store.epoch_deadline_trap();
        store.set_epoch_deadline(self.deadline_ticks);
        if self.plugin.fueled() {
            let _ = store.set_fuel(self.limits.fuel.unwrap_or(u64::MAX));
        }
        let err = |e: wasmtime::Error| PluginError::Instantiate {
            path: path.clone(),
            reason: format!("{e:#}"),
        };
        let bindings = match &self.plugin.pre {
            WorldPre::Map(p) => Bindings::Map(p.instantiate(&mut store).map_err(err)?),
            WorldPre::Filter(p) => Bindings::Filter(p.instantiate(&mut store).map_err(err)?),
            WorldPre::FlatMap(p) => Bindings::FlatMap(p.instantiate(&mut store).map_err(err)?),
            WorldPre::Reduce(p) => Bindings::Reduce(p.instantiate(&mut store).map_err(err)?),
            WorldPre::Process(p) => {
                let instance = p.instance_pre().instantiate(&mut store).map_err(err)?;
                let migrate = instance.get_func(&mut store, super::loaded::MIGRATE);
                Bindings::Process(
                    process::Process::new(&mut store, &instance).map_err(err)?,
                    migrate,
                )
            }
            WorldPre::Window(p) => Bindings::Window(p.instantiate(&mut store).map_err(err)?),
            WorldPre::Aggregate(p) => Bindings::Aggregate(p.instantiate(&mut store).map_err(err)?),
            WorldPre::Join(p) => Bindings::Join(p.instantiate(&mut store).map_err(err)?),
            WorldPre::CoProcess(p) => {
                let instance = p.instance_pre().instantiate(&mut store).map_err(err)?;
                let migrate = instance.get_func(&mut store, super::loaded::MIGRATE);
                Bindings::CoProcess(
                    co_process::CoProcess::new(&mut store, &instance).map_err(err)?,
                    migrate,
                )
            }
        };
        Ok((store, bindings))
    }

    /// Runs `f` on the live instance (a fresh one after a failure) under the
    /// call deadline; a failed call poisons the instance.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&mut Store<HostState>, &Bindings) -> wasmtime::Result<T>,
    ) -> Result<T, CallError> {
        if self.live.is_none() {
            self.live = Some(self.instantiate()?);
        }
        let (store, bindings) = self.live.as_mut().expect("instantiated above");
        store.set_epoch_deadline(self.deadline_ticks);
        let fuel = self.plugin.fueled().then(|| self.limits.fuel.unwrap_or(u64::MAX));
        if let Some(fuel) = fuel {
            let _ = store.set_fuel(fuel);
        }
        store.data_mut().log.reset();
        let started = self.calls.timed.then(Instant::now);
        let result = f(store, bindings);
        let dropped = store.data_mut().log.reset();
        if dropped > 0 {
            self.calls.log_lines_dropped(dropped);
            tracing::warn!(
                operator = %self.sandbox.operator,
                dropped,
                "plugin log lines past {} per call were dropped",
                super::log_import::MAX_LINES_PER_CALL
            );
        }
        if let Some(started) = started {
            self.calls.observe(started.elapsed());
        }
        if let Some(fuel) = fuel {
            let left = store.get_fuel().unwrap_or(0);
            self.calls.fuel_burned(fuel - left.min(fuel));
        }
        self.forward_output();
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                if let Some((mut store, _)) = self.live.take() {
                    self.parked = store.data_mut().keyed.take();
                }
                Err(match e.downcast_ref::<Trap>() {
                    Some(Trap::Interrupt) => {
                        self.calls.deadline_hit();
                        CallError::Deadline(self.limits.timeout)
                    }
                    Some(Trap::OutOfFuel) => {
                        self.calls.fuel_ran_out();
                        CallError::OutOfFuel(self.limits.fuel.unwrap_or(u64::MAX))
                    }
                    _ => {
                        self.calls.trapped();
                        CallError::Trap(describe_trap(&e))
                    }
                })
            }
        }
    }

    /// Hands what the plugin printed to the host's log, a line an event,
    /// with the operator's name.
    fn forward_output(&self) {
        let operator = self.sandbox.operator.as_str();
        for (stream, out) in [("stdout", &self.stdout), ("stderr", &self.stderr)] {
            let (lines, dropped) = out.take();
            for line in lines {
                tracing::info!(operator = %operator, stream, "plugin: {line}");
            }
            if dropped > 0 {
                tracing::warn!(
                    operator,
                    stream,
                    dropped,
                    "plugin output past 64 KiB per call was dropped"
                );
            }
        }
    }

    /// Calls the world's batch export.
    pub fn call_batch(&mut self, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.call(|store, b| match b {
            Bindings::Map(b) => b.call_map_batch(store, input),
            Bindings::Filter(b) => b.call_filter_batch(store, input),
            Bindings::FlatMap(b) => b.call_flat_map_batch(store, input),
            Bindings::Reduce(b) => b.call_reduce_batch(store, input),
            Bindings::Process(b, _) => b.call_process_batch(store, input),
            Bindings::Window(b) => b.call_window_batch(store, input),
            Bindings::Aggregate(b) => b.call_add_batch(store, input),
            Bindings::Join(b) => b.call_join_batch(store, input),
            Bindings::CoProcess(b, _) => b.call_co_process_batch(store, input),
        })
    }

    /// Calls the batch export and decodes its `expected` outcomes. A trap, a
    /// missed deadline or a malformed output becomes `Err(reason)`; only a
    /// failure to instantiate afresh is fatal.
    pub fn batch_outcomes(
        &mut self,
        input: &[u8],
        expected: usize,
    ) -> Result<Result<Outcomes, String>, PluginError> {
        match self.call_batch(input) {
            Ok(output) => Ok(Outcomes::parse(
                self.plugin.world(),
                output,
                expected,
                self.limits.max_outputs_per_record,
            )
            .map_err(|e| e.to_string())),
            Err(CallError::Instantiate(e)) => Err(e),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    /// One record's outcome through the typed per-record export; a trap or a
    /// missed deadline becomes the record's error.
    pub fn one_outcome(
        &mut self,
        rec: &Record,
        accumulator: Option<&[u8]>,
    ) -> Result<RecordOutcome, PluginError> {
        let called = self.call_one(rec, accumulator);
        self.checked(called)
    }

    /// `rec`'s outcome in a call of its own, made in `mode`: through the
    /// typed per-record export, or a batch call of one record.
    pub fn outcome_alone(&mut self, mode: CallMode, rec: &Record) -> Result<RecordOutcome, PluginError> {
        match mode {
            CallMode::Record => self.one_outcome(rec, None),
            CallMode::Batch => {
                let input = crate::batch::Batch::Records(vec![rec.clone()])
                    .encode()
                    .into_owned();
                self.batch_outcomes(&input, 1).map(|r| r.and_then(|o| o.owned(0)))
            }
        }
    }

    /// The outcome of one record of input `input` of a co-process plugin,
    /// through its typed `on-left` or `on-right` export.
    pub fn one_input_outcome(&mut self, input: usize, rec: &Record) -> Result<RecordOutcome, PluginError> {
        let called = self.call(|store, b| {
            let Bindings::CoProcess(b, _) = b else {
                return Err(wasmtime::Error::msg("only co-process plugins have two inputs"));
            };
            let result = match input {
                0 => b.call_on_left(store, &to_wit(rec))?,
                _ => b.call_on_right(store, &to_wit(rec))?,
            };
            Ok(result
                .map(|v| Outcome::Records(v.into_iter().map(from_wit).collect()))
                .map_err(|e| e.message))
        });
        self.checked(called)
    }

    /// The outcome of one pair of a join plugin, through its typed `join`
    /// export.
    pub fn one_pair_outcome(
        &mut self,
        left: Option<&Record>,
        right: Option<&Record>,
    ) -> Result<RecordOutcome, PluginError> {
        let called = self.call(|store, b| {
            let Bindings::Join(b) = b else {
                return Err(wasmtime::Error::msg("not a join plugin"));
            };
            let (left, right) = (left.map(to_wit), right.map(to_wit));
            Ok(b.call_join(store, left.as_ref(), right.as_ref())?
                .map(|v| Outcome::Records(v.into_iter().map(from_wit).collect()))
                .map_err(|e| e.message))
        });
        self.checked(called)
    }

    /// A per-record call's outcome, refused past `max_outputs_per_record`;
    /// a trap or a missed deadline becomes the record's error.
    fn checked(
        &self,
        called: Result<Result<Outcome, String>, CallError>,
    ) -> Result<RecordOutcome, PluginError> {
        let max = self.limits.max_outputs_per_record;
        match called {
            Ok(Ok(Outcome::Records(out))) if out.len() > max as usize => {
                Ok(Err(super::outcome::OutcomeError::TooManyOutputs {
                    count: out.len(),
                    max,
                }
                .to_string()))
            }
            Ok(outcome) => Ok(outcome),
            Err(CallError::Instantiate(e)) => Err(e),
            Err(e) => Ok(Err(e.to_string())),
        }
    }

    /// Calls the world's per-record export (`accumulator` only for reduce).
    pub fn call_one(
        &mut self,
        rec: &Record,
        accumulator: Option<&[u8]>,
    ) -> Result<Result<Outcome, String>, CallError> {
        self.call(|store, b| {
            Ok(match b {
                Bindings::Map(b) => b
                    .call_map(store, &to_wit(rec))?
                    .map(|r| Outcome::Record(from_wit(r)))
                    .map_err(|e| e.message),
                Bindings::Filter(b) => b
                    .call_filter(store, &to_wit(rec))?
                    .map(Outcome::Keep)
                    .map_err(|e| e.message),
                Bindings::FlatMap(b) => b
                    .call_flat_map(store, &to_wit(rec))?
                    .map(|v| Outcome::Records(v.into_iter().map(from_wit).collect()))
                    .map_err(|e| e.message),
                Bindings::Reduce(b) => b
                    .call_reduce(store, accumulator, &to_wit(rec))?
                    .map(|acc| Outcome::Accumulator(Bytes::from(acc)))
                    .map_err(|e| e.message),
                Bindings::Process(b, _) => b
                    .call_on_record(store, &to_wit(rec))?
                    .map(|v| Outcome::Records(v.into_iter().map(from_wit).collect()))
                    .map_err(|e| e.message),
                Bindings::Window(_)
                | Bindings::Aggregate(_)
                | Bindings::Join(_)
                | Bindings::CoProcess(..) => {
                    return Err(wasmtime::Error::msg(
                        "window, join and co-process plugins have no single-record export",
                    ));
                }
            })
        })
    }

    /// Calls an aggregate plugin's `finish-batch` export.
    pub fn call_finish_batch(&mut self, input: &[u8]) -> Result<Vec<u8>, CallError> {
        self.call(|store, b| match b {
            Bindings::Aggregate(b) => b.call_finish_batch(store, input),
            _ => Err(wasmtime::Error::msg("not an aggregate plugin")),
        })
    }

    /// Calls one export of an aggregate plugin.
    pub fn call_aggregate(&mut self, step: AggregateStep<'_>) -> Result<Result<Vec<u8>, String>, CallError> {
        self.call(|store, b| {
            let Bindings::Aggregate(b) = b else {
                return Err(wasmtime::Error::msg("not an aggregate plugin"));
            };
            Ok(match step {
                AggregateStep::Create => Ok(b.call_create(&mut *store)?),
                AggregateStep::Add(acc, rec) => b.call_add(store, acc, &to_wit(rec))?.map_err(|e| e.message),
                AggregateStep::Merge(a, c) => b.call_merge(store, a, c)?.map_err(|e| e.message),
                AggregateStep::Finish(acc) => b.call_finish(store, acc)?.map_err(|e| e.message),
            })
        })
    }

    /// Calls a process or co-process plugin's `on-timer` for `key`'s timer at `at`.
    pub fn call_on_timer(
        &mut self,
        key: &[u8],
        domain: crate::state::TimeDomain,
        at: i64,
    ) -> Result<Result<Vec<Record>, String>, CallError> {
        use process::mailer::plugin::timers::TimeDomain as Wit;
        let domain = match domain {
            crate::state::TimeDomain::EventTime => Wit::EventTime,
            crate::state::TimeDomain::ProcessingTime => Wit::ProcessingTime,
        };
        let key = (!key.is_empty()).then_some(key);
        let max = self.limits.max_outputs_per_record;
        self.call(|store, b| {
            let result = match b {
                Bindings::Process(b, _) => b.call_on_timer(store, key, domain, at)?,
                Bindings::CoProcess(b, _) => b.call_on_timer(store, key, domain, at)?,
                _ => {
                    return Err(wasmtime::Error::msg(
                        "only process and co-process plugins have timers",
                    ));
                }
            };
            Ok(result.map_err(|e| e.message).and_then(|v| {
                if v.len() > max as usize {
                    let count = v.len();
                    return Err(super::outcome::OutcomeError::TooManyOutputs { count, max }.to_string());
                }
                Ok(v.into_iter().map(from_wit).collect())
            }))
        })
    }
}

impl PluginInstance {
    /// Calls a migrating plugin's `migrate`: `value` of state `name`,
    /// written under state version `from`, in the plugin's shape.
    pub fn call_migrate(
        &mut self,
        from: u32,
        name: &str,
        value: &[u8],
    ) -> Result<Result<Vec<u8>, String>, CallError> {
        type Migrated = (Result<Vec<u8>, super::generated::process::mailer::plugin::types::Error>,);
        self.call(|store, b| {
            let (Bindings::Process(_, Some(migrate)) | Bindings::CoProcess(_, Some(migrate))) = b else {
                return Err(wasmtime::Error::msg("the plugin exports no `migrate`"));
            };
            let migrate = migrate.typed::<(u32, &str, &[u8]), Migrated>(&*store)?;
            let (result,) = migrate.call(store, (from, name, value))?;
            Ok(result.map_err(|e| e.message))
        })
    }
}

/// One call into an aggregate plugin.
#[derive(Debug, Clone, Copy)]
pub enum AggregateStep<'a> {
    /// A fresh accumulator.
    Create,
    /// An accumulator with a record added.
    Add(&'a [u8], &'a Record),
    /// Two accumulators merged.
    Merge(&'a [u8], &'a [u8]),
    /// The result of an accumulator.
    Finish(&'a [u8]),
}

/// The first line of a trap's explanation plus its cause, without the wasm
/// backtrace.
fn describe_trap(e: &wasmtime::Error) -> String {
    let mut parts: Vec<String> = e.chain().map(|c| c.to_string()).collect();
    parts.retain(|p| !p.starts_with("error while executing at wasm backtrace"));
    let text = parts.join(": ");
    text.lines().next().unwrap_or("unknown trap").to_owned()
}

/// The host record as the plugins' record (every world shares the type).
fn to_wit(r: &Record) -> WitRecord {
    WitRecord {
        key: r.key.as_ref().map(|k| k.to_vec()),
        value: r.value.to_vec(),
        timestamp: r.timestamp,
        headers: r
            .headers
            .iter()
            .map(|(n, v)| WitHeader {
                name: n.clone(),
                value: v.to_vec(),
            })
            .collect(),
    }
}

/// A plugin's record as the host record.
fn from_wit(r: WitRecord) -> Record {
    Record {
        key: r.key.map(Bytes::from),
        value: Bytes::from(r.value),
        timestamp: r.timestamp,
        headers: r
            .headers
            .into_iter()
            .map(|h| (h.name, Bytes::from(h.value)))
            .collect(),
    }
}
