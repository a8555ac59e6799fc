//! The failure policy of an operator: what happens to a record it traps,
//! times out or returns an error on.

use super::{OperatorError, SideOutput};
use crate::record::Record;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Header carrying the reason on a dead-lettered record.
pub const REASON_HEADER: &str = "mailer.error";
/// Header carrying the operator's name on a dead-lettered record.
pub const OPERATOR_HEADER: &str = "mailer.operator";

/// What to do with a record an operator fails on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailurePolicy {
    /// Stop the pipeline with an error naming the operator, record and reason.
    #[default]
    Fail,
    /// Drop the record (counted and logged).
    Skip,
    /// Send the record with the reason to the pipeline's `dead_letter` sink.
    DeadLetter,
}

impl FailurePolicy {
    /// Whether the policy can run in a pipeline with (`dead_letter_sink`)
    /// or without a `[dead_letter]` sink; the error to show when not.
    pub fn check_dead_letter(self, dead_letter_sink: bool) -> Result<(), &'static str> {
        match self == FailurePolicy::DeadLetter && !dead_letter_sink {
            true => Err("`on_error = \"dead-letter\"` needs a `[dead_letter]` sink in the manifest"),
            false => Ok(()),
        }
    }
}

/// Counts of what the policy did, shared with metrics.
#[derive(Debug, Default)]
pub struct FailureStats {
    /// Records the operator was given (plugin operators count them).
    pub records: AtomicU64,
    /// Records the operator failed on.
    pub failures: AtomicU64,
    /// Records dropped by `skip`.
    pub skipped: AtomicU64,
    /// Records sent to the dead-letter sink.
    pub dead_lettered: AtomicU64,
    /// For a `project` or `rename`: the fields it names that a record
    /// lacked (one per field and record).
    pub unmatched_fields: AtomicU64,
    /// Whether one of its workers warned of fields no record had.
    pub warned_unmatched: std::sync::atomic::AtomicBool,
    /// Records each worker was given (plugin operators count them).
    workers: Mutex<Vec<Arc<AtomicU64>>>,
}

impl FailureStats {
    /// Worker `worker`'s count of records given.
    fn worker(&self, worker: usize) -> Arc<AtomicU64> {
        let mut workers = self.workers.lock().expect("worker counts lock");
        while workers.len() <= worker {
            workers.push(Arc::default());
        }
        workers[worker].clone()
    }

    /// The records each worker was given, by worker.
    pub fn worker_records(&self) -> Vec<u64> {
        let workers = self.workers.lock().expect("worker counts lock");
        workers.iter().map(|w| w.load(Ordering::Relaxed)).collect()
    }
}

/// Applies one operator's failure policy.
#[derive(Debug, Clone)]
pub struct FailureHandler {
    operator: Arc<str>,
    policy: FailurePolicy,
    dead_letter: Option<SideOutput>,
    stats: Arc<FailureStats>,
    /// The worker's own count of records given.
    worker_records: Option<Arc<AtomicU64>>,
    /// The failures this handler saw (one worker's): what a canary's
    /// share of them is told apart by.
    failed_here: OwnCount,
    /// While a canary's calls run under `fail`: the records it failed on,
    /// held for the current version instead of ending the run.
    held: Held,
}

/// The records a handler holds back (see [`FailureHandler::hold_failures`]);
/// a clone holds none.
#[derive(Debug, Default)]
struct Held(Mutex<Option<Vec<Record>>>);

impl Clone for Held {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl Held {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Vec<Record>>> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A count of one handler's own: a clone starts from it and counts apart.
#[derive(Debug, Default)]
struct OwnCount(AtomicU64);

impl Clone for OwnCount {
    fn clone(&self) -> Self {
        Self(AtomicU64::new(self.0.load(Ordering::Relaxed)))
    }
}

impl FailureHandler {
    /// A handler for `operator`; `dead_letter` must be set for `DeadLetter`.
    pub fn new(
        operator: &str,
        policy: FailurePolicy,
        dead_letter: Option<SideOutput>,
        stats: Arc<FailureStats>,
    ) -> Self {
        Self {
            operator: operator.into(),
            policy,
            dead_letter,
            stats,
            worker_records: None,
            failed_here: OwnCount::default(),
            held: Held::default(),
        }
    }

    /// The same handler counting the records of worker `worker` apart too.
    pub fn for_worker(mut self, worker: usize) -> Self {
        self.worker_records = Some(self.stats.worker(worker));
        self
    }

    /// The counts shared with metrics.
    pub fn stats(&self) -> &Arc<FailureStats> {
        &self.stats
    }

