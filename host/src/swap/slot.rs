//! The plugin slot: the plugin versions one worker of an operator runs —
//! its current instance, the trial beside it (a shadow or a canary), and,
//! for plugin-shaped keyed state, the state versions and the migration of
//! every key after an upgrade (a key's stale values go through the
//! plugin's `migrate` before the plugin handles the key; see
//! `state::context::migration`). An operator running a plugin holds a slot
//! where it would hold a bare instance, and hands it to the chain through
//! `Operator::plugin_slot` (in `operators`, which builds on this); a
//! swap point reaching the worker is [`PluginSlot::apply`]'d, so no
//! operator knows what a swap, a shadow or a canary is beyond asking its
//! slot which instance runs a record.

use super::{CanaryState, CanaryStats, ShadowStats, SwapKind, SwapPoint};
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::plugin::{CallError, CallMode, LoadedPlugin, Outcomes, PluginInstance, RecordOutcome};
use crate::record::Record;
use crate::state::{KeyedError, MigrationCursor, StateVersions};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The plugin versions of one worker of an operator.
pub struct PluginSlot {
    operator: String,
    current: PluginInstance,
    /// Whether it runs shadows and canaries (map, filter, flat-map,
    /// process and co-process operators).
    trials: bool,
    shadow: Option<ShadowRun>,
    canary: Option<CanaryRun>,
    /// The state versions of plugin-shaped keyed state (process and
    /// co-process operators); `None` for other operators.
    versions: Option<StateVersions>,
    /// Where the migration of every key is, while one goes on.
    eager: Option<MigrationCursor>,
}

/// A shadow's instance in one worker: it handles the records its stats
/// pick, on the same state, its outputs compared and thrown away.
pub struct ShadowRun {
    /// The shadow's instance.
    pub instance: PluginInstance,
    /// What every worker's shadow compared.
    pub stats: Arc<ShadowStats>,
    /// Records this worker handled since the shadow started.
    pub seen: u64,
}

/// A canary's instance in one worker: it handles the keys of its key
/// groups (their state handed to it for their calls).
struct CanaryRun {
    instance: PluginInstance,
    stats: Arc<CanaryStats>,
}

impl PluginSlot {
    /// Operator `operator`'s slot running `instance`: swaps, no trials.
    pub fn new(operator: &str, instance: PluginInstance) -> Self {
        Self {
            operator: operator.to_owned(),
            current: instance,
            trials: false,
            shadow: None,
            canary: None,
            versions: None,
            eager: None,
        }
    }

    /// The same slot running shadows and canaries too.
    pub fn with_trials(mut self) -> Self {
        self.trials = true;
        self
    }

    /// The same slot keeping the state versions of plugin-shaped keyed
    /// state, written from the start by the current plugin's version.
    pub fn with_state_versions(mut self) -> Self {
        self.versions = Some(StateVersions::at(self.current.plugin().state_version()));
        self
    }

    /// The same slot on state (restored from a checkpoint) at `unmarked`
    /// state version where keys have no mark of their own; each key
    /// migrates when first handled, or every key in the background when
    /// `every_key`.
    pub fn with_unmarked_state_version(mut self, unmarked: u32, every_key: bool) -> Self {
        if let Some(versions) = &mut self.versions {
            versions.unmarked = unmarked;
            if versions.migrating() {
                tracing::info!(operator = %self.operator, from = unmarked, to = versions.current,
                    "state written by an older state version: each key is migrated when first handled");
            }
        }
        if every_key {
            self.migrate_every_key();
        }
        self
    }

    /// The instance running the operator's records now.
    #[inline]
    pub fn instance(&mut self) -> &mut PluginInstance {
        &mut self.current
    }

    /// The plugin version running now.
    pub fn plugin(&self) -> &Arc<LoadedPlugin> {
        self.current.plugin()
    }

    /// The state versions of plugin-shaped keyed state, as snapshots
    /// record them (`None`: the operator keeps none).
    pub fn state_versions(&self) -> Option<StateVersions> {
        self.versions
    }

