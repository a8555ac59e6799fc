//! A backend that remembers which of its entries changed, so a keyed task
//! of cluster mode can send each commit interval's changes to its
//! changelog topic and a task moved to another process can be rebuilt from
//! that topic.
//!
//! Only the entry's key is remembered when it is written; its value is
//! read when the changes are taken. An entry written many times in an
//! interval (a counter) is sent once, with its last value, and an entry
//! written and deleted within one is sent as a deletion (a tombstone, which
//! compaction drops). Taken in key order, the changes of every interval
//! applied in turn give exactly the backend's entries: what a compacted
//! topic holds.

use super::snapshot::entry_key_group;
use super::{StateBackend, StateError};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

/// What is called with each changed entry and its value now (`None`:
/// deleted).
pub type ChangeVisitor<'a> = &'a mut dyn FnMut(&[u8], Option<&[u8]>) -> Result<(), StateError>;

/// A backend recording the keys written to it since the last
/// [`take_changes`](ChangelogBackend::take_changes).
pub struct ChangelogBackend {
    inner: Box<dyn StateBackend>,
    changed: BTreeSet<Vec<u8>>,
}

impl ChangelogBackend {
    /// `inner`, with nothing changed yet.
    pub fn new(inner: Box<dyn StateBackend>) -> Self {
        Self {
            inner,
            changed: BTreeSet::new(),
        }
    }

    /// How many entries changed since the last take.
    pub fn pending(&self) -> usize {
        self.changed.len()
    }

    /// Calls `f` with each entry changed since the last take, in key order,
    /// and its value now (`None`: deleted); then forgets them. When `f`
    /// fails, the changes not yet taken stay.
    pub fn take_changes(&mut self, f: ChangeVisitor<'_>) -> Result<(), StateError> {
        while let Some(entry) = self.changed.first() {
            let mut result = Ok(());
            self.inner
                .read_with(entry, &mut |value| result = f(entry, value))?;
            result?;
            self.changed.pop_first();
        }
        Ok(())
    }

    /// Applies one record of the changelog (`None`: a tombstone) while the
    /// task restores: a change the topic holds already, so not recorded.
    pub fn restore(&mut self, entry: &[u8], value: Option<&[u8]>) -> Result<(), StateError> {
        match value {
            Some(v) => self.inner.put(entry, v),
            None => self.inner.delete(entry),
        }
    }

    /// Removes the entries (keyed ones and timers) of the key groups
    /// `drops` accepts — a revoked task's — without recording them: the
    /// changelog keeps them for the task's next owner. Changes of theirs
    /// not taken yet are forgotten too. Returns how many entries went. A
    /// walk over every entry: revokes are rare, and the task is committed
    /// just before.
    pub fn drop_key_groups(&mut self, drops: &dyn Fn(u16) -> bool) -> Result<usize, StateError> {
        let mut doomed = Vec::new();
        self.inner.scan(&[], &[0xFF; 64], &mut |k, _| {
            if entry_key_group(k).is_some_and(drops) {
                doomed.push(k.to_vec());
            }
            true
        })?;
        for k in &doomed {
            self.inner.delete(k)?;
        }
        self.changed.retain(|k| !entry_key_group(k).is_some_and(drops));
        Ok(doomed.len())
    }

    /// Remembers that `key` changed.
    fn record(&mut self, key: &[u8]) {
        if !self.changed.contains(key) {
            self.changed.insert(key.to_vec());
        }
    }
}

impl StateBackend for ChangelogBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.inner.get(key)
    }

    fn read_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), StateError> {
        self.inner.read_with(key, f)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.inner.put(key, value)?;
        self.record(key);
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.inner.delete(key)?;
        self.record(key);
        Ok(())
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        self.inner.scan(from, to, f)
    }

    fn snapshot(&mut self, dir: &Path) -> Result<(), StateError> {
        self.inner.snapshot(dir)
    }

    fn write_batch(&mut self, batch: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<(), StateError> {
        self.inner.write_batch(batch)?;
        self.changed.extend(batch.iter().map(|(k, _)| k.clone()));
        Ok(())
    }
}

/// A changelog backend shared by the operator writing it and the task
/// taking its changes at each commit (one thread uses both: the lock is
/// never contended).
#[derive(Clone)]
pub struct SharedChangelog(Arc<Mutex<ChangelogBackend>>);

impl SharedChangelog {
    /// `inner`, recording its changes, shared.
    pub fn new(inner: Box<dyn StateBackend>) -> Self {
        Self(Arc::new(Mutex::new(ChangelogBackend::new(inner))))
    }

    /// The backend, for taking changes or restoring.
    pub fn lock(&self) -> MutexGuard<'_, ChangelogBackend> {
        // A panic while holding it is a bug that ends the process anyway.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The backend underneath, when this is its last handle (changes not
    /// taken are forgotten); none while another handle lives.
    pub fn into_backend(self) -> Option<Box<dyn StateBackend>> {
        let shared = Arc::into_inner(self.0)?;
        Some(
            shared
                .into_inner()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .inner,
        )
    }
}

