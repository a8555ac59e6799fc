//! One operator's keyed state and timers in its worker's backend: the
//! service every keyed operator (reduce, aggregate, window, process) keeps
//! its state through. It lays entries out with [`keys`] (key group first,
//! then the operator's namespace and the key), so an operator names only
//! its key and what follows it, and timers come due by one range scan.

use super::{StateBackend, StateError, keys};
use std::ops::Range;
use std::path::Path;

/// A timer's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeDomain {
    /// Fires when the watermark passes it.
    EventTime,
    /// Fires when the wall clock passes it.
    ProcessingTime,
}

impl TimeDomain {
    /// Its slot in per-domain arrays.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// A timer that came due, as it was stored: its time, the key it belongs
/// to and the payload it was registered with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// When it was due.
    pub time: i64,
    /// The key's key group.
    pub key_group: u16,
    entry: Vec<u8>,
    key: Range<usize>,
}

impl Timer {
    fn parse(entry: Vec<u8>) -> Option<Self> {
        let (time, key_group, key, _) = keys::parse_timer(&entry)?;
        let start = key.as_ptr() as usize - entry.as_ptr() as usize;
        let key = start..start + key.len();
        Some(Self {
            time,
            key_group,
            entry,
            key,
        })
    }

    /// The key it belongs to.
    pub fn key(&self) -> &[u8] {
        &self.entry[self.key.clone()]
    }

    /// What it was registered with.
    pub fn payload(&self) -> &[u8] {
        &self.entry[self.key.end..]
    }
}

/// The state and timers of one keyed operator on one worker.
pub struct KeyedState {
    backend: Box<dyn StateBackend>,
    op: u16,
    key_groups: u32,
}

impl KeyedState {
    /// The state of operator `op` (its namespace, below `0x8000`) in
    /// `backend`, for keys spread over `key_groups` key groups.
    pub fn new(backend: Box<dyn StateBackend>, op: u16, key_groups: u32) -> Self {
        debug_assert!(op < 0x8000, "the top bit marks processing-time timers");
        Self {
            backend,
            op,
            key_groups,
        }
    }

    /// The operator's namespace.
    pub fn op(&self) -> u16 {
        self.op
    }

    /// How many key groups keys spread over.
    pub fn key_groups(&self) -> u16 {
        self.key_groups as u16
    }

    /// The key group of `key`.
    pub fn key_group(&self, key: &[u8]) -> u16 {
        keys::group(key, self.key_groups)
    }

    /// The entry of `key` (in `key_group`) ending in `suffix`, written over
    /// `entry` (a buffer reused from record to record). A key's entries
    /// differ only in their suffixes.
    pub fn entry_into(&self, entry: &mut Vec<u8>, key_group: u16, key: &[u8], suffix: &[u8]) {
        entry.clear();
        keys::keyed_into(entry, key_group, self.op, key);
        entry.extend_from_slice(suffix);
    }

    /// The entry of `key` (in `key_group`) ending in `suffix`.
    pub fn entry(&self, key_group: u16, key: &[u8], suffix: &[u8]) -> Vec<u8> {
        let mut entry = Vec::with_capacity(8 + key.len() + suffix.len());
        self.entry_into(&mut entry, key_group, key, suffix);
        entry
    }

    /// The one entry of `key` of an operator keeping a single value per key.
    pub fn key_entry(&self, key: &[u8]) -> Vec<u8> {
        self.entry(self.key_group(key), key, &[])
    }

    /// The value of `entry`.
    pub fn get(&self, entry: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        self.backend.get(entry)
    }

    /// Calls `f` with the value of `entry` (`None` when absent), read in
    /// place where the backend can.
    pub fn read_with(&self, entry: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), StateError> {
        self.backend.read_with(entry, f)
    }

    /// Sets `entry` to `value`.
    pub fn put(&mut self, entry: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.backend.put(entry, value)
    }

    /// Removes `entry` (nothing when absent).
    pub fn delete(&mut self, entry: &[u8]) -> Result<(), StateError> {
        self.backend.delete(entry)
    }

    /// Calls `f` with every entry that starts with `prefix` (an entry made
    /// by [`entry`](Self::entry), or the start of one) and its value, in
    /// order, until `f` returns false.
    pub fn scan_prefix(
        &self,
        prefix: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        let end = keys::prefix_end(prefix).expect("a keyed prefix starts below 0xFFFF");
        self.backend.scan(prefix, &end, f)
    }