    /// A swap point reached this worker: runs its plugin in place of the
    /// current version (keeping the state), beside it (a shadow), or for
    /// the canary's key groups.
    pub fn apply(&mut self, point: &SwapPoint) -> Result<(), OperatorError> {
        let plugin = &point.plugin;
        match &point.kind {
            SwapKind::Replace => self.replace(plugin),
            SwapKind::Upgrade => {
                self.replace(plugin)?;
                self.migrate_every_key();
                Ok(())
            }
            SwapKind::Shadow(stats) => {
                self.shadow = self.trial_instance(plugin, "shadow")?.map(|instance| ShadowRun {
                    instance,
                    stats: stats.clone(),
                    seen: 0,
                });
                Ok(())
            }
            SwapKind::Canary(stats) => {
                self.canary = self.trial_instance(plugin, "canary")?.map(|instance| CanaryRun {
                    instance,
                    stats: stats.clone(),
                });
                Ok(())
            }
        }
    }

    /// Runs `plugin` from now on, keeping the state; a trial ends.
    fn replace(&mut self, plugin: &Arc<LoadedPlugin>) -> Result<(), OperatorError> {
        self.canary = None;
        self.shadow = None;
        let old = self
            .current
            .swap(plugin.clone())
            .map_err(|e| OperatorError::Swap {
                operator: self.operator.clone(),
                reason: e.to_string(),
            })?;
        tracing::debug!(operator = %self.operator, from = old.digest(), to = plugin.digest(), "plugin swapped");
        if let Some(versions) = &mut self.versions {
            versions.current = plugin.state_version();
            if versions.migrating() {
                tracing::info!(operator = %self.operator, from = versions.unmarked, to = versions.current,
                    "the new version's state version is higher: each key is migrated when first handled");
            }
        }
        Ok(())
    }

    /// A second instance running `plugin` for a `trial` (a shadow, a
    /// canary); refused in a slot that runs no trials (the swaps refuse
    /// them before any point); `None` (logged) when it cannot start: this
    /// worker then runs no trial and the pipeline goes on.
    fn trial_instance(
        &self,
        plugin: &Arc<LoadedPlugin>,
        trial: &str,
    ) -> Result<Option<PluginInstance>, OperatorError> {
        if !self.trials {
            return Err(OperatorError::Swap {
                operator: self.operator.clone(),
                reason: format!("it cannot run {} as a {trial}", plugin.path().display()),
            });
        }
        Ok(self
            .current
            .sibling(plugin.clone())
            .inspect_err(|e| {
                tracing::warn!(operator = %self.operator, error = %e, "the {trial} cannot start in this worker")
            })
            .ok())
    }

    /// Drops a canary rolled back and a shadow ended since the last batch
    /// (done once per batch: a canary goes on for the rest of a batch it
    /// started).
    pub fn drop_ended_trials(&mut self) {
        if self.canary.as_ref().is_some_and(|c| c.stats.rolled_back()) {
            self.canary = None;
        }
        if self.shadow.as_ref().is_some_and(|s| s.stats.ended()) {
            self.shadow = None;
        }
    }

    /// Whether a canary runs here (not once it was rolled back).
    pub fn has_canary(&self) -> bool {
        self.canary.as_ref().is_some_and(|c| !c.stats.rolled_back())
    }

    /// Whether the canary handles `key`.
    pub fn canary_takes(&self, key: &[u8]) -> bool {
        self.canary
            .as_ref()
            .is_some_and(|c| !c.stats.rolled_back() && c.stats.takes(key))
    }

    /// Takes the running shadow off the slot (put it back with
    /// [`PluginSlot::put_shadow`]); `None` when none runs.
    pub fn take_shadow(&mut self) -> Option<ShadowRun> {
        self.shadow.take()
    }

    /// Puts `shadow` back on the slot.
    pub fn put_shadow(&mut self, shadow: ShadowRun) {
        self.shadow = Some(shadow);
    }

    /// Whether a shadow runs here.
    pub fn has_shadow(&self) -> bool {
        self.shadow.is_some()
    }

