//! Shadow runs: a new plugin version run beside the current one on the same
//! records — every record, or one in `1 / share` — on the same state, its
//! outputs compared with the current version's and thrown away; the
//! current version's output stays the pipeline's. Every worker of the
//! operator adds to one [`ShadowStats`] (each worker's run is its
//! `PluginSlot`'s); the admin API shows it until the shadow is promoted
//! (swapped in, on probation) or aborted ([`Swaps::shadow`],
//! [`Swaps::promote`], [`Swaps::abort`], which end canaries too).

use super::{CanaryState, Change, Shadow, SwapError, SwapKind, SwapRecord, Swaps};
use crate::plugin::{Outcome, RecordOutcome};
use crate::record::Record;
use crate::tap::record_line;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Mismatches kept to show, the first ones.
pub const MISMATCHES_KEPT: usize = 20;

/// Bytes of a key or value a kept mismatch shows.
const SHOWN_BYTES: usize = 4096;

/// Where a shadow run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ShadowState {
    /// Comparing.
    Running,
    /// Swapped in: it runs as the operator's version now.
    Promoted,
    /// Ended without a swap.
    Aborted,
    /// Ended because its instance could not go on (it failed and could
    /// not be made again): it cannot be promoted.
    Failed,
}

/// What a shadow run compared so far, shared by the operator's workers.
#[derive(Debug)]
pub struct ShadowStats {
    /// One record in `every` is compared.
    every: u64,
    share: f64,
    compared: AtomicU64,
    mismatches: AtomicU64,
    failures: AtomicU64,
    /// Records the current version ran while the shadow ran, and how long
    /// its calls took.
    current_records: AtomicU64,
    current_nanos: AtomicU64,
    /// How long the shadow's calls took (for the compared records).
    shadow_nanos: AtomicU64,
    first: Mutex<Vec<Mismatch>>,
    state: AtomicU8,
}

/// A record whose outputs differ: the input, the current version's output
/// and the shadow's.
#[derive(Debug, Clone, Serialize)]
pub struct Mismatch {
    /// The record both versions were given.
    pub input: Value,
    /// What the current version made of it.
    pub current: Value,
    /// What the shadow made of it.
    pub shadow: Value,
}

/// A shadow run as the admin API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct ShadowView {
    /// Where it is.
    pub state: ShadowState,
    /// The share of records compared.
    pub share: f64,
    /// Records compared.
    pub compared: u64,
    /// Compared records whose outputs differ (a shadow failure included).
    pub mismatches: u64,
    /// Compared records the shadow failed on (an error, a trap, a deadline).
    pub failures: u64,
    /// Mean time of the current version's calls per record, µs.
    pub current_us_per_record: f64,
    /// Mean time of the shadow's calls per compared record, µs.
    pub shadow_us_per_record: f64,
    /// The first mismatches (at most [`MISMATCHES_KEPT`]).
    pub first_mismatches: Vec<Mismatch>,
}

impl ShadowStats {
    /// A running shadow comparing `share` of the records (0 < share ≤ 1:
    /// one record in `round(1 / share)`).
    pub fn new(share: f64) -> Self {
        Self {
            every: (1.0 / share).round().max(1.0) as u64,
            share,
            compared: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            current_records: AtomicU64::new(0),
            current_nanos: AtomicU64::new(0),
            shadow_nanos: AtomicU64::new(0),
            first: Mutex::new(Vec::new()),
            state: AtomicU8::new(ShadowState::Running as u8),
        }
    }

    /// Whether a worker's `n`-th record (from 0) is compared.
    pub fn picks(&self, n: u64) -> bool {
        n.is_multiple_of(self.every)
    }

    /// Whether a worker's records `n..n + count`, compared together or
    /// not at all (a key's records in a process operator), are: when one
    /// of them would be alone.
    pub fn picks_among(&self, n: u64, count: u64) -> bool {
        n.div_ceil(self.every) * self.every < n + count
    }

