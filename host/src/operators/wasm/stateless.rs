//! Map, filter and flat-map operators backed by a plugin.

use super::retry::{self, PluginCalls, fatal};
use crate::batch::Batch;
use crate::operators::branch::Predicate;
use crate::operators::{FailureHandler, Operator, OperatorError, ShadowStats};
use crate::plugin::{CallMode, LoadedPlugin, PluginInstance, World};
use crate::plugin::{Outcome, Outcomes, Raw, RecordOutcome};
use crate::record::Record;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A stateless operator whose logic is a plugin of the map, filter or
/// flat-map world. In batch mode its output stays encoded, so the next
/// plugin of the chain takes it without a decode. During a shadow run, a
/// second instance runs the shadow's plugin on the records it picks, and
/// the two outputs of each are compared.
pub struct WasmStateless {
    name: String,
    instance: PluginInstance,
    mode: CallMode,
    failure: FailureHandler,
    shadow: Option<ShadowRun>,
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
        }
    }

    /// Runs the shadow, if one runs, on the records of `input` it picks,
    /// and compares its outputs with `current`'s (the current version's
    /// outcome of record `i`, whose call took `took` for the whole input).
    fn shadow(&mut self, input: &Batch, current: &dyn Fn(usize) -> RecordOutcome, took: Duration) {
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
        let picked = Batch::Records(picks.iter().map(|&i| input.record(i)).collect());
        let outcomes: Vec<RecordOutcome> = match shadow.instance.batch_outcomes(&picked.encode(), picks.len())
        {
            Ok(Ok(outcomes)) => (0..picks.len()).map(|j| outcomes.owned(j)).collect(),
            // A failed call: one call per record, as for the current version.
            _ => picked
                .clone()
                .into_records()
                .iter()
                .map(|rec| {
                    one_outcome(&self.name, &mut shadow.instance, self.mode, rec)
                        .unwrap_or_else(|e| Err(e.to_string()))
                })
                .collect(),
        };
        shadow.stats.timed(input.len(), took, started.elapsed());
        for ((&i, rec), outcome) in picks.iter().zip(picked.into_records()).zip(&outcomes) {
            shadow.stats.compare(&rec, &current(i), outcome);
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
        match self.instance.batch_outcomes(&input.encode(), input.len()) {
            Err(e) => Err(fatal(&self.name, e)),
            Ok(Ok(outcomes)) => {
                self.shadow(&input, &|i| outcomes.owned(i), started.elapsed());
                self.apply_all(input, &outcomes).map(Ok)
            }
            Ok(Err(reason)) => Ok(Err((reason, input))),
        }
    }

    fn single(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let started = Instant::now();
        let outcome = self.one(&rec)?;
        if self.shadow.is_some() {
            let alone = Batch::Records(vec![rec.clone()]);
            self.shadow(&alone, &|_| outcome.clone(), started.elapsed());
        }
        self.apply_one(rec, outcome, out)
    }
}

impl Operator for WasmStateless {
    fn name(&self) -> &str {
        &self.name
    }

    fn swap_plugin(&mut self, plugin: &Arc<LoadedPlugin>) -> Result<(), OperatorError> {
        super::swap_instance(&self.name, &mut self.instance, plugin)
    }

    fn shadow_plugin(
        &mut self,
        plugin: &Arc<LoadedPlugin>,
        stats: &Arc<ShadowStats>,
    ) -> Result<(), OperatorError> {
        // A shadow that cannot start compares nothing; the pipeline goes on.
        match self.instance.sibling(plugin.clone()) {
            Ok(instance) => {
                self.shadow = Some(ShadowRun {
                    instance,
                    stats: stats.clone(),
                    seen: 0,
                });
            }
            Err(e) => {
                tracing::warn!(operator = %self.name, error = %e, "the shadow cannot start in this worker")
            }
        }
        Ok(())
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(input.len());
        retry::process(self, input)
    }
}
