//! Map, filter and flat-map operators backed by a plugin.

use super::retry::{self, PluginCalls, fatal};
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::branch::Predicate;
use crate::operators::{CanaryState, CanaryStats, Operator, ShadowStats};
use crate::plugin::{CallMode, LoadedPlugin, PluginInstance, World};
use crate::plugin::{Outcome, Outcomes, Raw, RecordOutcome};
use crate::record::Record;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A stateless operator whose logic is a plugin of the map, filter or
/// flat-map world. In batch mode its output stays encoded, so the next
/// plugin of the chain takes it without a decode. During a shadow run, a
/// second instance runs the shadow's plugin on the records it picks, and
/// the two outputs of each are compared; during a canary, a second
/// instance runs the canary's plugin on the records of its key groups.
pub struct WasmStateless {
    name: String,
    instance: PluginInstance,
    mode: CallMode,
    failure: FailureHandler,
    shadow: Option<ShadowRun>,
    canary: Option<(PluginInstance, Arc<CanaryStats>)>,
}

/// A shadow run's instance in one worker.
struct ShadowRun {
    instance: PluginInstance,
    stats: Arc<ShadowStats>,
    /// Records this worker ran since the shadow started.
    seen: u64,
}

impl WasmStateless {
    /// The operator `name` calling `instance` in `mode`.
    pub fn new(name: &str, instance: PluginInstance, mode: CallMode, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            instance,
            mode,
            failure,
            shadow: None,
            canary: None,
        }
    }

    /// Runs `input` through the current version, and the records of the
    /// canary's key groups (when a canary runs) through the canary: the
    /// current version's outputs first, then the canary's.
    fn with_canary(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        if self.canary.as_ref().is_some_and(|(_, stats)| stats.rolled_back()) {
            self.canary = None;
        }
        let Some((mut instance, stats)) = self.canary.take() else {
            return retry::process(self, input);
        };
        let (theirs, ours): (Vec<Record>, Vec<Record>) = input
            .into_records()
            .into_iter()
            .partition(|r| stats.takes(r.key.as_deref().unwrap_or_default()));
        let mut out = retry::process(self, Batch::Records(ours));
        if !theirs.is_empty()
            && let Ok(current) = out
        {
            let records = theirs.len() as u64;
            std::mem::swap(&mut self.instance, &mut instance);
            let before = self.failure.failed_here();
            // Under `fail`, a record the canary fails on rolls it back
            // instead of ending the run, and the current version handles
            // all of the canary's records of the batch, in order (they
            // keep no state: the canary's outputs are simply dropped).
            let again = self.failure.hold_failures().then(|| theirs.clone());
            let mut canary = retry::process(self, Batch::Records(theirs));
            let failed = !self.failure.take_held().is_empty();
            stats.count(records, self.failure.failed_here() - before);
            std::mem::swap(&mut self.instance, &mut instance);
            if let Some(again) = again.filter(|_| failed) {
                if stats.end_running(CanaryState::RolledBack) {
                    tracing::warn!(operator = %self.name,
                        "the canary failed a record under on_error = \"fail\": rolled back, its key groups go back to the current version");
                }
                canary = retry::process(self, Batch::Records(again));
            }
            out = canary.map(|canary| {
                let mut all = current.into_records();
                all.extend(canary.into_records());
                Batch::Records(all)
            });
        }
        self.canary = Some((instance, stats));
        out
    }

    /// Runs the shadow, if one runs, on the records of `input` (encoded
    /// as `encoded`) it picks, and compares its outputs with the current
    /// version's: `current` gives record `i`'s, owned; `raw`, when the
    /// current version's call succeeded as a whole, all of them encoded,
    /// compared without a decode. The current version's call took `took`.
    fn shadow(
        &mut self,
        input: &Batch,
        encoded: &[u8],
        (current, raw): (&dyn Fn(usize) -> RecordOutcome, Option<&Outcomes>),
        took: Duration,
    ) {
        let Some(shadow) = &mut self.shadow else {
            return;
        };
        if shadow.stats.ended() {
            self.shadow = None;
            return;
        }
        let picks: Vec<usize> = (0..input.len())
            .filter(|_| {
                shadow.seen += 1;
                shadow.stats.picks(shadow.seen - 1)
            })
            .collect();
        if picks.is_empty() {
            shadow.stats.timed(input.len(), took, Duration::ZERO);
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
        match shadow.instance.batch_outcomes(&call, picks.len()) {
            Ok(Ok(theirs)) => {
                shadow.stats.timed(input.len(), took, started.elapsed());
                for (j, &i) in picks.iter().enumerate() {
                    match raw {
                        Some(ours) if ours.same(i, &theirs, j) => shadow.stats.matched(theirs.failed(j)),
                        _ => shadow
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
                        one_outcome(&self.name, &mut shadow.instance, self.mode, &input.record(i))
                            .unwrap_or_else(|e| Err(e.to_string()))
                    })
                    .collect();
                shadow.stats.timed(input.len(), took, started.elapsed());
                for (&i, outcome) in picks.iter().zip(&outcomes) {
                    shadow.stats.compare(&input.record(i), &current(i), outcome);
                }
            }
        }
    }

    /// Applies a whole batch's outcomes; failed records go to the policy.
    fn apply_all(&self, input: Batch, outcomes: &Outcomes) -> Result<Batch, OperatorError> {
        let fail = |i: usize, m| self.failure.fail(input.record(i), &outcomes.message(m));
        if self.instance.plugin().world() == World::Filter {
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
        one_outcome(&self.name, &mut self.instance, self.mode, rec)
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
    let res = match mode {
        CallMode::Record => instance.one_outcome(rec, None),
        CallMode::Batch => {
            let input = Batch::Records(vec![rec.clone()]).encode().into_owned();
            instance
                .batch_outcomes(&input, 1)
                .map(|r| r.and_then(|o| o.owned(0)))
        }
    };
    res.map_err(|e| fatal(operator, e))
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
        let result = self.instance.batch_outcomes(&encoded, input.len());
        if let Ok(Ok(outcomes)) = &result {
            let took = started.elapsed();
            self.shadow(&input, &encoded, (&|i| outcomes.owned(i), Some(outcomes)), took);
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
        if self.shadow.is_some() {
            let alone = Batch::Records(vec![rec.clone()]);
            let encoded = alone.encode().into_owned();
            self.shadow(&alone, &encoded, (&|_| outcome.clone(), None), started.elapsed());
        }
        self.apply_one(rec, outcome, out)
    }
}

impl Operator for WasmStateless {
    fn name(&self) -> &str {
        &self.name
    }

    fn swap_plugin(&mut self, plugin: &Arc<LoadedPlugin>) -> Result<(), OperatorError> {
        self.canary = None;
        super::swap_instance(&self.name, &mut self.instance, plugin)
    }

    fn canary_plugin(
        &mut self,
        plugin: &Arc<LoadedPlugin>,
        stats: &Arc<CanaryStats>,
    ) -> Result<(), OperatorError> {
        self.canary = super::trial_instance(&self.name, &self.instance, plugin, "canary")
            .map(|instance| (instance, stats.clone()));
        Ok(())
    }

    fn shadow_plugin(
        &mut self,
        plugin: &Arc<LoadedPlugin>,
        stats: &Arc<ShadowStats>,
    ) -> Result<(), OperatorError> {
        self.shadow =
            super::trial_instance(&self.name, &self.instance, plugin, "shadow").map(|instance| ShadowRun {
                instance,
                stats: stats.clone(),
                seen: 0,
            });
        Ok(())
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(input.len());
        self.with_canary(input)
    }
}
