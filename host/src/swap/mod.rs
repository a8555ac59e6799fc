//! Hot swap of plugins while the pipeline runs: a new version is compiled
//! and checked against its operator's world off the hot path, kept in the
//! plugin store by digest, and handed to the source as a swap point (see
//! `runtime::message`); every worker switches when the point reaches it,
//! keeping its state. A swapped-in version is on probation and rolled back
//! when too many records fail. The admin API is its HTTP face.

mod views;

pub use views::{OperatorView, PluginView, PreviousView, SwapRecord, SwapStatus};

use crate::operators::{FailureStats, ShadowState, ShadowStats};
use crate::plan::PluginOperator;
use crate::plugin::{LoadedPlugin, PluginEngine, PluginError, World};
use crate::runtime::SwapPoint;
use crate::runtime::{Control, Shutdown};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

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
    /// A promote or abort with no shadow running.
    #[error("operator `{0}` runs no shadow: start one with `mailer plugin swap --shadow`")]
    NoShadow(String),
    /// No swap of that id.
    #[error("no swap {0} in this run (see GET /api/swaps)")]
    NoSwap(u64),
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
            shadow: self.point.shadow.as_ref().map(|s| s.view()),
            ..self.record.clone()
        }
    }
}

/// A shadow run: its swap's id, its plugin and what it compared.
type Shadow = (u64, Arc<LoadedPlugin>, Arc<ShadowStats>);

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
    shutdown: Shutdown,
    control: Control,
    store: PathBuf,
    probation: Probation,
    operators: Mutex<BTreeMap<String, Versions>>,
    history: Mutex<Vec<Entry>>,
    next_id: AtomicU64,
}

