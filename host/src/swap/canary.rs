//! Canaries (see `operators::canary`): a new version handles a share of an
//! operator's key groups, watched over its probation — promoted for every
//! key once it handled `probation_records` records failing at most
//! `rollback_failure_share` of them, rolled back as soon as it fails more.

use super::{Canary, Change, SwapError, SwapRecord, Swaps};
use crate::operators::{CanaryState, CanaryStats, SwapKind};
use std::sync::Arc;

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
        let refused = |reason: String| SwapError::Refused {
            operator: operator.to_owned(),
            reason,
        };
        if !(share > 0.0 && share < 1.0) {
            return Err(refused(format!(
                "the canary's share is {share}: give one above 0 and below 1 (a share of the key groups, as `10%` or 0.1)"
            )));
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
            .map_err(|e| refused(format!("cannot watch the canary: {e}")))?;
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
            if self.shutdown.is_cancelled() {
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
