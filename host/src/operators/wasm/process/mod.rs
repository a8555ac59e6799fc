//! The keyed process operator: a plugin of the process world handles each
//! record and each due timer of a key, with the key's state and timers
//! behind its imports.
//!
//! A batch is split by key (keeping each key's order) and each key's records
//! go in one call, so a call only ever sees one key. A call's state changes
//! are kept only when every record of it succeeded; otherwise they are
//! dropped and the records go one per call, so a failed record changes no
//! state and the others count once.
//!
//! Before the plugin handles a key, a key whose state an older state
//! version wrote is migrated (see `migrate`); a failed migration fails the
//! key's records (or timer) under the failure policy.
//!
//! Event-time timers fire when the watermark reaches them, processing-time
//! timers when the source's processing-time ticks do, in time order; at the
//! end of the input every event-time timer fires. A timer that a timer
//! callback registers at or before the time being fired waits for the next
//! advance.

mod trials;

use super::retry::fatal;
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::Operator;
use crate::plugin::{CallError, CallMode, PluginInstance, World};
use crate::plugin::{Outcome, Outcomes, Raw, RecordOutcome};
use crate::record::Record;
use crate::state::{KeyedContext, TimeDomain};
use crate::swap::{PluginSlot, SlotOwner, as_canary};
use bytes::Bytes;
use std::borrow::Cow;
use std::collections::HashMap;

/// A keyed process function backed by a plugin of the process world, or
/// of the co-process world (two inputs sharing each key's state and
/// timers: a batch call then starts with its input's number).
pub struct WasmProcess {
    name: String,
    /// The plugin versions it runs, with the keyed state behind the
    /// current instance's imports, and their state versions.
    slot: PluginSlot,
    mode: CallMode,
    failure: FailureHandler,
    /// Per time domain: every timer at or before this has fired.
    fired_upto: [i64; 2],
    two_inputs: bool,
    /// While a shadow compares: the current version's outcome of each
    /// record handled.
    observed: Option<Vec<RecordOutcome>>,
}

/// How many keys an eager migration migrates after each batch.
const EAGER_KEYS_PER_BATCH: usize = 64;

impl WasmProcess {
    /// The operator `name` calling `instance` in `mode`, with the key's
    /// state and timers in `keyed`.
    pub fn new(
        name: &str,
        instance: PluginInstance,
        keyed: KeyedContext,
        mode: CallMode,
        failure: FailureHandler,
    ) -> Self {
        Self {
            name: name.to_owned(),
            two_inputs: instance.plugin().world() == World::CoProcess,
            slot: PluginSlot::new(name, instance.with_keyed(keyed))
                .with_trials()
                .with_state_versions(),
            mode,
            failure,
            fired_upto: [i64::MIN; 2],
            observed: None,
        }
    }

    /// The same operator on state (restored from a checkpoint) at
    /// `unmarked` state version where keys have no mark of their own;
    /// every key migrated in the background when `every_key`.
    pub fn with_unmarked_state_version(mut self, unmarked: u32, every_key: bool) -> Self {
        self.slot = self.slot.with_unmarked_state_version(unmarked, every_key);
        self
    }

    /// Migrates the next keys of an eager migration, if one goes on (after
    /// each batch: the records wait for at most this many keys).
    fn migrate_next_keys(&mut self) -> Result<(), OperatorError> {
        let Some(mut cursor) = self.slot.take_migration() else {
            return Ok(());
        };
        let name = self.name.clone();
        let keys = self
            .ctx()
            .next_keys(&mut cursor, EAGER_KEYS_PER_BATCH)
            .map_err(|e| OperatorError::state(&name, e))?;
        if keys.is_empty() {
            let version = self.slot.state_versions().map(|v| v.current);
            tracing::info!(operator = %self.name, version, "every key of this worker is migrated");
            return Ok(());
        }
        for key in keys {
            match self.enter(&key)? {
                Ok(()) => self.finish(true)?,
                Err(reason) => {
                    self.finish(false)?;
                    tracing::warn!(operator = %self.name, key = %String::from_utf8_lossy(&key), %reason,
                        "migrating a key failed: it is migrated again when next handled");
                }
            }
        }
        self.slot.keep_migrating(cursor);
        Ok(())
    }

    /// Scopes the state to `key` and migrates it when an older state
    /// version wrote it; `Ok(Err(reason))` when that failed.
    fn enter(&mut self, key: &[u8]) -> Result<Result<(), String>, OperatorError> {
        self.ctx().enter(key);
        self.slot.migrate_key()
    }