    /// The operator was given `n` more records.
    pub fn count_records(&self, n: usize) {
        self.stats.records.fetch_add(n as u64, Ordering::Relaxed);
        if let Some(worker) = &self.worker_records {
            worker.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// The failures this handler (one worker's) saw so far.
    pub fn failed_here(&self) -> u64 {
        self.failed_here.0.load(Ordering::Relaxed)
    }

    /// From now until [`Self::take_held`], under `fail`, a failed record
    /// is held instead of ending the run: a canary's failure rolls the
    /// canary back and its record goes to the current version. Returns
    /// whether failures are held (the policy is `fail`).
    pub fn hold_failures(&self) -> bool {
        let holds = self.policy == FailurePolicy::Fail;
        if holds {
            *self.held.lock() = Some(Vec::new());
        }
        holds
    }

    /// Whether a record was held since [`Self::hold_failures`]: the records
    /// after it (of its key) are to be held too, to keep their order.
    pub fn holds_any(&self) -> bool {
        self.held.lock().as_ref().is_some_and(|held| !held.is_empty())
    }

    /// Holds `record` beside the failed ones, untried (see
    /// [`Self::holds_any`]).
    pub fn hold(&self, record: Record) {
        if let Some(held) = self.held.lock().as_mut() {
            held.push(record);
        }
    }

    /// The records held since [`Self::hold_failures`], in order; failures
    /// are handled by the policy again from now on.
    pub fn take_held(&self) -> Vec<Record> {
        self.held.lock().take().unwrap_or_default()
    }

    /// Handles one failed record.
    pub fn fail(&self, mut record: Record, reason: &str) -> Result<(), OperatorError> {
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        self.failed_here.0.fetch_add(1, Ordering::Relaxed);
        if self.policy == FailurePolicy::Fail
            && let Some(held) = self.held.lock().as_mut()
        {
            tracing::warn!(operator = %self.operator, record = %preview(&record), %reason,
                "the canary failed a record: it goes to the current version");
            held.push(record);
            return Ok(());
        }
        match (self.policy, &self.dead_letter) {
            (FailurePolicy::Fail, _) => Err(OperatorError::RecordFailed {
                operator: self.operator.to_string(),
                record: preview(&record),
                reason: reason.to_owned(),
            }),
            (FailurePolicy::Skip, _) => {
                self.stats.skipped.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(operator = %self.operator, record = %preview(&record), %reason, "record skipped");
                Ok(())
            }
            (FailurePolicy::DeadLetter, Some(tx)) => {
                tracing::warn!(operator = %self.operator, record = %preview(&record), %reason, "record dead-lettered");
                record
                    .headers
                    .push((REASON_HEADER.into(), Bytes::copy_from_slice(reason.as_bytes())));
                record.headers.push((
                    OPERATOR_HEADER.into(),
                    Bytes::copy_from_slice(self.operator.as_bytes()),
                ));
                tx.send(record).map_err(|_| OperatorError::DeadLetterClosed {
                    operator: self.operator.to_string(),
                })?;
                self.stats.dead_lettered.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            (FailurePolicy::DeadLetter, None) => Err(OperatorError::DeadLetterClosed {
                operator: self.operator.to_string(),
            }),
        }
    }
}

/// A short printable view of a record for logs and errors: key and value as
/// lossy UTF-8, each cut at 64 bytes.
pub fn preview(record: &Record) -> String {
    fn cut(b: &[u8]) -> String {
        let s = String::from_utf8_lossy(&b[..b.len().min(64)]).into_owned();
        if b.len() > 64 { s + "…" } else { s }
    }
    let mut s = String::new();
    if let Some(k) = &record.key {
        let _ = write!(s, "key={:?} ", cut(k));
    }
    let _ = write!(s, "value={:?}", cut(&record.value));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(v: &'static str) -> Record {
        Record::new(Some(Bytes::from_static(b"k")), v, 5)
    }

    #[test]
    fn fail_policy_names_operator_record_and_reason() {
        let h = FailureHandler::new("parse", FailurePolicy::Fail, None, Default::default());
        let e = h.fail(rec("x"), "not a number").unwrap_err().to_string();
        assert_eq!(
            e,
            r#"operator `parse` failed on record key="k" value="x": not a number"#
        );
    }

    #[test]
    fn dead_letter_adds_reason_and_operator_headers() {
        let (tx, rx) = SideOutput::channel(1);
        let h = FailureHandler::new("parse", FailurePolicy::DeadLetter, Some(tx), Default::default());
        h.fail(rec("x"), "bad").unwrap();
        let Ok(crate::failure::SideMessage::Record(r)) = rx.try_recv() else {
            panic!("a dead letter was sent")
        };
        assert_eq!(r.value, "x");
        assert_eq!(r.headers[0], (REASON_HEADER.to_string(), Bytes::from("bad")));
        assert_eq!(r.headers[1], (OPERATOR_HEADER.to_string(), Bytes::from("parse")));
        assert_eq!(h.stats().dead_lettered.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn held_failures_under_fail_end_nothing_until_taken() {
        let h = FailureHandler::new("parse", FailurePolicy::Fail, None, Default::default());
        assert!(h.hold_failures());
        assert!(!h.holds_any());
        h.fail(rec("x"), "bad").unwrap();
        assert!(h.holds_any());
        h.hold(rec("y"));
        let held: Vec<_> = h.take_held().into_iter().map(|r| r.value).collect();
        assert_eq!(held, vec![Bytes::from("x"), Bytes::from("y")]);
        assert_eq!(h.failed_here(), 1);
        assert!(!h.holds_any());
        assert!(h.fail(rec("z"), "bad").is_err(), "the policy again");
        let skip = FailureHandler::new("parse", FailurePolicy::Skip, None, Default::default());
        assert!(!skip.hold_failures(), "other policies handle a canary's failures");
        skip.fail(rec("x"), "bad").unwrap();
        assert!(skip.take_held().is_empty());
    }

    #[test]
    fn skip_counts_and_drops() {
        let h = FailureHandler::new("parse", FailurePolicy::Skip, None, Default::default());
        h.fail(rec("x"), "bad").unwrap();
        assert_eq!(h.stats().skipped.load(Ordering::Relaxed), 1);
    }
}
