//! Canaries: a new plugin version handles the records of a share of the key
//! groups — the first `ceil(share × key_groups)` of them — while the current
//! version handles the rest. A key's records (and its state, its timers)
//! stay with one version for the whole canary. Every worker of the operator
//! adds the canary's records and failures to one [`CanaryStats`];
//! [`Swaps::canary`] watches it over its probation, promoting it to the
//! operator's version once it handled `probation_records` records failing
//! at most `rollback_failure_share` of them, and rolling it back (the
//! current version taking its keys back) as soon as it fails more.

use super::{Canary, Change, SwapError, SwapKind, SwapRecord, Swaps};
use crate::failure::FailureStats;
use serde::Serialize;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Where a canary is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CanaryState {
    /// Handling its key groups.
    Running,
    /// Swapped in for every key.
    Promoted,
    /// Ended: the current version handles every key again.
    RolledBack,
}

/// What a canary did so far, shared by the operator's workers.
#[derive(Debug)]
pub struct CanaryStats {
    share: f64,
    key_groups: u32,
    /// Key groups below this are the canary's.
    canary_groups: u32,
    records: AtomicU64,
    failures: AtomicU64,
    state: AtomicU8,
    /// The operator's counts (both versions), and what they were when the
    /// canary started: the current version's share is the rest.
    operator: Arc<FailureStats>,
    baseline: (u64, u64),
    started: Instant,
    /// The current version's counts and the time when the canary ended.
    ended: Mutex<Option<((u64, u64), u64)>>,
}

/// A canary as the admin API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CanaryView {
    /// Where it is.
    pub state: CanaryState,
    /// The share of key groups asked for.
    pub share: f64,
    /// The key groups the canary handles: `0..key_groups_canary`.
    pub key_groups_canary: u32,
    /// The pipeline's key groups.
    pub key_groups: u32,
    /// Records the canary handled.
    pub records: u64,
    /// Records (and timers) it failed on.
    pub failures: u64,
    /// Records the current version handled meanwhile (the other keys).
    pub current_records: u64,
    /// Records the current version failed on meanwhile.
    pub current_failures: u64,
    /// How long it ran (so far), ms: each version's rate is its records
    /// over this.
    pub elapsed_ms: u64,
}

impl CanaryStats {
    /// A canary on `share` (above 0, below 1) of `key_groups` key groups
    /// of the operator counting into `operator`.
    pub fn new(share: f64, key_groups: u32, operator: Arc<FailureStats>) -> Self {
        let canary_groups = ((share * f64::from(key_groups)).ceil() as u32).clamp(1, key_groups);
        let baseline = (operator.records.load(Relaxed), operator.failures.load(Relaxed));
        Self {
            share,
            key_groups,
            canary_groups,
            records: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            state: AtomicU8::new(CanaryState::Running as u8),
            operator,
            baseline,
            started: Instant::now(),
            ended: Mutex::new(None),
        }
    }

    /// The current version's (records, failures) since the canary
    /// started, and the ms since then.
    fn current(&self) -> ((u64, u64), u64) {
        if let Some(ended) = *self.ended.lock().expect("canary lock") {
            return ended;
        }
        let (records, failures) = self.counts();
        let all = (
            self.operator.records.load(Relaxed) - self.baseline.0,
            self.operator.failures.load(Relaxed) - self.baseline.1,
        );
        let current = (all.0.saturating_sub(records), all.1.saturating_sub(failures));
        (current, self.started.elapsed().as_millis() as u64)
    }

    /// Whether the canary handles the records of `key` (the empty key for
    /// records without one).
    pub fn takes(&self, key: &[u8]) -> bool {
        crate::key_group::of_key(key, self.key_groups) < self.canary_groups
    }

    /// The canary handled `records` more, failing `failures` of them.
    pub fn count(&self, records: u64, failures: u64) {
        self.records.fetch_add(records, Relaxed);
        self.failures.fetch_add(failures, Relaxed);
    }

