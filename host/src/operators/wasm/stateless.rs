//! Map, filter and flat-map operators backed by a plugin.

use super::retry::{self, PluginCalls, fatal};
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::Operator;
use crate::operators::branch::Predicate;
use crate::plugin::{CallMode, PluginInstance, World};
use crate::plugin::{Outcome, Outcomes, Raw, RecordOutcome};
use crate::record::Record;
use crate::swap::{PluginSlot, SlotOwner, as_canary};
use std::time::Instant;

/// A stateless operator whose logic is a plugin of the map, filter or
/// flat-map world. In batch mode its output stays encoded, so the next
/// plugin of the chain takes it without a decode. Its slot runs shadows
/// (on the records they pick, the two outputs of each compared) and
/// canaries (on the records of their key groups).
pub struct WasmStateless {
    name: String,
    slot: PluginSlot,
    mode: CallMode,
    failure: FailureHandler,
}

impl WasmStateless {
    /// The operator `name` calling `instance` in `mode`.
    pub fn new(name: &str, instance: PluginInstance, mode: CallMode, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            slot: PluginSlot::new(name, instance).with_trials(),
            mode,
            failure,
        }
    }

    /// Runs `input` through the current version, and the records of the
    /// canary's key groups (when a canary runs) through the canary: the
    /// current version's outputs first, then the canary's.
    fn with_canary(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.slot.drop_ended_trials();
        if !self.slot.has_canary() {
            return retry::process(self, input);
        }
        let (theirs, ours): (Vec<Record>, Vec<Record>) = input
            .into_records()
            .into_iter()
            .partition(|r| self.slot.canary_takes(r.key.as_deref().unwrap_or_default()));
        let current = retry::process(self, Batch::Records(ours))?;
        if theirs.is_empty() {
            return Ok(current);
        }
        // Under `fail`, a record the canary fails on rolls it back instead
        // of ending the run, and the current version handles all of the
        // canary's records of the batch, in order (they keep no state: the
        // canary's outputs are simply dropped).
        let again = self.failure.hold_failures().then(|| theirs.clone());
        let records = theirs.len() as u64;
        let (mut canary, held) = as_canary(self, records, |me| retry::process(me, Batch::Records(theirs)))?;
        if let Some(again) = again.filter(|_| !held.is_empty()) {
            canary = retry::process(self, Batch::Records(again))?;
        }
        let mut all = current.into_records();
        all.extend(canary.into_records());
        Ok(Batch::Records(all))
    }

    /// Applies a whole batch's outcomes; failed records go to the policy.
    fn apply_all(&self, input: Batch, outcomes: &Outcomes) -> Result<Batch, OperatorError> {
        let fail = |i: usize, m| self.failure.fail(input.record(i), &outcomes.message(m));
        if self.slot.plugin().world() == World::Filter {
            let mut keep = Vec::with_capacity(input.len());
            for (i, raw) in outcomes.items().iter().enumerate() {
                keep.push(match *raw {
                    Raw::Keep(k) => k,
                    Raw::Failed(m) => {
                        fail(i, m)?;
                        false
                    }
                    _ => unreachable!("parsed as a filter output"),
                });
            }
            return Ok(input.select(&keep));
        }
        let mut spans = Vec::with_capacity(input.len());
        for (i, raw) in outcomes.items().iter().enumerate() {
            match *raw {
                Raw::Record(s) => spans.push(s),
                Raw::Records { first, count } => spans.extend_from_slice(outcomes.nested(first, count)),
                Raw::Failed(m) => fail(i, m)?,
                _ => unreachable!("parsed as a map or flat-map output"),
            }
        }
        Ok(Batch::Encoded(outcomes.encoded(spans)))
    }

    /// One record's outcome, alone (per-record mode, or after a failed
    /// batch call).
    fn one(&mut self, rec: &Record) -> Result<RecordOutcome, OperatorError> {
        one_outcome(&self.name, self.slot.instance(), self.mode, rec)
    }

    fn apply_one(
        &self,
        rec: Record,
        outcome: RecordOutcome,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        match outcome {
            Ok(Outcome::Record(r)) => out.push(r),
            Ok(Outcome::Keep(keep)) => {
                if keep {
                    out.push(rec);
                }
            }
            Ok(Outcome::Records(rs)) => out.extend(rs),
            Ok(Outcome::Accumulator(_)) => unreachable!("decoded by a stateless world"),
            Err(reason) => self.failure.fail(rec, &reason)?,
        }
        Ok(())
    }
}