    /// The batch export's input for `batch` of input `input`.
    fn call_input<'a>(&self, input: usize, batch: &'a Batch) -> Cow<'a, [u8]> {
        let encoded = batch.encode();
        if !self.two_inputs {
            return encoded;
        }
        let mut with_input = Vec::with_capacity(encoded.len() + 1);
        with_input.push(input as u8);
        with_input.extend_from_slice(&encoded);
        Cow::Owned(with_input)
    }

    fn ctx(&mut self) -> &mut KeyedContext {
        self.slot
            .instance()
            .keyed()
            .expect("a process operator's instance holds keyed state")
    }

    /// Ends a call: keeps its state changes when `ok`, drops them otherwise.
    /// A backend failure during the call stops the operator.
    fn finish(&mut self, ok: bool) -> Result<(), OperatorError> {
        let name = self.name.clone();
        let ctx = self.ctx();
        if let Some(e) = ctx.take_backend_error() {
            ctx.abort();
            return Err(OperatorError::state(&name, e));
        }
        if ok {
            ctx.commit().map_err(|e| OperatorError::state(&name, e))
        } else {
            ctx.abort();
            Ok(())
        }
    }

    /// One key's records: one call for all, or one per record when that
    /// call (or any record of it) failed.
    fn key_records(
        &mut self,
        input: usize,
        key: &[u8],
        records: Vec<Record>,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        let records = match self.mode {
            CallMode::Record => records,
            CallMode::Batch => {
                if let Err(reason) = self.enter(key)? {
                    self.finish(false)?;
                    for rec in records {
                        self.observe(Err(reason.clone()));
                        self.failure.fail(rec, &reason)?;
                    }
                    return Ok(());
                }
                let batch = Batch::Records(records);
                let reason = match self.whole_call(input, &batch)? {
                    Ok(outcomes) => {
                        self.finish(true)?;
                        if let Some(seen) = &mut self.observed {
                            seen.extend((0..batch.len()).map(|i| outcomes.owned(i)));
                        }
                        let mut spans = Vec::new();
                        for raw in outcomes.items() {
                            if let Raw::Records { first, count } = *raw {
                                spans.extend_from_slice(outcomes.nested(first, count));
                            }
                        }
                        out.extend(Batch::Encoded(outcomes.encoded(spans)).into_records());
                        return Ok(());
                    }
                    Err(reason) => reason,
                };
                self.finish(false)?;
                if batch.len() > 1 {
                    tracing::warn!(operator = %self.name, %reason, records = batch.len(),
                        "call failed; retrying its records one by one");
                }
                batch.into_records()
            }
        };
        for rec in records {
            // A canary failed one of them under `fail`: the rest wait for
            // the current version too, in order.
            if self.failure.holds_any() {
                self.failure.hold(rec);
                continue;
            }
            self.one_record(input, key, rec, out)?;
        }
        Ok(())
    }

    fn one_record(
        &mut self,
        input: usize,
        key: &[u8],
        rec: Record,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        if let Err(reason) = self.enter(key)? {
            self.finish(false)?;
            self.observe(Err(reason.clone()));
            self.failure.fail(rec, &reason)?;
            return Ok(());
        }
        let outcome = self.record_call(input, &rec)?;
        if self.observed.is_some() {
            self.observe(outcome.clone());
        }
        match outcome {
            Ok(Outcome::Records(records)) => {
                self.finish(true)?;
                out.extend(records);
            }
            Ok(_) => unreachable!("decoded by the process world"),
            Err(reason) => {
                self.finish(false)?;
                self.failure.fail(rec, &reason)?;
            }
        }
        Ok(())
    }

    /// The outcomes of one batch call for `batch` of input `input`, or why
    /// it (or one of its records) failed.
    fn whole_call(&mut self, input: usize, batch: &Batch) -> Result<Result<Outcomes, String>, OperatorError> {
        let call = self.call_input(input, batch).into_owned();
        let result = self
            .slot
            .instance()
            .batch_outcomes(&call, batch.len())
            .map_err(|e| fatal(&self.name, e))?;
        Ok(result.and_then(|outcomes| {
            let failed = outcomes.items().iter().find_map(|r| match r {
                Raw::Failed(m) => Some(outcomes.message(*m)),
                _ => None,
            });
            failed.map_or(Ok(outcomes), Err)
        }))
    }

    /// Keeps `outcome` for a shadow's comparison, when one compares.
    fn observe(&mut self, outcome: RecordOutcome) {
        if let Some(seen) = &mut self.observed {
            seen.push(outcome);
        }
    }

    /// Fires every timer of `domain` due at `upto`, in time order.
    fn fire(&mut self, domain: TimeDomain, upto: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let i = domain.index();
        let next = self.fired_upto[i].saturating_add(1);
        let from = self
            .ctx()
            .take_earliest_timer(domain)
            .map_or(next, |t| t.min(next));
        self.fired_upto[i] = self.fired_upto[i].max(upto);
        if from > upto {
            return Ok(());
        }
        let name = self.name.clone();
        self.slot.drop_ended_trials();
        let due = self
            .ctx()
            .take_due_timers(domain, from, upto)
            .map_err(|e| OperatorError::state(&name, e))?;
        for (at, key) in due {
            // Timers are no records: only their failures count.
            if self.slot.canary_takes(&key) {
                let ((), failed) = as_canary(self, 0, |me| me.timer(domain, at, key.clone(), out))?;
                if !failed.is_empty() {
                    // The canary failed it under `fail` (its changes
                    // dropped): the current version fires it.
                    self.timer(domain, at, key, out)?;
                }
            } else {
                self.timer(domain, at, key, out)?;
            }
        }
        Ok(())
    }

    /// Fires `key`'s timer at `at`.
    fn timer(
        &mut self,
        domain: TimeDomain,
        at: i64,
        key: Vec<u8>,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        let result = match self.enter(&key)? {
            Err(reason) => Err(reason),
            Ok(()) => match self.slot.instance().call_on_timer(&key, domain, at) {
                Ok(result) => result,
                Err(CallError::Instantiate(e)) => return Err(fatal(&self.name, e)),
                Err(e) => Err(e.to_string()),
            },
        };
        match result {
            Ok(records) => {
                self.finish(true)?;
                out.extend(records);
            }
            Err(reason) => {
                self.finish(false)?;
                self.failure.fail(timer_record(key, domain, at), &reason)?;
            }
        }
        Ok(())
    }
}