    /// Puts `other` in place of the current instance, the keyed state
    /// staying in place (a trial's calls run on the operator's state).
    pub fn trade(&mut self, other: &mut PluginInstance) {
        let keyed = self.current.take_keyed();
        std::mem::swap(&mut self.current, other);
        if let Some(keyed) = keyed {
            self.current.set_keyed(keyed);
        }
    }

    /// After a swap to a plugin of a higher state version: migrate every
    /// key's state in the background, not only each key when next handled.
    fn migrate_every_key(&mut self) {
        if self.versions.is_some_and(|v| v.migrating()) {
            self.eager = Some(MigrationCursor::default());
        }
    }

    /// Whether keys may still be at an older state version than the
    /// current plugin's.
    pub fn migrating(&self) -> bool {
        self.versions.is_some_and(|v| v.migrating())
    }

    /// Migrates the state of the key in scope of the current instance to
    /// the current state version when it is older. `Ok(Err(reason))` when
    /// the plugin could not migrate one of its values: the key's records
    /// (or timer) then fail and its state stays as it was.
    pub fn migrate_key(&mut self) -> Result<Result<(), String>, OperatorError> {
        match self.versions {
            Some(versions) if versions.migrating() => {
                migrate_key(&self.operator, &mut self.current, versions)
            }
            _ => Ok(Ok(())),
        }
    }

    /// The cursor of the migration of every key, taken, while one goes on
    /// (give it back with [`PluginSlot::keep_migrating`]).
    pub fn take_migration(&mut self) -> Option<MigrationCursor> {
        self.eager.take().filter(|_| self.migrating())
    }

    /// The migration of every key goes on from `cursor`.
    pub fn keep_migrating(&mut self, cursor: MigrationCursor) {
        self.eager = Some(cursor);
    }

    /// Runs the shadow, if one runs, on the records of `input` (encoded
    /// as `encoded`) it picks, called in `mode`, and compares its outputs
    /// with the current version's: `current` gives record `i`'s, owned;
    /// `raw`, when the current version's call succeeded as a whole, all of
    /// them encoded, compared without a decode. The current version's call
    /// took `took`. For operators whose records are independent (map,
    /// filter, flat-map).
    pub fn shadow_batch(
        &mut self,
        mode: CallMode,
        input: &Batch,
        encoded: &[u8],
        (current, raw): (&dyn Fn(usize) -> RecordOutcome, Option<&Outcomes>),
        took: Duration,
    ) {
        // Only an ended shadow goes here: a canary stays until the next
        // batch, which may be running it (see `drop_ended_trials`).
        if self.shadow.as_ref().is_some_and(|s| s.stats.ended()) {
            self.shadow = None;
        }
        if let Some(shadow) = &mut self.shadow {
            shadow.compare_batch(mode, input, encoded, (current, raw), took);
        }
    }
}

impl ShadowRun {
    /// See [`PluginSlot::shadow_batch`].
    fn compare_batch(
        &mut self,
        mode: CallMode,
        input: &Batch,
        encoded: &[u8],
        (current, raw): (&dyn Fn(usize) -> RecordOutcome, Option<&Outcomes>),
        took: Duration,
    ) {
        let picks: Vec<usize> = (0..input.len())
            .filter(|_| {
                self.seen += 1;
                self.stats.picks(self.seen - 1)
            })
            .collect();
        if picks.is_empty() {
            self.stats.timed(input.len(), took, Duration::ZERO);
            return;
        }
        let started = Instant::now();
        let picked = match picks.len() == input.len() {
            true => None,
            false => Some(Batch::Records(picks.iter().map(|&i| input.record(i)).collect())),
        };
        let call = picked
            .as_ref()
            .map_or(std::borrow::Cow::Borrowed(encoded), |p| p.encode());
        match self.instance.batch_outcomes(&call, picks.len()) {
            Ok(Ok(theirs)) => {
                self.stats.timed(input.len(), took, started.elapsed());
                for (j, &i) in picks.iter().enumerate() {
                    match raw {
                        Some(ours) if ours.same(i, &theirs, j) => self.stats.matched(theirs.failed(j)),
                        _ => self
                            .stats
                            .compare(&input.record(i), &current(i), &theirs.owned(j)),
                    }
                }
            }
            // A failed call: one call per record, as for the current version.
            _ => {
                let outcomes: Vec<RecordOutcome> = picks
                    .iter()
                    .map(|&i| {
                        self.instance
                            .outcome_alone(mode, &input.record(i))
                            .unwrap_or_else(|e| Err(e.to_string()))
                    })
                    .collect();
                self.stats.timed(input.len(), took, started.elapsed());
                for (&i, outcome) in picks.iter().zip(&outcomes) {
                    self.stats.compare(&input.record(i), &current(i), outcome);
                }
            }
        }
    }
}

