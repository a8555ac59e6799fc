//! Plugin versions, in one home: what each operator running a plugin runs
//! now, ran before and tries beside it, from the admin API's request down
//! to each worker.
//!
//! - [`Swaps`] (this file, `probation`, and the trials' control in
//!   `shadow` and `canary`) keeps the
//!   pipeline's versions: a new version is compiled and checked against its
//!   operator's world off the hot path, kept in the plugin store by digest,
//!   and put in the stream as a [`SwapPoint`] (`point`) the sources take
//!   from a [`SwapQueue`]; a swapped-in version is on probation and rolled
//!   back when too many records fail; shadows and canaries are trials of a
//!   version beside the current one, promoted or aborted. The admin API is
//!   its HTTP face.
//! - [`PluginSlot`] (`slot`) is what one worker of an operator holds in
//!   place of a bare plugin instance: the current instance, the trial
//!   beside it, and the state versions with their migration.
//!   The chain applies each swap point to the slots it names, so every
//!   worker switches when the point reaches it, keeping its state.
//! - [`ShadowStats`] and [`CanaryStats`] are what every worker of a trial
//!   adds to and the admin API shows.

mod canary;
mod point;
mod probation;
mod shadow;
mod slot;
mod views;

pub use canary::{CanaryState, CanaryStats, CanaryView};
pub use point::{SwapKind, SwapPoint, SwapQueue};
pub use shadow::{MISMATCHES_KEPT, Mismatch, ShadowState, ShadowStats, ShadowView};
pub use slot::{PluginSlot, ShadowRun, SlotOwner, as_canary};
pub use views::{CanaryTrial, OperatorView, PluginView, PreviousView, SwapRecord, SwapStatus};

use crate::failure::FailureStats;
use crate::plugin::{LoadedPlugin, PluginEngine, PluginError, World};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

/// An operator running a plugin, as the swaps start from it: its name, the
/// plugin it starts with, and its counts of records and failures (over all
/// workers).
#[derive(Clone)]
pub struct PluginOperator {
    /// Its name in the manifest.
    pub name: String,
    /// The plugin it starts with.
    pub plugin: Arc<LoadedPlugin>,
    /// Its counts.
    pub failures: Arc<FailureStats>,
    /// Its stage's parallelism.
    pub workers: usize,
}

/// Whether the run the swaps belong to stopped (their watchers then end).
pub type Stopped = Arc<dyn Fn() -> bool + Send + Sync>;

/// Why a swap was refused; nothing changed.
#[derive(Debug, thiserror::Error)]
pub enum SwapError {
    /// No operator of that name runs a plugin.
    #[error("no operator `{0}` with a plugin in this pipeline (see GET /api/operators)")]
    NoOperator(String),
    /// The new version does not load, or implements another world.
    #[error("operator `{operator}`: {reason}")]
    Refused {
        /// The operator.
        operator: String,
        /// Why.
        reason: String,
    },
    /// A rollback with no earlier version.
    #[error("operator `{0}` runs its first version: there is nothing to roll back to")]
    NothingToRollBack(String),
    /// A promote or abort with no shadow or canary (no trial) running.
    #[error(
        "operator `{0}` runs no shadow or canary: start one with `mailer plugin swap --shadow` or `--canary`"
    )]
    NoTrial(String),
    /// No swap of that id.
    #[error("no swap {0} in this run (see GET /api/swaps)")]
    NoSwap(u64),
}

impl SwapError {
    /// `operator`'s swap refused for `reason`.
    fn refused(operator: &str, reason: impl Into<String>) -> Self {
        SwapError::Refused {
            operator: operator.to_owned(),
            reason: reason.into(),
        }
    }
}

/// A swap of the history with its point in the stream.
struct Entry {
    record: SwapRecord,
    point: Arc<SwapPoint>,
}

impl Entry {
    /// The record, its status as of now.
    fn now(&self) -> SwapRecord {
        let applied = self.point.applied.load(Ordering::Relaxed);
        SwapRecord {
            status: if applied >= self.record.workers {
                SwapStatus::Applied
            } else {
                SwapStatus::Pending
            },
            applied_workers: applied,
            shadow: match &self.point.kind {
                SwapKind::Shadow(s) => Some(s.view()),
                _ => None,
            },
            canary: match &self.point.kind {
                SwapKind::Canary(c) => Some(c.view()),
                _ => None,
            },
            ..self.record.clone()
        }
    }
}