impl Swaps {
    /// Swaps for the plugin `operators` of `pipeline`, keeping uploaded
    /// versions in `store`, each new version on `probation`.
    pub fn new(
        pipeline: &str,
        engine: Arc<PluginEngine>,
        (shutdown, control): (Shutdown, Control),
        store: PathBuf,
        probation: Probation,
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
                    },
                )
            })
            .collect();
        Self {
            pipeline: pipeline.to_owned(),
            engine,
            shutdown,
            control,
            store,
            probation,
            operators: Mutex::new(operators),
            history: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(1),
        }
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
    pub fn swap(
        self: &Arc<Self>,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
    ) -> Result<SwapRecord, SwapError> {
        let plugin = self.upload(operator, bytes, file)?;
        self.swap_to(operator, plugin)
    }

    /// Runs the component in `bytes` (the client's file `file`) as a shadow
    /// of `operator`, a map, filter or flat-map: beside the current version
    /// on `share` of the records (0 < share ≤ 1), its outputs compared and
    /// thrown away (see [`ShadowStats`]), until [`promote`](Self::promote)
    /// or [`abort`](Self::abort).
    pub fn shadow(
        self: &Arc<Self>,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
        share: f64,
    ) -> Result<SwapRecord, SwapError> {
        let refused = |reason: String| SwapError::Refused {
            operator: operator.to_owned(),
            reason,
        };
        if !(share > 0.0 && share <= 1.0) {
            return Err(refused(format!(
                "the shadow's share is {share}: give one above 0 and at most 1 (1: every record)"
            )));
        }
        let (world, _) = self.kind_of(operator)?;
        if !matches!(world, World::Map | World::Filter | World::FlatMap) {
            return Err(refused(format!(
                "a shadow run compares map, filter and flat-map operators, and this one is a {world} operator: swap it, on probation, instead"
            )));
        }
        if let Some((id, plugin, _)) = self.shadow_of(operator)? {
            return Err(refused(format!(
                "shadow {id} ({}) runs already: promote or abort it first",
                plugin.digest()
            )));
        }
        let plugin = self.upload(operator, bytes, file)?;
        let stats = Arc::new(ShadowStats::new(share));
        let mut operators = self.operators.lock().expect("operators lock");
        let v = operators
            .get_mut(operator)
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let point = SwapPoint::shadowing(id, operator, plugin.clone(), v.workers, stats.clone());
        let record = self.record(id, operator, (&v.current, &plugin), Change::Shadow, v.workers);
        v.shadow = Some((id, plugin, stats));
        drop(operators);
        self.publish(record, point)
    }

    /// Swaps the shadow of `operator` in as its version (a swap, on
    /// probation), ending the shadow run.
    pub fn promote(self: &Arc<Self>, operator: &str) -> Result<SwapRecord, SwapError> {
        let (_, plugin, stats) = self.take_shadow(operator)?;
        stats.end(ShadowState::Promoted);
        tracing::info!(pipeline = %self.pipeline, operator, digest = %plugin.digest(), "shadow promoted");
        self.swap_to(operator, plugin)
    }

    /// Ends the shadow run of `operator`; the current version goes on.
    /// Returns the shadow's swap, as of now.
    pub fn abort(&self, operator: &str) -> Result<SwapRecord, SwapError> {
        let (id, plugin, stats) = self.take_shadow(operator)?;
        stats.end(ShadowState::Aborted);
        tracing::info!(pipeline = %self.pipeline, operator, digest = %plugin.digest(), "shadow aborted");
        self.swap_record(id)
    }

    /// The shadow running beside `operator`, if any.
    fn shadow_of(&self, operator: &str) -> Result<Option<Shadow>, SwapError> {
        let operators = self.operators.lock().expect("operators lock");
        let v = operators
            .get(operator)
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
        Ok(v.shadow.clone())
    }

    fn take_shadow(&self, operator: &str) -> Result<Shadow, SwapError> {
        let mut operators = self.operators.lock().expect("operators lock");
        let v = operators
            .get_mut(operator)
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
        v.shadow
            .take()
            .ok_or_else(|| SwapError::NoShadow(operator.to_owned()))
    }

    /// The component in `bytes` (the client's file `file`, named in
    /// refusals), stored by digest, compiled and checked against
    /// `operator`'s world. A refused component leaves the store.
    fn upload(
        &self,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
    ) -> Result<Arc<LoadedPlugin>, SwapError> {
        let (world, fueled) = self.kind_of(operator)?;
        let refused = |reason: String| SwapError::Refused {
            operator: operator.to_owned(),
            reason,
        };
        let shown = file.map_or_else(|| "the uploaded component".to_owned(), |f| format!("`{f}`"));
        let (path, new) = self
            .stored(bytes)
            .map_err(|e| refused(format!("storing {shown}: {e}")))?;
        self.engine.load_with(&path, world, operator, fueled).map_err(|e| {
            if new && let Err(removed) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %removed, "a refused component stays in the plugin store");
            }
            refused(refusal(&e, &path, &shown, world))
        })
    }

    /// Swaps `operator` to `plugin` and watches it over its probation.
    fn swap_to(self: &Arc<Self>, operator: &str, plugin: Arc<LoadedPlugin>) -> Result<SwapRecord, SwapError> {
        let counts = self.counts(operator)?;
        let record = self.switch(operator, plugin, Change::Swap)?;
        let swaps = Arc::clone(self);
        let (watched, id) = (operator.to_owned(), record.id);
        std::thread::Builder::new()
            .name("swap-probation".into())
            .spawn(move || swaps.watch(&watched, id, counts))
            .map_err(|e| SwapError::Refused {
                operator: operator.to_owned(),
                reason: format!("cannot watch the new version: {e}"),
            })?;
        Ok(record)
    }

    /// The operator's counts now: (records, failures).
    fn counts(&self, operator: &str) -> Result<(u64, u64), SwapError> {
        let operators = self.operators.lock().expect("operators lock");
        let v = operators
            .get(operator)
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
        Ok((
            v.failures.records.load(Ordering::Relaxed),
            v.failures.failures.load(Ordering::Relaxed),
        ))
    }

    /// Watches swap `id` of `operator` from the counts at its request until
    /// its probation's records passed, rolling it back when more than the
    /// allowed share of them failed. Ends early when another swap of the
    /// operator follows, or the pipeline stops.
    fn watch(&self, operator: &str, id: u64, (records0, failures0): (u64, u64)) {
        let allowed = (self.probation.share * self.probation.records as f64).floor() as u64;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(5));
            let newest = self
                .history
                .lock()
                .expect("history lock")
                .iter()
                .rev()
                .find(|e| e.record.operator == operator)
                .map(|e| e.record.id);
            if newest != Some(id) || self.shutdown.is_cancelled() {
                return;
            }
            let Ok((records, failures)) = self.counts(operator) else {
                return;
            };
            let (seen, failed) = (records - records0, failures - failures0);
            if failed > allowed {
                tracing::warn!(
                    pipeline = %self.pipeline,
                    operator,
                    failed,
                    seen,
                    "the new plugin version failed too often on probation: rolling it back"
                );
                if let Err(e) = self.roll_back(operator, Change::AutomaticRollback) {
                    tracing::error!(operator, error = %e, "the automatic rollback failed");
                }
                return;
            }
            if seen >= self.probation.records {
                tracing::info!(
                    operator,
                    failed,
                    seen,
                    "the new plugin version passed its probation"
                );
                return;
            }
        }
    }

    /// Swaps `operator` back to the version before the running one.
    pub fn rollback(&self, operator: &str) -> Result<SwapRecord, SwapError> {
        self.roll_back(operator, Change::Rollback)
    }

    fn roll_back(&self, operator: &str, change: Change) -> Result<SwapRecord, SwapError> {
        let previous = {
            let mut operators = self.operators.lock().expect("operators lock");
            let v = operators
                .get_mut(operator)
                .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
            let newest = v.previous.iter().rposition(|(_, rolled_back)| !rolled_back);
            let at = newest.ok_or_else(|| SwapError::NothingToRollBack(operator.to_owned()))?;
            v.previous.remove(at).0
        };
        self.switch(operator, previous, change)
    }

    /// The operator's world, and whether its plugins count fuel.
    fn kind_of(&self, operator: &str) -> Result<(World, bool), SwapError> {
        let operators = self.operators.lock().expect("operators lock");
        operators
            .get(operator)
            .map(|v| (v.world, v.current.fueled()))
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))
    }

    /// Writes `bytes` to the store as `<digest>.wasm` (once); its path, and
    /// whether it was written now.
    fn stored(&self, bytes: &[u8]) -> std::io::Result<(PathBuf, bool)> {
        let digest = hex::encode(Sha256::digest(bytes));
        let path = self.store.join(format!("{digest}.wasm"));
        if path.is_file() {
            return Ok((path, false));
        }
        std::fs::create_dir_all(&self.store)?;
        let tmp = self.store.join(format!("{digest}.tmp"));
        std::fs::write(&tmp, bytes)?;
        std::fs::File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        Ok((path, true))
    }

    fn switch(
        &self,
        operator: &str,
        plugin: Arc<LoadedPlugin>,
        change: Change,
    ) -> Result<SwapRecord, SwapError> {
        let mut operators = self.operators.lock().expect("operators lock");
        let v = operators
            .get_mut(operator)
            .ok_or_else(|| SwapError::NoOperator(operator.to_owned()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let record = self.record(id, operator, (&v.current, &plugin), change, v.workers);
        let point = SwapPoint::new(id, operator, plugin.clone(), v.workers);
        let old = std::mem::replace(&mut v.current, plugin);
        v.previous.push((old, record.rollback));
        drop(operators);
        self.publish(record, point)
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
        }
    }

    /// Puts `point` in the stream and `record` in the history.
    fn publish(&self, record: SwapRecord, point: SwapPoint) -> Result<SwapRecord, SwapError> {
        let point = Arc::new(point);
        self.control.request_swap(point.clone());
        tracing::info!(
            pipeline = %self.pipeline,
            operator = %record.operator,
            from = %record.from,
            to = %record.to,
            rollback = record.rollback,
            shadow = point.shadow.is_some(),
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

/// What a switch is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Swap,
    Rollback,
    AutomaticRollback,
    Shadow,
}