/// `instance`'s outcome for `rec` alone, called in `mode`.
fn one_outcome(
    operator: &str,
    instance: &mut PluginInstance,
    mode: CallMode,
    rec: &Record,
) -> Result<RecordOutcome, OperatorError> {
    instance.outcome_alone(mode, rec).map_err(|e| fatal(operator, e))
}

/// A `filter`-world plugin as a branch's predicate: the records it keeps
/// hold. A failed batch call is retried record by record, as for a filter
/// operator, so a failure lands on its record.
pub struct WasmPredicate {
    name: String,
    instance: PluginInstance,
    mode: CallMode,
}

impl WasmPredicate {
    /// The predicate of branch operator `name`, calling `instance` in `mode`.
    pub fn new(name: &str, instance: PluginInstance, mode: CallMode) -> Self {
        Self {
            name: name.to_owned(),
            instance,
            mode,
        }
    }
}

impl Predicate for WasmPredicate {
    fn test(&mut self, batch: &Batch, failure: &FailureHandler) -> Result<Vec<Option<bool>>, OperatorError> {
        if self.mode == CallMode::Batch {
            match self.instance.batch_outcomes(&batch.encode(), batch.len()) {
                Err(e) => return Err(fatal(&self.name, e)),
                Ok(Ok(outcomes)) => {
                    let mut verdicts = Vec::with_capacity(batch.len());
                    for (i, raw) in outcomes.items().iter().enumerate() {
                        verdicts.push(match *raw {
                            Raw::Keep(k) => Some(k),
                            Raw::Failed(m) => {
                                failure.fail(batch.record(i), &outcomes.message(m))?;
                                None
                            }
                            _ => unreachable!("parsed as a filter output"),
                        });
                    }
                    return Ok(verdicts);
                }
                Ok(Err(reason)) => {
                    tracing::warn!(operator = %self.name, %reason, records = batch.len(),
                        "batch call failed; retrying its records one by one");
                }
            }
        }
        let mut verdicts = Vec::with_capacity(batch.len());
        for i in 0..batch.len() {
            let rec = batch.record(i);
            verdicts.push(
                match one_outcome(&self.name, &mut self.instance, self.mode, &rec)? {
                    Ok(Outcome::Keep(k)) => Some(k),
                    Ok(_) => unreachable!("decoded by the filter world"),
                    Err(reason) => {
                        failure.fail(rec, &reason)?;
                        None
                    }
                },
            );
        }
        Ok(verdicts)
    }
}

impl PluginCalls for WasmStateless {
    fn operator_name(&self) -> &str {
        &self.name
    }

    fn call_mode(&self) -> CallMode {
        self.mode
    }

    fn whole(&mut self, input: Batch) -> Result<Result<Batch, (String, Batch)>, OperatorError> {
        let started = Instant::now();
        let encoded = input.encode();
        let result = self.slot.instance().batch_outcomes(&encoded, input.len());
        if let Ok(Ok(outcomes)) = &result {
            let took = started.elapsed();
            let current = (&|i| outcomes.owned(i)) as &dyn Fn(usize) -> RecordOutcome;
            self.slot
                .shadow_batch(self.mode, &input, &encoded, (current, Some(outcomes)), took);
        }
        drop(encoded);
        match result {
            Err(e) => Err(fatal(&self.name, e)),
            Ok(Ok(outcomes)) => self.apply_all(input, &outcomes).map(Ok),
            Ok(Err(reason)) => Ok(Err((reason, input))),
        }
    }

    fn single(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let started = Instant::now();
        let outcome = self.one(&rec)?;
        if self.slot.has_shadow() {
            let alone = Batch::Records(vec![rec.clone()]);
            let encoded = alone.encode().into_owned();
            let current = (&|_| outcome.clone()) as &dyn Fn(usize) -> RecordOutcome;
            self.slot
                .shadow_batch(self.mode, &alone, &encoded, (current, None), started.elapsed());
        }
        self.apply_one(rec, outcome, out)
    }
}

impl Operator for WasmStateless {
    fn name(&self) -> &str {
        &self.name
    }

    fn plugin_slot(&mut self) -> Option<&mut PluginSlot> {
        Some(&mut self.slot)
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(input.len());
        self.with_canary(input)
    }
}

impl SlotOwner for WasmStateless {
    fn slot(&mut self) -> &mut PluginSlot {
        &mut self.slot
    }

    fn failure(&self) -> &FailureHandler {
        &self.failure
    }
}