/// A shadow run: its swap's id, its plugin and what it compared.
type Shadow = (u64, Arc<LoadedPlugin>, Arc<ShadowStats>);

/// A canary: its swap's id, its plugin and what it did.
type Canary = (u64, Arc<LoadedPlugin>, Arc<CanaryStats>);

struct Versions {
    world: World,
    current: Arc<LoadedPlugin>,
    /// Earlier versions, oldest first, each with whether it was rolled
    /// back.
    previous: Vec<(Arc<LoadedPlugin>, bool)>,
    failures: Arc<FailureStats>,
    workers: usize,
    /// The shadow running beside `current`, if any.
    shadow: Option<Shadow>,
    /// The canary handling some of its key groups, if any.
    canary: Option<Canary>,
    /// The swap that made `current` the version (none: the manifest's).
    current_swap: Option<u64>,
}

impl Versions {
    /// Refuses a new trial of `operator` (these versions') while a shadow
    /// or a canary runs.
    fn no_trial(&self, operator: &str) -> Result<(), SwapError> {
        let running = match (&self.shadow, &self.canary) {
            (Some((id, plugin, _)), _) => format!("shadow {id} ({})", plugin.digest()),
            (None, Some((id, plugin, _))) => format!("canary {id} ({})", plugin.digest()),
            (None, None) => return Ok(()),
        };
        Err(SwapError::refused(
            operator,
            format!("{running} runs already: promote or abort it first"),
        ))
    }
}

/// How a swapped-in version is watched: over its first `records`, more
/// than `share` of them failing rolls it back.
#[derive(Debug, Clone, Copy)]
pub struct Probation {
    /// Records watched.
    pub records: u64,
    /// The share of failures that rolls back.
    pub share: f64,
}

/// The swaps of one running pipeline.
pub struct Swaps {
    pipeline: String,
    engine: Arc<PluginEngine>,
    stopped: Stopped,
    queue: SwapQueue,
    store: PathBuf,
    probation: Probation,
    key_groups: u32,
    /// Whether a swap must keep the state version (cluster mode).
    fixed_state_versions: bool,
    operators: Mutex<BTreeMap<String, Versions>>,
    history: Mutex<Vec<Entry>>,
    next_id: AtomicU64,
}