    /// The current version ran `records` records in `took`; the shadow ran
    /// the compared ones among them in `shadow_took`.
    pub fn timed(&self, records: usize, took: Duration, shadow_took: Duration) {
        self.current_records.fetch_add(records as u64, Relaxed);
        self.current_nanos.fetch_add(took.as_nanos() as u64, Relaxed);
        self.shadow_nanos
            .fetch_add(shadow_took.as_nanos() as u64, Relaxed);
    }

    /// A compared record whose two outcomes are the same (`failed`: both
    /// failed alike).
    pub fn matched(&self, failed: bool) {
        self.compared.fetch_add(1, Relaxed);
        if failed {
            self.failures.fetch_add(1, Relaxed);
        }
    }

    /// Compares the outputs of `input`: the current version's and the
    /// shadow's.
    pub fn compare(&self, input: &Record, current: &RecordOutcome, shadow: &RecordOutcome) {
        self.compared.fetch_add(1, Relaxed);
        if shadow.is_err() {
            self.failures.fetch_add(1, Relaxed);
        }
        if current == shadow {
            return;
        }
        // Only the first ones are kept: past them, no lock.
        if self.mismatches.fetch_add(1, Relaxed) >= MISMATCHES_KEPT as u64 {
            return;
        }
        let mut first = self.first.lock().expect("mismatches lock");
        if first.len() < MISMATCHES_KEPT {
            first.push(Mismatch {
                input: record_line(&shown(input)),
                current: outcome_json(current),
                shadow: outcome_json(shadow),
            });
        }
    }

    /// Ends the run as `state` (promoted, aborted or failed); the workers drop
    /// their shadow instances at their next batch.
    pub fn end(&self, state: ShadowState) {
        self.state.store(state as u8, Relaxed);
    }

    /// Whether the run ended.
    pub fn ended(&self) -> bool {
        self.state() != ShadowState::Running
    }

    fn state(&self) -> ShadowState {
        match self.state.load(Relaxed) {
            0 => ShadowState::Running,
            1 => ShadowState::Promoted,
            2 => ShadowState::Aborted,
            _ => ShadowState::Failed,
        }
    }

    /// What it compared so far.
    pub fn view(&self) -> ShadowView {
        let compared = self.compared.load(Relaxed);
        let per =
            |nanos: &AtomicU64, records: u64| nanos.load(Relaxed) as f64 / 1000.0 / records.max(1) as f64;
        ShadowView {
            state: self.state(),
            share: self.share,
            compared,
            mismatches: self.mismatches.load(Relaxed),
            failures: self.failures.load(Relaxed),
            current_us_per_record: per(&self.current_nanos, self.current_records.load(Relaxed)),
            shadow_us_per_record: per(&self.shadow_nanos, compared),
            first_mismatches: self.first.lock().expect("mismatches lock").clone(),
        }
    }
}

/// `record` as a kept mismatch shows it: key and value cut at
/// [`SHOWN_BYTES`].
fn shown(record: &Record) -> Record {
    let mut record = record.clone();
    record.value.truncate(SHOWN_BYTES);
    if let Some(key) = &mut record.key {
        key.truncate(SHOWN_BYTES);
    }
    record
}

/// An outcome as JSON: a map's record, a filter's keep, a flat-map's
/// records, or the error.
fn outcome_json(outcome: &RecordOutcome) -> Value {
    match outcome {
        Ok(Outcome::Record(r)) => record_line(&shown(r)),
        Ok(Outcome::Keep(keep)) => json!({ "keep": keep }),
        Ok(Outcome::Records(rs)) => Value::Array(rs.iter().map(|r| record_line(&shown(r))).collect()),
        Ok(Outcome::Accumulator(a)) => json!({ "accumulator": String::from_utf8_lossy(a) }),
        Err(reason) => json!({ "error": reason }),
    }
}

