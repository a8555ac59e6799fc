//! A state query on its way through the stream: the source puts it into
//! every stream, like a swap point, and each worker of the queried
//! operator answers from its own state as the query passes it — between
//! two batches, on the worker's thread, so the answer is consistent.

use super::{Answer, StateRequest};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// A query of operator `operator`'s keyed state.
#[derive(Debug)]
pub struct StateQuery {
    /// The operator's name.
    pub operator: String,
    /// What is asked.
    pub request: StateRequest,
    answers: Mutex<Answer>,
    errors: Mutex<Vec<String>>,
    /// The operator's workers that answered so far.
    visited: AtomicUsize,
    /// Whether the operator keeps keyed state.
    keyed: AtomicBool,
    /// Whether every holder of the operator's state answered (a cluster
    /// process's tasks, which come and go: no count to wait for).
    finished: AtomicBool,
}

/// What the workers answered, once all of them did.
#[derive(Debug, PartialEq)]
pub enum QueryOutcome {
    /// The keys and their state, in key order (none: no state).
    Found(Answer),
    /// The operator keeps no keyed state.
    NotKeyed,
    /// A worker could not read its state.
    Failed(String),
}

impl StateQuery {
    /// `request` of operator `operator`'s state.
    pub fn new(operator: &str, request: StateRequest) -> Self {
        Self {
            operator: operator.to_owned(),
            request,
            answers: Mutex::default(),
            errors: Mutex::default(),
            visited: AtomicUsize::new(0),
            keyed: AtomicBool::new(false),
            finished: AtomicBool::new(false),
        }
    }

    /// One worker's answer: `None` when its operator keeps no keyed state.
    pub fn answer(&self, answer: Option<Result<Answer, String>>) {
        match answer {
            None => {}
            Some(Ok(found)) => {
                self.keyed.store(true, Ordering::Relaxed);
                self.answers.lock().expect("answers lock").extend(found);
            }
            Some(Err(e)) => {
                self.keyed.store(true, Ordering::Relaxed);
                self.errors.lock().expect("errors lock").push(e);
            }
        }
        self.visited.fetch_add(1, Ordering::Release);
    }

    /// Every holder of the operator's state answered, however many.
    pub fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }

    /// What the `workers` workers answered; `None` until all of them did
    /// (or the query was [finished](Self::finish)).
    /// A scan keeps the first keys of all the workers' (each gave its
    /// first ones).
    pub fn outcome(&self, workers: usize) -> Option<QueryOutcome> {
        if self.visited.load(Ordering::Acquire) < workers && !self.finished.load(Ordering::Acquire) {
            return None;
        }
        if let Some(e) = self.errors.lock().expect("errors lock").first() {
            return Some(QueryOutcome::Failed(e.clone()));
        }
        if !self.keyed.load(Ordering::Relaxed) {
            return Some(QueryOutcome::NotKeyed);
        }
        let mut found = std::mem::take(&mut *self.answers.lock().expect("answers lock"));
        found.sort_by(|a, b| a.0.cmp(&b.0));
        // Every worker of a global table holds every row.
        found.dedup_by(|a, b| a.0 == b.0);
        if let StateRequest::Scan { limit, .. } = self.request {
            found.truncate(limit);
        }
        Some(QueryOutcome::Found(found))
    }
}

/// A query is itself: two are equal only when they are the same one.
impl PartialEq for StateQuery {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_scan_merges_the_workers_first_keys_in_key_order() {
        let q = StateQuery::new(
            "counts",
            StateRequest::Scan {
                prefix: vec![],
                limit: 3,
            },
        );
        q.answer(Some(Ok(vec![
            (b"b".to_vec(), json!("2")),
            (b"d".to_vec(), json!("4")),
        ])));
        assert_eq!(q.outcome(2), None, "one worker of two answered");
        q.answer(Some(Ok(vec![
            (b"a".to_vec(), json!("1")),
            (b"c".to_vec(), json!("3")),
        ])));
        let keys = match q.outcome(2).unwrap() {
            QueryOutcome::Found(found) => found.into_iter().map(|(k, _)| k).collect::<Vec<_>>(),
            other => panic!("{other:?}"),
        };
        assert_eq!(keys, [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn an_operator_without_keyed_state_says_so_and_a_failure_wins() {
        let q = StateQuery::new("case", StateRequest::Key(b"k".to_vec()));
        q.answer(None);
        assert_eq!(q.outcome(1), Some(QueryOutcome::NotKeyed));
        let q = StateQuery::new("counts", StateRequest::Key(b"k".to_vec()));
        q.answer(Some(Ok(Vec::new())));
        q.answer(Some(Err("disk gone".into())));
        assert_eq!(q.outcome(2), Some(QueryOutcome::Failed("disk gone".into())));
    }
}
