//! What the model expects of a run: each batch's output record by record,
//! and after every step the shadow's comparisons, the trials' stats and the
//! operator's state.

use super::*;

impl Run {
    /// What the operator must output for `records` (and the model's state
    /// after them), or the record whose failure by the current version
    /// ends the run under `fail`.
    pub(super) fn expect(&mut self, records: &[(String, String)]) -> Result<Vec<String>, (String, String)> {
        // Each batch starts by dropping the trials that ended.
        if self
            .model
            .canary
            .is_some_and(|id| self.trials[id].status == Status::Ended)
        {
            self.model.canary = None;
        }
        if self
            .model
            .shadow
            .is_some_and(|id| self.trials[id].status != Status::Running)
        {
            self.model.shadow = None;
        }
        let canary = self.model.canary.map(|id| {
            let TrialKind::Canary { groups } = self.trials[id].kind else {
                unreachable!("a canary's trial")
            };
            (id, self.trials[id].version, groups)
        });
        let in_canary = |key: &str| {
            canary.is_some_and(|(_, _, groups)| crate::key_group::of_key(key.as_bytes(), KEY_GROUPS) < groups)
        };
        let current = self.model.current;
        let groups = by_key(records);
        let mut out = Vec::new();
        for (key, values) in groups.iter().filter(|(key, _)| !in_canary(key)) {
            if let Some(id) = self.model.shadow {
                let TrialKind::Shadow { every } = self.trials[id].kind else {
                    unreachable!("a shadow's trial")
                };
                let count = values.len() as u64;
                if shadow_picks(every, self.model.shadow_seen, count) {
                    self.model.shadow_compared += count;
                }
                self.model.shadow_seen += count;
            }
            for value in values {
                self.handle(current, key, value, &mut out)?;
            }
        }
        let mut given_back = Vec::new();
        if let Some((id, version, _)) = canary {
            for (key, values) in groups.iter().filter(|(key, _)| in_canary(key)) {
                for value in values {
                    if !given_back.is_empty() {
                        given_back.push((key.clone(), value.clone()));
                    } else if version.fails(value) {
                        if self.policy == FailurePolicy::Fail {
                            given_back.push((key.clone(), value.clone()));
                        }
                    } else {
                        self.count(version, key, &mut out);
                    }
                }
            }
            // A canary failing under `fail` rolls back at once (unless it
            // was promoted meanwhile).
            if !given_back.is_empty() && self.trials[id].status == Status::Running {
                self.trials[id].status = Status::Ended;
            }
        }
        for (key, values) in by_key(&given_back) {
            for value in &values {
                self.handle(current, &key, value, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The current version handles `value` of `key`: counts it, or fails
    /// it under the policy.
    pub(super) fn handle(
        &mut self,
        current: Version,
        key: &str,
        value: &str,
        out: &mut Vec<String>,
    ) -> Result<(), (String, String)> {
        if !current.fails(value) {
            self.count(current, key, out);
        } else if self.policy == FailurePolicy::Fail {
            return Err((key.to_owned(), value.to_owned()));
        }
        Ok(())
    }

    /// `version` counts a record of `key`.
    pub(super) fn count(&mut self, version: Version, key: &str, out: &mut Vec<String>) {
        let count = self.model.counts.entry(key.to_owned()).or_insert(0);
        *count += 1;
        out.push(version.line(key, *count));
    }

    /// The running shadow compared the records the model says it picked.
    pub(super) fn check_shadow(&self) -> Result<(), TestCaseError> {
        if let Some(id) = self.model.shadow
            && let TrialStats::Shadow(stats) = &self.trials[id].stats
        {
            prop_assert_eq!(
                stats.view().compared,
                self.model.shadow_compared,
                "the shadow's comparisons"
            );
        }
        Ok(())
    }

    /// Every trial's stats are where the model says it is.
    pub(super) fn check_trials(&self) -> Result<(), TestCaseError> {
        for (id, trial) in self.trials.iter().enumerate() {
            match &trial.stats {
                TrialStats::Canary(stats) => {
                    let expected = match trial.status {
                        Status::Running => CanaryState::Running,
                        Status::Promoted => CanaryState::Promoted,
                        Status::Ended => CanaryState::RolledBack,
                    };
                    prop_assert_eq!(stats.state(), expected, "canary {}", id);
                }
                TrialStats::Shadow(stats) => {
                    let expected = match trial.status {
                        Status::Running => ShadowState::Running,
                        Status::Promoted => ShadowState::Promoted,
                        Status::Ended => ShadowState::Aborted,
                    };
                    prop_assert_eq!(stats.view().state, expected, "shadow {}", id);
                }
            }
        }
        Ok(())
    }

    /// The operator's state, read back with a state query, holds the
    /// model's counts.
    pub(super) fn check_state(&mut self) -> Result<(), TestCaseError> {
        let request = StateRequest::Scan {
            prefix: Vec::new(),
            limit: KEYS.len() + 1,
        };
        let answer = self.operator.query_state(&request);
        let Some(Ok(answer)) = answer else {
            return Err(TestCaseError::fail(format!("the state query: {answer:?}")));
        };
        let mut counts = BTreeMap::new();
        for (key, states) in answer {
            let count = states["count"].as_str().and_then(|c| c.parse::<u64>().ok());
            prop_assert!(count.is_some(), "the count state of {:?}: {}", key, states);
            counts.insert(
                String::from_utf8_lossy(&key).into_owned(),
                count.unwrap_or_default(),
            );
        }
        prop_assert_eq!(&counts, &self.model.counts, "the state");
        Ok(())
    }
}