/// What a failed timer looks like to the failure policy (and the dead-letter
/// sink): the key, and the timer as the value.
fn timer_record(key: Vec<u8>, domain: TimeDomain, at: i64) -> Record {
    let domain = match domain {
        TimeDomain::EventTime => "event-time",
        TimeDomain::ProcessingTime => "processing-time",
    };
    let value = format!(r#"{{"timer":{at},"domain":"{domain}"}}"#);
    Record::new(Some(Bytes::from(key)), value, at)
}

/// The records of a batch grouped by key, keys in order of first
/// appearance, each key's records in order.
fn by_key(records: Vec<Record>) -> Vec<(Bytes, Vec<Record>)> {
    let mut slot: HashMap<Bytes, usize> = HashMap::new();
    let mut groups: Vec<(Bytes, Vec<Record>)> = Vec::new();
    for rec in records {
        let key = rec.key.clone().unwrap_or_default();
        let i = *slot.entry(key.clone()).or_insert_with(|| {
            groups.push((key, Vec::new()));
            groups.len() - 1
        });
        groups[i].1.push(rec);
    }
    groups
}

impl Operator for WasmProcess {
    fn name(&self) -> &str {
        &self.name
    }

    fn plugin_slot(&mut self) -> Option<&mut PluginSlot> {
        Some(&mut self.slot)
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.process_input(0, input)
    }

    fn process_input(&mut self, input: usize, batch: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(batch.len());
        let mut out = Vec::new();
        let mut canary_keys = Vec::new();
        self.slot.drop_ended_trials();
        for (key, records) in by_key(batch.into_records()) {
            if self.slot.canary_takes(&key) {
                canary_keys.push((key, records));
            } else {
                self.key_records_shadowed(input, &key, records, &mut out)?;
            }
        }
        if !canary_keys.is_empty() {
            let records = canary_keys.iter().map(|(_, r)| r.len() as u64).sum();
            let ((), failed) = as_canary(self, records, |me| {
                for (key, records) in canary_keys {
                    if me.failure.holds_any() {
                        records.into_iter().for_each(|rec| me.failure.hold(rec));
                    } else {
                        me.key_records(input, &key, records, &mut out)?;
                    }
                }
                Ok(())
            })?;
            // What the canary failed under `fail`, and what came after it:
            // the current version's (the canary rolled back).
            for (key, records) in by_key(failed) {
                self.key_records(input, &key, records, &mut out)?;
            }
        }
        self.migrate_next_keys()?;
        Ok(Batch::Records(out))
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        self.ctx().set_watermark(watermark);
        self.fire(TimeDomain::EventTime, watermark, out)
    }

    fn on_processing_time(&mut self, now: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        self.fire(TimeDomain::ProcessingTime, now, out)
    }

    fn on_end(&mut self, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        self.ctx().set_watermark(i64::MAX);
        self.fire(TimeDomain::EventTime, i64::MAX, out)
    }

    fn query_state(
        &mut self,
        request: &crate::state::StateRequest,
    ) -> Option<Result<crate::state::Answer, OperatorError>> {
        let name = self.name.clone();
        Some(
            self.ctx()
                .query(request)
                .map_err(|e| OperatorError::state(&name, e)),
        )
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        let name = self.name.clone();
        self.ctx()
            .snapshot(dir)
            .map_err(|e| OperatorError::state(&name, e))?;
        Ok(true)
    }
}

impl SlotOwner for WasmProcess {
    fn slot(&mut self) -> &mut PluginSlot {
        &mut self.slot
    }

    fn failure(&self) -> &FailureHandler {
        &self.failure
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grouping_keeps_each_keys_order() {
        let rec = |k: &'static str, v: &'static str| Record::new(Some(Bytes::from(k)), v, 0);
        let groups = by_key(vec![rec("a", "1"), rec("b", "2"), rec("a", "3")]);
        let shown: Vec<(Bytes, Vec<Bytes>)> = groups
            .into_iter()
            .map(|(k, rs)| (k, rs.into_iter().map(|r| r.value).collect()))
            .collect();
        assert_eq!(
            shown,
            vec![
                (Bytes::from("a"), vec![Bytes::from("1"), Bytes::from("3")]),
                (Bytes::from("b"), vec![Bytes::from("2")]),
            ]
        );
    }
}

#[cfg(test)]
mod trial_model_tests;
