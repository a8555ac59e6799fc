//! Event time across processes. A keyed task of cluster mode reads records
//! that many source tasks, in several processes, wrote into its repartition
//! partition; no single thread sees all of them, so each source task writes
//! markers of its watermark into every partition it feeds, and the keyed
//! task's watermark is the minimum over the source tasks — once it has
//! heard from each of them, as a keyed worker in one process waits for
//! every channel feeding it.

use std::collections::{HashMap, HashSet};

/// The header that makes a repartition record a watermark marker; the
/// record's key is the source task's id, its value the watermark (eight
/// bytes, little endian).
pub const MARKER_HEADER: &str = "mailer.watermark";

/// The watermark of a marker saying its source task is idle (no record
/// for `idle_timeout`): keyed tasks stop waiting for it until it marks a
/// watermark again.
pub const IDLE: i64 = i64::MAX;

/// A marker's record: (key, value).
pub fn marker(task: u32, watermark: i64) -> ([u8; 4], [u8; 8]) {
    (task.to_le_bytes(), watermark.to_le_bytes())
}

/// The (task, watermark) of a marker's key and value; `None` when they are
/// not a marker's.
pub fn read_marker(key: &[u8], value: &[u8]) -> Option<(u32, i64)> {
    Some((
        u32::from_le_bytes(key.try_into().ok()?),
        i64::from_le_bytes(value.try_into().ok()?),
    ))
}

/// The watermark of one keyed task: the minimum over the source tasks
/// feeding it, each at the largest watermark it has marked.
#[derive(Debug, Clone)]
pub struct UpstreamWatermarks {
    /// How many source tasks feed the task (the source partitions).
    expected: usize,
    heard: HashMap<u32, i64>,
    /// The source tasks idle now.
    idle: HashSet<u32>,
    current: Option<i64>,
}

impl UpstreamWatermarks {
    /// A task fed by `expected` source tasks, none heard from yet.
    pub fn new(expected: usize) -> Self {
        Self {
            expected,
            heard: HashMap::new(),
            idle: HashSet::new(),
            current: None,
        }
    }

    /// The source has `expected` tasks now (partitions were added).
    pub fn set_expected(&mut self, expected: usize) {
        self.expected = expected;
        self.current = self.minimum();
    }

    /// Records `task`'s marker; returns the task's watermark when it rose.
    /// A marker below one heard before (a source task moved to another
    /// process, which resumed behind its last marker) changes nothing:
    /// watermarks never go back.
    pub fn observe(&mut self, task: u32, watermark: i64) -> Option<i64> {
        if watermark == IDLE {
            self.idle.insert(task);
        } else {
            self.idle.remove(&task);
            let mark = self.heard.entry(task).or_insert(i64::MIN);
            *mark = (*mark).max(watermark);
        }
        let now = self.minimum();
        match (now, self.current) {
            (Some(n), Some(c)) if n <= c => None,
            (Some(n), _) => {
                self.current = Some(n);
                Some(n)
            }
            (None, _) => None,
        }
    }

    /// A moved task resumes at the watermark its changelog kept: it never
    /// goes behind it, so windows fired before the move stay fired.
    pub fn resume_at(&mut self, watermark: i64) {
        self.current = self.current.max(Some(watermark));
    }

    /// The watermark now; `None` until every source task was heard from.
    pub fn current(&self) -> Option<i64> {
        self.current
    }

