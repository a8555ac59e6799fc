//! Probation and rollbacks: a swapped-in version watched over its first
//! records, rolled back when too many of them fail, and rollbacks asked for.

use super::*;

impl Swaps {
    /// Watches swap `id` of `operator` from the counts at its request until
    /// its probation's records passed, rolling it back when more than the
    /// allowed share of them failed. Ends early when another swap of the
    /// operator follows, or the pipeline stops.
    pub(super) fn watch(&self, operator: &str, id: u64, (records0, failures0): (u64, u64)) {
        let allowed = (self.probation.share * self.probation.records as f64).floor() as u64;
        loop {
            std::thread::sleep(std::time::Duration::from_millis(5));
            let newest = self
                .history
                .lock()
                .expect("history lock")
                .iter()
                .rev()
                .find(|e| e.record.operator == operator)
                .map(|e| e.record.id);
            if newest != Some(id) || (self.stopped)() {
                return;
            }
            let Ok((records, failures)) = self.counts(operator) else {
                return;
            };
            let (seen, failed) = (records - records0, failures - failures0);
            if failed > allowed {
                tracing::warn!(
                    pipeline = %self.pipeline,
                    operator,
                    failed,
                    seen,
                    "the new plugin version failed too often on probation: rolling it back"
                );
                // Only swap `id`, checked under the lock it is rolled back
                // under: a swap landing meanwhile is not undone.
                match self.roll_back(operator, Change::AutomaticRollback, false, Some(id)) {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        tracing::info!(operator, "another swap followed before the rollback: it stays")
                    }
                    Err(e) => tracing::error!(operator, error = %e, "the automatic rollback failed"),
                }
                return;
            }
            if seen >= self.probation.records {
                tracing::info!(
                    operator,
                    failed,
                    seen,
                    "the new plugin version passed its probation"
                );
                return;
            }
        }
    }

    /// Swaps `operator` back to the version before the running one; to a
    /// version of a lower state version only when `force`.
    pub fn rollback(&self, operator: &str, force: bool) -> Result<SwapRecord, SwapError> {
        self.roll_back(operator, Change::Rollback, force, None)?
            .ok_or_else(|| SwapError::NothingToRollBack(operator.to_owned()))
    }

    /// Swaps `operator` back to the version before the running one, in one
    /// step under its lock; with `of_swap`, only while swap `of_swap` made
    /// the running version (`None` then when another swap followed it).
    pub(super) fn roll_back(
        &self,
        operator: &str,
        change: Change,
        force: bool,
        of_swap: Option<u64>,
    ) -> Result<Option<SwapRecord>, SwapError> {
        let switched = self.versions(operator, |v| {
            if of_swap.is_some_and(|id| v.current_swap != Some(id)) {
                return Ok(None);
            }
            let newest = v.previous.iter().rposition(|(_, rolled_back)| !rolled_back);
            let at = newest.ok_or_else(|| SwapError::NothingToRollBack(operator.to_owned()))?;
            let previous = &v.previous[at].0;
            let shown = format!("the earlier version ({})", previous.digest());
            state_version_step(&v.current, previous, &shown, force)
                .map_err(|reason| SwapError::refused(operator, reason))?;
            let previous = v.previous.remove(at).0;
            Ok(Some(self.switch_in(v, operator, previous, change)))
        })?;
        switched
            .map(|(record, point)| self.publish(record, point))
            .transpose()
    }
}