    /// (records, failures) so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.records.load(Relaxed), self.failures.load(Relaxed))
    }

    /// Marks the canary `state` (promoted or rolled back), its counts
    /// as of now final.
    pub fn end(&self, state: CanaryState) {
        let now = self.current();
        *self.ended.lock().expect("canary lock") = Some(now);
        self.state.store(state as u8, Relaxed);
    }

    /// Ends a running canary as `state` (promoted, or rolled back at once
    /// when it failed a record under the `fail` policy, which tolerates no
    /// failure), its counts as of now final; whether this call ended it
    /// (a worker or the watcher may have been first).
    pub fn end_running(&self, state: CanaryState) -> bool {
        let now = self.current();
        let ended = self
            .state
            .compare_exchange(CanaryState::Running as u8, state as u8, Relaxed, Relaxed)
            .is_ok();
        if ended {
            *self.ended.lock().expect("canary lock") = Some(now);
        }
        ended
    }

    /// Where it is.
    pub fn state(&self) -> CanaryState {
        match self.state.load(Relaxed) {
            0 => CanaryState::Running,
            1 => CanaryState::Promoted,
            _ => CanaryState::RolledBack,
        }
    }

    /// Whether it was rolled back: its workers hand its keys back.
    pub fn rolled_back(&self) -> bool {
        self.state() == CanaryState::RolledBack
    }

    /// The admin API's view.
    pub fn view(&self) -> CanaryView {
        let (records, failures) = self.counts();
        let ((current_records, current_failures), elapsed_ms) = self.current();
        CanaryView {
            state: self.state(),
            share: self.share,
            key_groups_canary: self.canary_groups,
            key_groups: self.key_groups,
            records,
            failures,
            current_records,
            current_failures,
            elapsed_ms,
        }
    }
}

impl Swaps {
    /// Runs the component in `bytes` (the client's file `file`) as a
    /// canary of `operator` (a map, filter, flat-map, process or
    /// co-process operator) on `share` of its key groups (0 < share < 1),
    /// and watches it over the probation.
    pub fn canary(
        self: &Arc<Self>,
        operator: &str,
        bytes: &[u8],
        file: Option<&str>,
        share: f64,
    ) -> Result<SwapRecord, SwapError> {
        if !(share > 0.0 && share < 1.0) {
            return Err(SwapError::refused(
                operator,
                format!(
                    "the canary's share is {share}: give one above 0 and below 1 (a share of the key groups, as `10%` or 0.1)"
                ),
            ));
        }
        let why = "a canary keeps the state version (a rollback would hand migrated keys back to a version that cannot read them)";
        let plugin = self.trial_plugin(operator, "canaries", (bytes, file), why)?;
        let published = self.start_trial(operator, plugin, Change::Canary, |v, id, plugin| {
            let stats = Arc::new(CanaryStats::new(share, self.key_groups, v.failures.clone()));
            v.canary = Some((id, plugin, stats.clone()));
            SwapKind::Canary(stats)
        })?;
        let (swaps, watched, id) = (Arc::clone(self), operator.to_owned(), published.id);
        std::thread::Builder::new()
            .name("canary-probation".into())
            .spawn(move || swaps.watch_canary(&watched, id))
            .map_err(|e| SwapError::refused(operator, format!("cannot watch the canary: {e}")))?;
        Ok(published)
    }

    /// Takes the canary of `operator` off it, if one runs.
    pub(super) fn take_canary(&self, operator: &str) -> Result<Option<Canary>, SwapError> {
        // One a worker rolled back (its watcher not yet there) is no
        // canary to promote or abort.
        self.versions(operator, |v| Ok(v.canary.take().filter(|c| !c.2.rolled_back())))
    }

    /// Swaps `canary` in for every key of `operator`: a swap point, at
    /// which each worker drops the canary and runs its version (no second
    /// probation: it passed its own).
    pub(super) fn promote_canary(&self, operator: &str, canary: Canary) -> Result<SwapRecord, SwapError> {
        let (_, plugin, stats) = canary;
        // A worker may have rolled it back meanwhile (a record failed
        // under `fail`): then it stays rolled back.
        if !stats.end_running(CanaryState::Promoted) {
            return Err(SwapError::NoTrial(operator.to_owned()));
        }
        tracing::info!(pipeline = %self.pipeline, operator, digest = %plugin.digest(), "canary promoted for every key");
        self.switch(operator, plugin, Change::Swap)
    }