impl Swaps {
    /// Runs the component in `bytes` (the client's file `file`) as a shadow
    /// of `operator` (a map, filter, flat-map, process or co-process
    /// operator): beside the current version on `share` of the records
    /// (0 < share ≤ 1), on the same state, its outputs compared and
    /// thrown away (see [`ShadowStats`]), until [`promote`](Self::promote)
    /// or [`abort`](Self::abort).
    pub fn shadow(
        self: &Arc<Self>,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
        share: f64,
    ) -> Result<SwapRecord, SwapError> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(SwapError::refused(
                operator,
                format!("the shadow's share is {share}: give one above 0 and at most 1 (1: every record)"),
            ));
        }
        let why = "a shadow reads the state as the current version keeps it";
        let plugin = self.trial_plugin(operator, "shadow runs", (bytes, file), why)?;
        self.start_trial(operator, plugin, Change::Shadow, |v, id, plugin| {
            let stats = Arc::new(ShadowStats::new(share));
            v.shadow = Some((id, plugin, stats.clone()));
            SwapKind::Shadow(stats)
        })
    }

    /// Swaps the shadow (or the canary) of `operator` in as its version —
    /// a shadow on probation, a canary at once, having passed its own —
    /// ending the trial.
    pub fn promote(self: &Arc<Self>, operator: &str) -> Result<SwapRecord, SwapError> {
        if let Some(canary) = self.take_canary(operator)? {
            return self.promote_canary(operator, canary);
        }
        let (_, plugin, stats) = self.take_shadow(operator)?;
        stats.end(ShadowState::Promoted);
        tracing::info!(pipeline = %self.pipeline, operator, digest = %plugin.digest(), "shadow promoted");
        self.swap_to(operator, plugin, Change::Swap)
    }

    /// Ends the shadow run (or the canary) of `operator`; the current
    /// version goes on (for every key). Returns the trial's swap, as of
    /// now.
    pub fn abort(&self, operator: &str) -> Result<SwapRecord, SwapError> {
        if let Some((id, plugin, stats)) = self.take_canary(operator)? {
            stats.end(CanaryState::RolledBack);
            tracing::info!(pipeline = %self.pipeline, operator, digest = %plugin.digest(), "canary rolled back");
            return self.swap_record(id);
        }
        let (id, plugin, stats) = self.take_shadow(operator)?;
        stats.end(ShadowState::Aborted);
        tracing::info!(pipeline = %self.pipeline, operator, digest = %plugin.digest(), "shadow aborted");
        self.swap_record(id)
    }

    fn take_shadow(&self, operator: &str) -> Result<Shadow, SwapError> {
        // One that failed (its instance could not go on) is no shadow to
        // promote or abort.
        self.versions(operator, |v| {
            v.shadow
                .take()
                .filter(|(_, _, stats)| !stats.ended())
                .ok_or_else(|| SwapError::NoTrial(operator.to_owned()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(value: &str) -> Record {
        Record::new(None, value.to_owned(), 1)
    }

    #[test]
    fn counts_what_differs_and_keeps_the_first_triples() {
        let stats = ShadowStats::new(1.0);
        let same = Ok(Outcome::Record(record("A")));
        stats.compare(&record("a"), &same, &same.clone());
        stats.compare(
            &record("b"),
            &Ok(Outcome::Record(record("B"))),
            &Ok(Outcome::Record(record("b!"))),
        );
        stats.compare(&record("c"), &Ok(Outcome::Keep(true)), &Err("boom".into()));
        let view = stats.view();
        assert_eq!((view.compared, view.mismatches, view.failures), (3, 2, 1));
        assert_eq!(view.first_mismatches[0].input["value"], "b");
        assert_eq!(view.first_mismatches[0].current["value"], "B");
        assert_eq!(view.first_mismatches[0].shadow["value"], "b!");
        assert_eq!(view.first_mismatches[1].shadow["error"], "boom");
        assert_eq!(view.state, ShadowState::Running);
        stats.end(ShadowState::Aborted);
        assert!(stats.ended());
    }

    #[test]
    fn a_share_picks_one_record_in_so_many_and_the_kept_triples_are_capped() {
        let stats = ShadowStats::new(0.1);
        assert_eq!((0..100).filter(|n| stats.picks(*n)).count(), 10);
        for i in 0..50 {
            stats.compare(
                &record(&i.to_string()),
                &Ok(Outcome::Keep(true)),
                &Ok(Outcome::Keep(false)),
            );
        }
        assert_eq!(stats.view().first_mismatches.len(), MISMATCHES_KEPT);
        assert_eq!(stats.view().mismatches, 50);
    }
}