impl Swaps {
    /// Swaps for the plugin `operators` of `pipeline` (of `key_groups`
    /// key groups), keeping uploaded versions in `store`, each new version
    /// on `probation`; their points go to `queue` until the run has
    /// `stopped`.
    pub fn new(
        pipeline: &str,
        engine: Arc<PluginEngine>,
        (stopped, queue): (Stopped, SwapQueue),
        store: PathBuf,
        probation: Probation,
        key_groups: u32,
        operators: impl IntoIterator<Item = PluginOperator>,
    ) -> Self {
        let operators = operators
            .into_iter()
            .map(|op| {
                (
                    op.name,
                    Versions {
                        world: op.plugin.world(),
                        current: op.plugin,
                        previous: Vec::new(),
                        failures: op.failures,
                        workers: op.workers,
                        shadow: None,
                        canary: None,
                        current_swap: None,
                    },
                )
            })
            .collect();
        Self {
            pipeline: pipeline.to_owned(),
            engine,
            stopped,
            queue,
            store,
            probation,
            key_groups,
            fixed_state_versions: false,
            operators: Mutex::new(operators),
            history: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
    }

    /// The same swaps refusing any version of another state version
    /// (cluster mode, whose state keeps no state versions).
    pub fn with_fixed_state_versions(mut self) -> Self {
        self.fixed_state_versions = true;
        self
    }

    /// The plugin operators and their versions.
    pub fn operators(&self) -> Vec<OperatorView> {
        let operators = self.operators.lock().expect("operators lock");
        operators
            .iter()
            .map(|(name, v)| OperatorView {
                name: name.clone(),
                world: v.world.to_string(),
                plugin: PluginView::of(&v.current),
                previous: v
                    .previous
                    .iter()
                    .rev()
                    .map(|(p, rolled_back)| PreviousView {
                        plugin: PluginView::of(p),
                        rolled_back: *rolled_back,
                    })
                    .collect(),
                canary: v.canary.as_ref().map(|(_, plugin, stats)| CanaryTrial {
                    plugin: PluginView::of(plugin),
                    stats: stats.view(),
                }),
            })
            .collect()
    }

    /// The pipeline's name.
    pub fn pipeline(&self) -> &str {
        &self.pipeline
    }

    /// Swap `id`, as of now.
    pub fn swap_record(&self, id: u64) -> Result<SwapRecord, SwapError> {
        let history = self.history.lock().expect("history lock");
        history
            .iter()
            .find(|e| e.record.id == id)
            .map(Entry::now)
            .ok_or(SwapError::NoSwap(id))
    }

    /// Every swap so far, oldest first.
    pub fn history(&self) -> Vec<SwapRecord> {
        self.history
            .lock()
            .expect("history lock")
            .iter()
            .map(Entry::now)
            .collect()
    }

    /// Swaps `operator` to the component in `bytes` (the client's file
    /// `file`, named in refusals): stored by digest, compiled, checked
    /// against the operator's world, then put in the stream, and watched
    /// over its probation. A refused component leaves the store. Blocking
    /// (compiling takes tens of milliseconds).
    /// A new version declaring a lower state version than the running
    /// one's is refused unless `how.force` (see [`state_version_step`]);
    /// one declaring a higher one migrates each key when next handled, or
    /// every key in the background with `how.migrate_every_key`.
    pub fn swap(
        self: &Arc<Self>,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
        how: SwapOptions,
    ) -> Result<SwapRecord, SwapError> {
        let plugin = self.upload(operator, bytes, file, Next::Version { force: how.force })?;
        let change = match how.migrate_every_key {
            true => Change::Upgrade,
            false => Change::Swap,
        };
        self.swap_to(operator, plugin, change)
    }

    /// The component in `bytes` (the client's `file`) for a trial (`what`:
    /// shadow runs, canaries) of `operator`, uploaded; refused for an
    /// operator of another kind than map, filter, flat-map, process or
    /// co-process, while a trial runs, and for a component of another
    /// state version (`why`).
    fn trial_plugin(
        &self,
        operator: &str,
        what: &str,
        (bytes, file): (&[u8], Option<&str>),
        why: &str,
    ) -> Result<Arc<LoadedPlugin>, SwapError> {
        let (world, _) = self.kind_of(operator)?;
        if !matches!(
            world,
            World::Map | World::Filter | World::FlatMap | World::Process | World::CoProcess
        ) {
            return Err(SwapError::refused(
                operator,
                format!(
                    "{what} run in map, filter, flat-map, process and co-process operators, and this one is a {world} operator: swap it, on probation, instead"
                ),
            ));
        }
        self.none_on_trial(operator)?;
        self.upload(operator, bytes, file, Next::Trial { why })
    }

    /// `f` of the versions of `operator`, under the lock.
    fn versions<T>(
        &self,
        operator: &str,
        f: impl FnOnce(&mut Versions) -> Result<T, SwapError>,
    ) -> Result<T, SwapError> {
        let mut operators = self.operators.lock().expect("operators lock");
        let v = operators
            .get_mut(operator)
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
        f(v)
    }

    /// Refuses a new trial of `operator` while a shadow or a canary runs.
    fn none_on_trial(&self, operator: &str) -> Result<(), SwapError> {
        self.versions(operator, |v| v.no_trial(operator))
    }

    /// Puts `plugin` in the stream as a trial of `operator` (`change`: a
    /// shadow or a canary), unless another one started meanwhile: `start`
    /// notes it in the operator's versions under its swap's id and says
    /// what its swap point is.
    fn start_trial(
        &self,
        operator: &str,
        plugin: Arc<LoadedPlugin>,
        change: Change,
        start: impl FnOnce(&mut Versions, u64, Arc<LoadedPlugin>) -> SwapKind,
    ) -> Result<SwapRecord, SwapError> {
        let (record, point) = self.versions(operator, |v| {
            // Checked again: another trial may have started during the upload.
            v.no_trial(operator)?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let record = self.record(id, operator, (&v.current, &plugin), change, v.workers);
            let point = SwapPoint::new(id, operator, plugin.clone(), v.workers);
            Ok((record, point.with_kind(start(v, id, plugin))))
        })?;
        self.publish(record, point)
    }

    /// The component in `bytes` (the client's file `file`, named in
    /// refusals), stored by digest, compiled and checked against
    /// `operator`'s world and the running version's state version as
    /// `next` says. A refused component leaves the store.
    fn upload(
        &self,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
        next: Next<'_>,
    ) -> Result<Arc<LoadedPlugin>, SwapError> {
        let (world, fueled) = self.kind_of(operator)?;
        let current = self.current(operator)?;
        let refused = |reason: String| SwapError::refused(operator, reason);
        let shown = file.map_or_else(|| "the uploaded component".to_owned(), |f| format!("`{f}`"));
        let (path, new) = self
            .stored(bytes)
            .map_err(|e| refused(format!("storing {shown}: {e}")))?;
        let forget = || {
            if new && let Err(removed) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %removed, "a refused component stays in the plugin store");
            }
        };
        let plugin = self
            .engine
            .load_with(&path, world, operator, fueled)
            .map_err(|e| {
                forget();
                refused(refusal(&e, &path, &shown, world))
            })?;
        let fits = match next {
            Next::Version { force } => state_version_step(&current, &plugin, &shown, force),
            Next::Trial { why } if plugin.state_version() != current.state_version() => Err(format!(
                "{shown} declares state version {}, the running version {}: {why}; swap it in on probation instead",
                plugin.state_version(),
                current.state_version()
            )),
            Next::Trial { .. } if current.migrates() && !plugin.migrates() => Err(format!(
                "{shown} exports no `migrate`, and the running version does: keys not yet migrated would fail in it; give it the running version's `migrate`"
            )),
            Next::Trial { .. } => Ok(()),
        };
        if self.fixed_state_versions && plugin.state_version() != current.state_version() {
            forget();
            return Err(refused(format!(
                "{shown} declares state version {}, the running version {}: cluster mode keeps no state versions, so a plugin swapped in there keeps the running one's",
                plugin.state_version(),
                current.state_version()
            )));
        }
        if let Err(reason) = fits {
            forget();
            return Err(refused(reason));
        }
        Ok(plugin)
    }

    /// The version `operator` runs now.
    fn current(&self, operator: &str) -> Result<Arc<LoadedPlugin>, SwapError> {
        self.versions(operator, |v| Ok(v.current.clone()))
    }

    /// Swaps `operator` to `plugin` (a `change`: a swap or an upgrade) and
    /// watches it over its probation.
    fn swap_to(
        self: &Arc<Self>,
        operator: &str,
        plugin: Arc<LoadedPlugin>,
        change: Change,
    ) -> Result<SwapRecord, SwapError> {
        let counts = self.counts(operator)?;
        let record = self.switch(operator, plugin, change)?;
        let swaps = Arc::clone(self);
        let (watched, id) = (operator.to_owned(), record.id);
        std::thread::Builder::new()
            .name("swap-probation".into())
            .spawn(move || swaps.watch(&watched, id, counts))
            .map_err(|e| SwapError::refused(operator, format!("cannot watch the new version: {e}")))?;
        Ok(record)
    }

    /// The operator's counts now: (records, failures).
    fn counts(&self, operator: &str) -> Result<(u64, u64), SwapError> {
        self.versions(operator, |v| {
            Ok((
                v.failures.records.load(Ordering::Relaxed),
                v.failures.failures.load(Ordering::Relaxed),
            ))
        })
    }

    /// The operator's world, and whether its plugins count fuel.
    fn kind_of(&self, operator: &str) -> Result<(World, bool), SwapError> {
        self.versions(operator, |v| Ok((v.world, v.current.fueled())))
    }

    /// Writes `bytes` to the store as `<digest>.wasm` (once); its path, and
    /// whether it was written now.
    fn stored(&self, bytes: &[u8]) -> std::io::Result<(PathBuf, bool)> {
        crate::plugin::store::put(&self.store, bytes)
    }

    fn switch(
        &self,
        operator: &str,
        plugin: Arc<LoadedPlugin>,
        change: Change,
    ) -> Result<SwapRecord, SwapError> {
        let (record, point) = self.versions(operator, |v| Ok(self.switch_in(v, operator, plugin, change)))?;
        self.publish(record, point)
    }

    /// Makes `plugin` the version of `operator` (its versions `v`, under
    /// their lock): the swap's record and the point to publish.
    fn switch_in(
        &self,
        v: &mut Versions,
        operator: &str,
        plugin: Arc<LoadedPlugin>,
        change: Change,
    ) -> (SwapRecord, SwapPoint) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let record = self.record(id, operator, (&v.current, &plugin), change, v.workers);
        let mut point = SwapPoint::new(id, operator, plugin.clone(), v.workers);
        if change == Change::Upgrade && plugin.state_version() > v.current.state_version() {
            point = point.with_kind(SwapKind::Upgrade);
        }
        // The swap point ends a trial in every worker.
        if let Some((_, _, canary)) = v.canary.take() {
            canary.end(CanaryState::RolledBack);
        }
        if let Some((_, _, shadow)) = v.shadow.take() {
            shadow.end(ShadowState::Aborted);
        }
        let old = std::mem::replace(&mut v.current, plugin);
        v.previous.push((old, record.rollback));
        v.current_swap = Some(id);
        (record, point)
    }

    /// The record of swap `id` of `operator`, on `workers` workers, from
    /// and to the plugins of `from_to`.
    fn record(
        &self,
        id: u64,
        operator: &str,
        (from, to): (&LoadedPlugin, &LoadedPlugin),
        change: Change,
        workers: usize,
    ) -> SwapRecord {
        SwapRecord {
            id,
            operator: operator.to_owned(),
            from: from.digest().to_owned(),
            to: to.digest().to_owned(),
            rollback: matches!(change, Change::Rollback | Change::AutomaticRollback),
            automatic: change == Change::AutomaticRollback,
            requested_at_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            status: SwapStatus::Pending,
            applied_workers: 0,
            workers,
            shadow: None,
            canary: None,
        }
    }

    /// Puts `point` in the stream and `record` in the history.
    fn publish(&self, record: SwapRecord, point: SwapPoint) -> Result<SwapRecord, SwapError> {
        let point = Arc::new(point);
        self.queue.push(point.clone());
        tracing::info!(
            pipeline = %self.pipeline,
            operator = %record.operator,
            from = %record.from,
            to = %record.to,
            rollback = record.rollback,
            kind = point.kind.name(),
            "plugin swap requested"
        );
        let entry = Entry { record, point };
        let now = entry.now();
        self.history.lock().expect("history lock").push(entry);
        Ok(now)
    }
}