impl StateBackend for SharedChangelog {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.lock().get(key)
    }

    fn read_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), StateError> {
        self.lock().read_with(key, f)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.lock().put(key, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.lock().delete(key)
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        self.lock().scan(from, to, f)
    }

    fn snapshot(&mut self, dir: &Path) -> Result<(), StateError> {
        self.lock().snapshot(dir)
    }

    fn write_batch(&mut self, batch: &[(Vec<u8>, Option<Vec<u8>>)]) -> Result<(), StateError> {
        self.lock().write_batch(batch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryBackend;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u8),
        Delete(u8),
        Batch(Vec<(u8, Option<u8>)>),
        Take,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0u8..16, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            2 => (0u8..16).prop_map(Op::Delete),
            1 => prop::collection::vec((0u8..16, prop::option::of(any::<u8>())), 0..6).prop_map(Op::Batch),
            1 => Just(Op::Take),
        ]
    }

    fn entries(b: &dyn StateBackend) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut all = BTreeMap::new();
        b.scan(&[], &[u8::MAX; 4], &mut |k, v| {
            all.insert(k.to_vec(), v.to_vec());
            true
        })
        .unwrap();
        all
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// The changes taken after each interval, applied in turn as a
        /// compacted topic keeps them, hold exactly the backend's entries;
        /// a backend rebuilt from them holds the same.
        #[test]
        fn the_taken_changes_compact_to_the_backend(ops in prop::collection::vec(op(), 0..80)) {
            let mut backend = ChangelogBackend::new(Box::new(MemoryBackend::default()));
            let mut topic: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            let take = |backend: &mut ChangelogBackend, topic: &mut BTreeMap<Vec<u8>, Vec<u8>>| {
                let mut last: Option<Vec<u8>> = None;
                backend.take_changes(&mut |k, v| {
                    assert!(last.as_deref() < Some(k), "in key order, each once");
                    last = Some(k.to_vec());
                    match v {
                        Some(v) => topic.insert(k.to_vec(), v.to_vec()),
                        None => topic.remove(k),
                    };
                    Ok(())
                }).unwrap();
                assert_eq!(backend.pending(), 0);
            };
            for op in ops {
                match op {
                    Op::Put(k, v) => backend.put(&[k], &[v]).unwrap(),
                    Op::Delete(k) => backend.delete(&[k]).unwrap(),
                    Op::Batch(b) => {
                        let b: Vec<_> = b.into_iter().map(|(k, v)| (vec![k], v.map(|v| vec![v]))).collect();
                        backend.write_batch(&b).unwrap();
                    }
                    Op::Take => {
                        take(&mut backend, &mut topic);
                        prop_assert_eq!(&topic, &entries(&backend));
                    }
                }
            }
            take(&mut backend, &mut topic);
            prop_assert_eq!(&topic, &entries(&backend));
            let mut rebuilt = ChangelogBackend::new(Box::new(MemoryBackend::default()));
            for (k, v) in &topic {
                rebuilt.restore(k, Some(v)).unwrap();
            }
            prop_assert_eq!(rebuilt.pending(), 0);
            prop_assert_eq!(entries(&rebuilt), entries(&backend));
        }
    }

    #[test]
    fn a_revoked_tasks_key_groups_leave_without_a_trace_in_the_changelog() {
        use crate::state::keys::{keyed, timer};
        let mut backend = ChangelogBackend::new(Box::new(MemoryBackend::default()));
        for kg in 0u16..4 {
            backend.put(&keyed(kg, 1, b"k"), b"v").unwrap();
            backend.put(&timer(1, 10, kg, b"k", b""), b"").unwrap();
        }
        backend.take_changes(&mut |_, _| Ok(())).unwrap();
        backend.put(&keyed(1, 1, b"x"), b"pending").unwrap();
        backend.put(&keyed(3, 1, b"x"), b"pending").unwrap();

        let dropped = backend.drop_key_groups(&|kg| (1..3).contains(&kg)).unwrap();
        assert_eq!(
            dropped, 5,
            "two entries each of groups 1 and 2, and group 1's pending one"
        );
        let mut left = Vec::new();
        backend
            .scan(&[], &[0xFF; 64], &mut |k, _| {
                left.push(entry_key_group(k).unwrap());
                true
            })
            .unwrap();
        left.sort();
        assert_eq!(left, [0, 0, 3, 3, 3]);
        let mut sent = Vec::new();
        backend
            .take_changes(&mut |k, v| {
                sent.push((entry_key_group(k).unwrap(), v.is_some()));
                Ok(())
            })
            .unwrap();
        assert_eq!(sent, [(3, true)], "no deletions sent for the dropped groups");
    }

    #[test]
    fn a_shared_state_comes_back_from_its_last_handle_only() {
        let shared = SharedChangelog::new(Box::new(MemoryBackend::default()));
        let mut writer = shared.clone();
        writer.put(b"k", b"v").unwrap();
        let shared = match shared.into_backend() {
            None => writer,
            Some(_) => panic!("the writer still holds it"),
        };
        let backend = shared.into_backend().expect("the last handle");
        assert_eq!(backend.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    }

    #[test]
    fn a_failed_take_keeps_what_it_did_not_send() {
        let mut backend = ChangelogBackend::new(Box::new(MemoryBackend::default()));
        for k in [1u8, 2, 3] {
            backend.put(&[k], b"v").unwrap();
        }
        let mut sent = Vec::new();
        let failed = backend.take_changes(&mut |k, _| {
            if k == [2] {
                return Err(StateError::Restore("the producer is gone".into()));
            }
            sent.push(k.to_vec());
            Ok(())
        });
        assert!(failed.is_err());
        assert_eq!(sent, [vec![1u8]]);
        assert_eq!(backend.pending(), 2);
    }
}