    /// Calls `f` with every entry in `from..to` (entries made by
    /// [`entry`](Self::entry)) and its value, in order, until `f` returns
    /// false.
    pub fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        self.backend.scan(from, to, f)
    }

    fn timer_namespace(&self, domain: TimeDomain) -> u16 {
        match domain {
            TimeDomain::EventTime => self.op,
            TimeDomain::ProcessingTime => self.op | 0x8000,
        }
    }

    /// The entry of a timer of `key` (in `key_group`) at `time` carrying
    /// `payload`: [`put`](Self::put) with an empty value registers it,
    /// [`delete`](Self::delete) removes it; a key has one timer per
    /// (domain, time, payload).
    pub fn timer(
        &self,
        domain: TimeDomain,
        time: i64,
        key_group: u16,
        key: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        keys::timer(self.timer_namespace(domain), time, key_group, key, payload)
    }

    /// Removes and returns the timers of `domain` due in `from..=upto`, in
    /// time order.
    pub fn take_due_timers(
        &mut self,
        domain: TimeDomain,
        from: i64,
        upto: i64,
    ) -> Result<Vec<Timer>, StateError> {
        let ns = self.timer_namespace(domain);
        let start = keys::timers_until(ns, from);
        let end = match upto.checked_add(1) {
            Some(t) => keys::timers_until(ns, t),
            None => {
                let mut all = keys::TIMERS.to_be_bytes().to_vec();
                all.extend_from_slice(&ns.to_be_bytes());
                keys::prefix_end(&all).expect("a timer namespace is below 0xFFFF")
            }
        };
        let mut due = Vec::new();
        self.backend.scan(&start, &end, &mut |k, _| {
            due.push(k.to_vec());
            true
        })?;
        let mut timers = Vec::with_capacity(due.len());
        for entry in due {
            self.backend.delete(&entry)?;
            timers.extend(Timer::parse(entry));
        }
        Ok(timers)
    }

    /// Writes a consistent copy of the worker's state into `dir`, a folder
    /// that does not exist yet.
    pub fn snapshot(&mut self, dir: &Path) -> Result<(), StateError> {
        self.backend.snapshot(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryBackend;

    fn state(op: u16) -> KeyedState {
        KeyedState::new(Box::new(MemoryBackend::default()), op, 128)
    }

    #[test]
    fn a_keys_entries_differ_in_their_suffixes_and_scan_together() {
        let mut s = state(2);
        let kg = s.key_group(b"k");
        for suffix in [&b"b"[..], b"a", b""] {
            let e = s.entry(kg, b"k", suffix);
            s.put(&e, suffix).unwrap();
        }
        let other = s.entry(s.key_group(b"k2"), b"k2", b"a");
        s.put(&other, b"other").unwrap();
        let prefix = s.entry(kg, b"k", b"");
        let mut seen = Vec::new();
        s.scan_prefix(&prefix, &mut |k, v| {
            seen.push((k[prefix.len()..].to_vec(), v.to_vec()));
            true
        })
        .unwrap();
        let want: Vec<(Vec<u8>, Vec<u8>)> = [&b""[..], b"a", b"b"]
            .iter()
            .map(|s| (s.to_vec(), s.to_vec()))
            .collect();
        assert_eq!(seen, want, "the key's entries in order, no other key's");
    }

    #[test]
    fn operators_sharing_a_backend_do_not_see_each_others_entries() {
        let mut a = state(1);
        let kg = a.key_group(b"k");
        let e = a.entry(kg, b"k", b"");
        a.put(&e, b"1").unwrap();
        let b = KeyedState { op: 2, ..a };
        assert_eq!(b.get(&b.entry(kg, b"k", b"")).unwrap(), None);
        assert_eq!(b.get(&e).unwrap(), Some(b"1".to_vec()));
    }

    #[test]
    fn timers_come_due_once_in_time_order_per_domain() {
        let mut s = state(3);
        for (key, at, payload) in [
            (&b"b"[..], 30, &b"x"[..]),
            (b"a", 10, b""),
            (b"a", 20, b"y"),
            (b"c", 25, b""),
        ] {
            let kg = s.key_group(key);
            let timer = s.timer(TimeDomain::EventTime, at, kg, key, payload);
            s.put(&timer, &[]).unwrap();
        }
        let kg = s.key_group(b"c");
        s.delete(&s.timer(TimeDomain::EventTime, 25, kg, b"c", b""))
            .unwrap();
        s.put(&s.timer(TimeDomain::ProcessingTime, 15, kg, b"c", b"p"), &[])
            .unwrap();
        let due = |s: &mut KeyedState, d, from, upto| -> Vec<(i64, Vec<u8>, Vec<u8>)> {
            s.take_due_timers(d, from, upto)
                .unwrap()
                .into_iter()
                .map(|t| (t.time, t.key().to_vec(), t.payload().to_vec()))
                .collect()
        };
        assert_eq!(
            due(&mut s, TimeDomain::EventTime, i64::MIN, 20),
            [(10, b"a".to_vec(), vec![]), (20, b"a".to_vec(), b"y".to_vec())]
        );
        assert_eq!(
            due(&mut s, TimeDomain::EventTime, i64::MIN, i64::MAX),
            [(30, b"b".to_vec(), b"x".to_vec())]
        );
        assert!(
            due(&mut s, TimeDomain::EventTime, i64::MIN, i64::MAX).is_empty(),
            "taken once"
        );
        assert_eq!(
            due(&mut s, TimeDomain::ProcessingTime, 15, 15),
            [(15, b"c".to_vec(), b"p".to_vec())]
        );
    }
}