/// Why the component `shown`, stored at `path`, cannot replace a plugin of
/// the `world` world: `error` in the client's terms — its file, not the
/// store's, and for another world what fits a running pipeline.
fn refusal(error: &PluginError, path: &std::path::Path, shown: &str, world: World) -> String {
    match error {
        PluginError::WrongWorld {
            actual, actual_type, ..
        } => format!(
            "{shown} implements the {actual} world, and a swap keeps the running operator's world, {world}: build the new version as a {world} plugin; to run a {actual} plugin instead, change the operator's `type` to `{actual_type}` in the manifest and restart the pipeline"
        ),
        other => other.to_string().replace(&format!("`{}`", path.display()), shown),
    }
}

/// Whether `next` (shown as `shown` in refusals) may follow `current` as
/// far as their state versions go: the same; higher when `next` migrates
/// (exports `migrate`); lower only when `force`, since keys `current`
/// migrated (or wrote) have a shape the older version may not read.
fn state_version_step(
    current: &LoadedPlugin,
    next: &LoadedPlugin,
    shown: &str,
    force: bool,
) -> Result<(), String> {
    let (from, to) = (current.state_version(), next.state_version());
    if to > from && !next.migrates() {
        return Err(format!(
            "{shown} declares state version {to}, above the running version's {from}, and exports no `migrate` to bring the state to it: give it one (`#[operator(process, state_version = {to}, migrate = f)]`)"
        ));
    }
    if to < from && !force {
        return Err(format!(
            "{shown} declares state version {to}, below the running version's {from}: keys the running version handled hold state of version {from}, which an older version may not read. Swap in a version of state version {from} or higher, or force it (`--force`) knowing it will read that state"
        ));
    }
    Ok(())
}

/// What an uploaded component is to be, as far as state versions go.
#[derive(Debug, Clone, Copy)]
enum Next<'a> {
    /// The operator's next version: a higher state version migrates, a
    /// lower one only when `force`.
    Version { force: bool },
    /// A trial beside the running version (a shadow, a canary), which must
    /// keep its state version: `why`.
    Trial { why: &'a str },
}

/// How a new version is swapped in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwapOptions {
    /// Even when it declares a lower state version than the running one.
    pub force: bool,
    /// Migrating every key's state in the background (when it declares a
    /// higher state version), not only each key when next handled.
    pub migrate_every_key: bool,
}

/// What a switch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Swap,
    /// A swap migrating every key in the background.
    Upgrade,
    Rollback,
    AutomaticRollback,
    Shadow,
    Canary,
}