    /// Watches canary `id` of `operator` until it passed its probation
    /// (promoted) or failed too often (rolled back: its workers hand its
    /// keys back to the current version at their next batch). Ends when it
    /// was promoted or aborted by hand, or the pipeline stops.
    fn watch_canary(&self, operator: &str, id: u64) {
        let allowed = (self.probation.share * self.probation.records as f64).floor() as u64;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(5));
            if (self.stopped)() {
                return;
            }
            // Checked and taken under one lock, by id: a canary aborted and
            // another started meanwhile is not this watcher's.
            let taken = self.versions(operator, |v| {
                let Some((_, _, stats)) = v.canary.as_ref().filter(|c| c.0 == id) else {
                    return Ok(None);
                };
                let (records, failures) = stats.counts();
                // A worker rolls it back at once when it fails a record
                // under `fail`.
                let decided = stats.rolled_back() || failures > allowed || records >= self.probation.records;
                Ok(Some(
                    decided
                        .then(|| v.canary.take())
                        .flatten()
                        .map(|c| (c, records, failures)),
                ))
            });
            let (canary, records, failures) = match taken {
                Ok(Some(Some(taken))) => taken,
                Ok(Some(None)) => continue,
                _ => return,
            };
            if canary.2.rolled_back() {
                tracing::warn!(pipeline = %self.pipeline, operator, failures, records,
                    "the canary was rolled back: it failed a record under on_error = \"fail\"");
            } else if failures > allowed {
                canary.2.end(CanaryState::RolledBack);
                tracing::warn!(
                    pipeline = %self.pipeline,
                    operator,
                    failures,
                    records,
                    "the canary failed too often: its key groups go back to the current version"
                );
            } else if let Err(e) = self.promote_canary(operator, canary) {
                tracing::error!(operator, error = %e, "promoting the canary failed");
            }
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canary_takes_the_first_key_groups_of_its_share() {
        let stats = CanaryStats::new(0.25, 128, Default::default());
        assert_eq!(stats.view().key_groups_canary, 32);
        let keys: Vec<String> = (0..2000).map(|i| format!("key-{i}")).collect();
        let taken = keys.iter().filter(|k| stats.takes(k.as_bytes())).count();
        assert!((400..600).contains(&taken), "about a quarter: {taken}");
        for k in &keys {
            let group = crate::key_group::of_key(k.as_bytes(), 128);
            assert_eq!(stats.takes(k.as_bytes()), group < 32);
        }
        let tiny = CanaryStats::new(0.001, 128, Default::default());
        assert_eq!(tiny.view().key_groups_canary, 1, "at least one");
    }

    #[test]
    fn it_counts_and_ends() {
        let operator = Arc::new(FailureStats::default());
        operator.records.fetch_add(100, Relaxed);
        let stats = CanaryStats::new(0.5, 4, operator.clone());
        operator.records.fetch_add(40, Relaxed);
        operator.failures.fetch_add(3, Relaxed);
        stats.count(10, 1);
        stats.count(5, 0);
        assert_eq!(stats.counts(), (15, 1));
        let view = stats.view();
        assert_eq!((view.current_records, view.current_failures), (25, 2));
        assert_eq!(stats.state(), CanaryState::Running);
        stats.end(CanaryState::RolledBack);
        assert!(stats.rolled_back());
        assert!(!stats.end_running(CanaryState::Promoted), "ended already");
        assert!(stats.rolled_back());
        let failing = CanaryStats::new(0.5, 4, operator);
        assert!(failing.end_running(CanaryState::RolledBack));
        assert!(failing.rolled_back());
        assert!(!failing.end_running(CanaryState::RolledBack), "once");
    }
}
