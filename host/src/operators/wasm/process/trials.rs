//! A process operator's trials of a new version: a canary, which handles
//! the keys of its key groups (their state handed to its instance for
//! their calls), and a shadow, which handles the same records as the
//! current version on the same state, its state changes dropped and its
//! outcomes compared with the current version's.

use super::WasmProcess;
use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::operators::{CanaryState, CanaryStats, ShadowState, ShadowStats};
use crate::plugin::{CallMode, PluginInstance, RecordOutcome};
use crate::record::Record;
use std::sync::Arc;
use std::time::Instant;

/// A shadow's instance in one worker, and the records it saw.
pub(super) struct Shadow {
    instance: PluginInstance,
    stats: Arc<ShadowStats>,
    seen: u64,
}

impl Shadow {
    /// A shadow of `stats` running `instance`.
    pub(super) fn new(instance: PluginInstance, stats: Arc<ShadowStats>) -> Self {
        Self {
            instance,
            stats,
            seen: 0,
        }
    }
}

impl WasmProcess {
    /// Drops a canary rolled back and a shadow ended since the last batch
    /// (done once per batch: a canary goes on for the rest of a batch it
    /// started).
    pub(super) fn drop_ended_trials(&mut self) {
        if self.canary.as_ref().is_some_and(|(_, stats)| stats.rolled_back()) {
            self.canary = None;
        }
        if self.shadow.as_ref().is_some_and(|s| s.stats.ended()) {
            self.shadow = None;
        }
    }

    /// Whether the canary handles `key` (not once it was rolled back).
    pub(super) fn canary_takes(&self, key: &[u8]) -> bool {
        self.canary
            .as_ref()
            .is_some_and(|(_, stats)| !stats.rolled_back() && stats.takes(key))
    }

    /// Runs `f` with the canary's instance in place of the current one (the
    /// keyed state moved over), counting `records` and the failures `f`
    /// met into the canary's stats. Under the `fail` policy a record the
    /// canary fails on rolls it back at once instead of ending the run:
    /// that record and the ones `f` held after it (see
    /// [`FailureHandler::holds_any`](crate::failure::FailureHandler::holds_any))
    /// are returned, untouched by the canary, for the current version.
    pub(super) fn as_canary(
        &mut self,
        records: u64,
        f: impl FnOnce(&mut Self) -> Result<(), OperatorError>,
    ) -> Result<Vec<Record>, OperatorError> {
        let (mut instance, stats): (PluginInstance, Arc<CanaryStats>) =
            self.canary.take().expect("a canary runs");
        self.trade_instance(&mut instance);
        stats.count(records, 0);
        let before = self.failure.failed_here();
        self.failure.hold_failures();
        let result = f(self);
        let held = self.failure.take_held();
        stats.count(0, self.failure.failed_here() - before);
        self.trade_instance(&mut instance);
        if !held.is_empty() && stats.end_running(CanaryState::RolledBack) {
            tracing::warn!(operator = %self.name,
                "the canary failed a record under on_error = \"fail\": rolled back, its key groups go back to the current version");
        }
        self.canary = Some((instance, stats));
        result.map(|()| held)
    }

    /// Puts `other` in place of the running instance, the keyed state
    /// staying in place.
    fn trade_instance(&mut self, other: &mut PluginInstance) {
        let keyed = self.instance.take_keyed();
        std::mem::swap(&mut self.instance, other);
        if let Some(keyed) = keyed {
            self.instance.set_keyed(keyed);
        }
    }

    /// One key's records through the current version and, when a running
    /// shadow picks them, through the shadow first: on the state as the
    /// current version finds it, the shadow's changes dropped, each
    /// record's two outcomes compared.
    pub(super) fn key_records_shadowed(
        &mut self,
        input: usize,
        key: &[u8],
        records: Vec<Record>,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        let Some(mut shadow) = self.shadow.take() else {
            return self.key_records(input, key, records, out);
        };
        let picked = shadow.stats.picks_among(shadow.seen, records.len() as u64);
        shadow.seen += records.len() as u64;
        if !picked {
            self.shadow = Some(shadow);
            return self.key_records(input, key, records, out);
        }
        self.trade_instance(&mut shadow.instance);
        let started = Instant::now();
        let tried = self.try_records(input, key, &records);
        let shadow_took = started.elapsed();
        self.trade_instance(&mut shadow.instance);
        let stats = shadow.stats.clone();
        let theirs = match tried {
            Ok(theirs) => theirs,
            Err(e) => {
                // Its instance cannot go on (it failed and could not be
                // made again): the shadow ends, never the operator.
                self.ctx().abort();
                stats.end(ShadowState::Failed);
                tracing::warn!(operator = %self.name, error = %e,
                    "the shadow's instance failed and cannot be made again: the shadow ends, the current version goes on");
                return self.key_records(input, key, records, out);
            }
        };
        self.shadow = Some(shadow);
        self.observed = Some(Vec::with_capacity(records.len()));
        let started = Instant::now();
        let result = self.key_records(input, key, records.clone(), out);
        let ours = self.observed.take().unwrap_or_default();
        result?;
        stats.timed(records.len(), started.elapsed(), shadow_took);
        for ((rec, current), shadow) in records.iter().zip(&ours).zip(&theirs) {
            stats.compare(rec, current, shadow);
        }
        Ok(())
    }

    /// Each record's outcome of the running instance on the key's state,
    /// none of its changes kept: one call for all, or one per record when
    /// that failed (each seeing the ones before).
    fn try_records(
        &mut self,
        input: usize,
        key: &[u8],
        records: &[Record],
    ) -> Result<Vec<RecordOutcome>, OperatorError> {
        let entered = self.enter(key)?;
        let outcomes = match entered {
            Err(reason) => records.iter().map(|_| Err(reason.clone())).collect(),
            Ok(()) => {
                let before = self.ctx().pending_changes();
                let batch = Batch::Records(records.to_vec());
                let whole = match self.mode {
                    CallMode::Batch => self
                        .whole_call(input, &batch)?
                        .map(|outcomes| (0..batch.len()).map(|i| outcomes.owned(i)).collect()),
                    CallMode::Record => Err(String::new()),
                };
                match whole {
                    Ok(outcomes) => outcomes,
                    Err(_) => {
                        // As the current version: one call per record,
                        // each keeping its changes (until the end) only
                        // when it succeeds.
                        self.ctx().undo_to(before.clone());
                        let mut kept = before;
                        let mut each = Vec::with_capacity(records.len());
                        for rec in records {
                            let outcome = self.record_call(input, rec)?;
                            match outcome.is_ok() {
                                true => kept = self.ctx().pending_changes(),
                                false => self.ctx().undo_to(kept.clone()),
                            }
                            each.push(outcome);
                        }
                        each
                    }
                }
            }
        };
        self.ctx().abort();
        Ok(outcomes)
    }

    /// `rec`'s outcome in a call of its own.
    pub(super) fn record_call(&mut self, input: usize, rec: &Record) -> Result<RecordOutcome, OperatorError> {
        let outcome = match (self.mode, self.two_inputs) {
            (CallMode::Record, false) => self.instance.one_outcome(rec, None),
            (CallMode::Record, true) => self.instance.one_input_outcome(input, rec),
            (CallMode::Batch, _) => {
                let batch = Batch::Records(vec![rec.clone()]);
                let call = self.call_input(input, &batch).into_owned();
                self.instance
                    .batch_outcomes(&call, 1)
                    .map(|r| r.and_then(|o| o.owned(0)))
            }
        };
        outcome.map_err(|e| super::fatal(&self.name, e))
    }
}