/// What an operator running canaries gives [`as_canary`]: its slot and
/// its failure policy.
pub trait SlotOwner {
    /// The operator's plugin slot.
    fn slot(&mut self) -> &mut PluginSlot;

    /// The operator's failure policy.
    fn failure(&self) -> &FailureHandler;
}

/// Runs `f` on `owner` with the canary's instance in place of the current
/// one (the keyed state staying), counting `records` and the failures `f`
/// met into the canary's stats. Under the `fail` policy a record the
/// canary fails on rolls it back at once instead of ending the run: that
/// record and the ones `f` held after it (see
/// [`FailureHandler::holds_any`]) come back, untouched by the canary, for
/// the current version. A canary must run (see [`PluginSlot::has_canary`]).
pub fn as_canary<O: SlotOwner, T>(
    owner: &mut O,
    records: u64,
    f: impl FnOnce(&mut O) -> Result<T, OperatorError>,
) -> Result<(T, Vec<Record>), OperatorError> {
    let mut canary = owner.slot().canary.take().expect("a canary runs");
    owner.slot().trade(&mut canary.instance);
    canary.stats.count(records, 0);
    let before = owner.failure().failed_here();
    owner.failure().hold_failures();
    let result = f(owner);
    let held = owner.failure().take_held();
    canary.stats.count(0, owner.failure().failed_here() - before);
    owner.slot().trade(&mut canary.instance);
    if !held.is_empty() && canary.stats.end_running(CanaryState::RolledBack) {
        tracing::warn!(operator = %owner.slot().operator,
            "the canary failed a record under on_error = \"fail\": rolled back, its key groups go back to the current version");
    }
    owner.slot().canary = Some(canary);
    result.map(|out| (out, held))
}

/// Migrates the state of the key in scope of `instance` (operator
/// `operator`) to `versions.current` when it is older. `Ok(Err(reason))`
/// when the plugin could not migrate one of its values: the key's records
/// (or timer) then fail and its state stays as it was.
fn migrate_key(
    operator: &str,
    instance: &mut PluginInstance,
    versions: StateVersions,
) -> Result<Result<(), String>, OperatorError> {
    let ctx = instance
        .keyed()
        .expect("a process operator's instance holds keyed state");
    let (from, stale) = match ctx.stale_values(versions) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Ok(())),
        Err(KeyedError::Backend(e)) => return Err(OperatorError::state(operator, e)),
        Err(refused) => return Ok(Err(format!("migrating the key's state: {refused}"))),
    };
    let to = versions.current;
    let mut migrated = Vec::with_capacity(stale.len());
    for value in stale {
        match instance.call_migrate(from, &value.name, &value.value) {
            Ok(Ok(bytes)) => migrated.push((value, bytes)),
            Ok(Err(reason)) => {
                return Ok(Err(format!(
                    "migrating state `{}` from state version {from} to {to}: {reason}",
                    value.name
                )));
            }
            Err(CallError::Instantiate(e)) => {
                return Err(OperatorError::Plugin {
                    operator: operator.to_owned(),
                    reason: e.to_string(),
                });
            }
            Err(e) => {
                return Ok(Err(format!(
                    "migrating state `{}` from state version {from} to {to}: {e}",
                    value.name
                )));
            }
        }
    }
    let ctx = instance.keyed().expect("checked above");
    match ctx.put_migrated(to, migrated) {
        Ok(()) => Ok(Ok(())),
        Err(KeyedError::Backend(e)) => Err(OperatorError::state(operator, e)),
        Err(refused) => Ok(Err(format!("migrating the key's state: {refused}"))),
    }
}
