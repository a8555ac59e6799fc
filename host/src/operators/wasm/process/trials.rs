//! A process operator's shadow of a new version, which handles the same
//! records as the current version on the same state, its state changes
//! dropped and its outcomes compared with the current version's (its
//! canary, which handles the keys of its key groups, is the slot's
//! `as_canary` around the operator's own calls).

use super::WasmProcess;
use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::plugin::{CallMode, RecordOutcome};
use crate::record::Record;
use crate::swap::ShadowState;
use std::time::Instant;

impl WasmProcess {
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
        let Some(mut shadow) = self.slot.take_shadow() else {
            return self.key_records(input, key, records, out);
        };
        let picked = shadow.stats.picks_among(shadow.seen, records.len() as u64);
        shadow.seen += records.len() as u64;
        if !picked {
            self.slot.put_shadow(shadow);
            return self.key_records(input, key, records, out);
        }
        self.slot.trade(&mut shadow.instance);
        let started = Instant::now();
        let tried = self.try_records(input, key, &records);
        let shadow_took = started.elapsed();
        self.slot.trade(&mut shadow.instance);
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
        self.slot.put_shadow(shadow);
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
            (CallMode::Record, false) => self.slot.instance().one_outcome(rec, None),
            (CallMode::Record, true) => self.slot.instance().one_input_outcome(input, rec),
            (CallMode::Batch, _) => {
                let batch = Batch::Records(vec![rec.clone()]);
                let call = self.call_input(input, &batch).into_owned();
                self.slot
                    .instance()
                    .batch_outcomes(&call, 1)
                    .map(|r| r.and_then(|o| o.owned(0)))
            }
        };
        outcome.map_err(|e| super::fatal(&self.name, e))
    }
}