    /// The minimum over the active tasks once every task was heard from
    /// (a watermark or idle). While every task is idle nothing holds event
    /// time back: the largest watermark any of them marked (as Flink's
    /// watermark valve does), so that a task which heard the last marks
    /// only after their sources went idle — one that moved, say — fires
    /// what a task that heard them in time did.
    fn minimum(&self) -> Option<i64> {
        let accounted = self.heard.len() + self.idle.iter().filter(|t| !self.heard.contains_key(t)).count();
        if accounted < self.expected || self.expected == 0 {
            return None;
        }
        let active = self.heard.iter().filter(|(t, _)| !self.idle.contains(t));
        active
            .map(|(_, w)| *w)
            .min()
            .or_else(|| self.heard.values().copied().max())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn markers_read_back() {
        let (k, v) = marker(7, -42);
        assert_eq!(read_marker(&k, &v), Some((7, -42)));
        assert_eq!(read_marker(b"abc", &v), None);
    }

    #[test]
    fn nothing_until_every_source_task_is_heard() {
        let mut w = UpstreamWatermarks::new(3);
        assert_eq!(w.observe(0, 100), None);
        assert_eq!(w.observe(1, 50), None);
        assert_eq!(w.current(), None);
        assert_eq!(w.observe(2, 70), Some(50));
        assert_eq!(w.observe(0, 200), None, "the minimum did not move");
        assert_eq!(w.observe(1, 80), Some(70));
        w.set_expected(4);
        assert_eq!(w.current(), None, "a new partition holds it back");
    }

    #[test]
    fn an_idle_task_holds_nothing_back_until_it_marks_again() {
        let mut w = UpstreamWatermarks::new(3);
        assert_eq!(w.observe(0, 100), None);
        assert_eq!(w.observe(1, IDLE), None, "task 2 not heard yet");
        assert_eq!(w.observe(2, 70), Some(70), "task 1 never read a record");
        assert_eq!(w.observe(2, IDLE), Some(100), "only task 0 is active");
        assert_eq!(w.observe(0, IDLE), None, "every task idle: the largest mark, 100");
        assert_eq!(w.current(), Some(100));
        assert_eq!(w.observe(1, 40), None, "active again, behind: it never goes back");
        assert_eq!(w.observe(1, 150), Some(150), "task 0 and 2 still idle");
    }

    #[test]
    fn marks_heard_only_after_their_tasks_went_idle_still_move_it() {
        // A task that moved hears task 0's last watermark, then each
        // task's idle mark: nothing holds the watermark back any more.
        let mut w = UpstreamWatermarks::new(3);
        w.resume_at(50);
        assert_eq!(w.observe(0, 120), None, "tasks 1 and 2 not heard yet");
        assert_eq!(w.observe(0, IDLE), None);
        assert_eq!(w.observe(1, IDLE), None);
        assert_eq!(w.observe(2, IDLE), Some(120));
    }

    proptest! {
        /// With tasks going idle (`None`) and back: the watermark is the
        /// largest the minimum over the active tasks (over every task's
        /// largest mark while all are idle) ever was, once every task was
        /// heard from.
        #[test]
        fn idle_tasks_leave_the_minimum_until_they_mark_again(
            marks in prop::collection::vec((0u32..4, prop::option::of(-50i64..50)), 0..60)
        ) {
            let mut w = UpstreamWatermarks::new(4);
            let (mut largest, mut idle) = (HashMap::new(), HashSet::new());
            let mut model: Option<i64> = None;
            for (task, mark) in marks {
                w.observe(task, mark.unwrap_or(IDLE));
                match mark {
                    None => {
                        idle.insert(task);
                    }
                    Some(m) => {
                        idle.remove(&task);
                        let e = largest.entry(task).or_insert(m);
                        *e = (*e).max(m);
                    }
                }
                let heard = (0..4).all(|t| largest.contains_key(&t) || idle.contains(&t));
                let active = largest.iter().filter(|(t, _)| !idle.contains(*t)).map(|(_, m)| *m).min();
                if heard {
                    model = model.max(active.or_else(|| largest.values().copied().max()));
                }
                prop_assert_eq!(w.current(), model);
            }
        }

        /// The watermark is the minimum over the tasks of each one's
        /// largest marker, never lower than before, and only once all were
        /// heard.
        #[test]
        fn the_watermark_is_the_minimum_of_each_tasks_largest_marker(
            marks in prop::collection::vec((0u32..4, -50i64..50), 0..60)
        ) {
            let mut w = UpstreamWatermarks::new(4);
            let mut largest: HashMap<u32, i64> = HashMap::new();
            let mut last = None;
            for (task, mark) in marks {
                let rose = w.observe(task, mark);
                let e = largest.entry(task).or_insert(mark);
                *e = (*e).max(mark);
                let model = (largest.len() == 4).then(|| *largest.values().min().unwrap());
                prop_assert_eq!(w.current(), model);
                prop_assert!(w.current() >= last);
                prop_assert_eq!(rose.is_some(), w.current() != last);
                last = w.current();
            }
        }
    }
}
