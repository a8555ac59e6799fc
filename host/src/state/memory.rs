//! The in-memory backend, shaped by how operators lay out entries (see
//! [`keys`](super::keys)):
//!
//! - a key's own entry (a reduce or aggregate accumulator: no suffix after
//!   the key) sits in one hash table, key and value in one allocation;
//! - entries under a key with a suffix (windows, list items, map entries)
//!   sit in an ordered map per key;
//! - everything else (timers) sits in one ordered map.
//!
//! A scan of one key's entries, or of timers, reads only the structure that
//! holds them; any other range (no operator makes one) walks everything.

use super::{StateBackend, StateError, keys};
use hashbrown::HashTable;
use std::collections::BTreeMap;
use std::ops::Bound;
use xxhash_rust::xxh3::xxh3_64;

/// One key and its value in a single allocation: `key_len:u32 key value`.
struct Entry(Box<[u8]>);

impl Entry {
    fn new(key: &[u8], value: &[u8]) -> Self {
        let mut b = Vec::with_capacity(4 + key.len() + value.len());
        b.extend_from_slice(&(key.len() as u32).to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(value);
        Self(b.into_boxed_slice())
    }

    fn key_len(&self) -> usize {
        u32::from_le_bytes(self.0[..4].try_into().expect("4 bytes")) as usize
    }

    fn key(&self) -> &[u8] {
        &self.0[4..4 + self.key_len()]
    }

    fn value(&self) -> &[u8] {
        &self.0[4 + self.key_len()..]
    }
}

type Ordered = BTreeMap<Box<[u8]>, Box<[u8]>>;

/// The entries under one keyed prefix, by suffix.
type Nested = (Box<[u8]>, Ordered);

/// State in memory: fast, bounded by RAM.
///
/// Keys are hashed with xxh3 over the whole key at once: keys share long
/// prefixes (key group, operator, length), which weak or streaming hashes
/// map to colliding buckets.
#[derive(Default)]
pub struct MemoryBackend {
    own: HashTable<Entry>,
    nested: HashTable<Nested>,
    other: Ordered,
    /// What the entries take: keys, values and [`ENTRY_OVERHEAD`] each.
    bytes: usize,
}

/// What an entry takes beside its key and value: its slot and allocation
/// headers, about.
pub const ENTRY_OVERHEAD: usize = 48;

/// What an entry of `key` and `value` takes.
fn footprint(key: usize, value: usize) -> usize {
    key + value + ENTRY_OVERHEAD
}

impl std::fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryBackend")
            .field("entries", &self.len())
            .finish()
    }
}

/// Where a key lives: its length up to the end of its keyed prefix, when it
/// has the keyed layout (and is not a timer).
fn prefix_len(key: &[u8]) -> Option<usize> {
    if key.get(..2)? == keys::TIMERS.to_be_bytes() {
        return None;
    }
    let len = u32::from_be_bytes(key.get(4..8)?.try_into().ok()?) as usize;
    let end = 8usize.checked_add(len)?;
    (key.len() >= end).then_some(end)
}

impl MemoryBackend {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.own.len() + self.nested.iter().map(|(_, m)| m.len()).sum::<usize>() + self.other.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// About how much memory the entries take, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// `f` of the value at `key`, read in place.
    pub fn read<T>(&self, key: &[u8], f: impl FnOnce(&[u8]) -> T) -> Option<T> {
        match prefix_len(key) {
            Some(p) if p == key.len() => self.find_own(key).map(|e| f(e.value())),
            Some(p) => self
                .nested_at(&key[..p])
                .and_then(|m| m.get(&key[p..]))
                .map(|v| f(v)),
            None => self.other.get(key).map(|v| f(v)),
        }
    }

    /// Lets `f` change the value at `key` in place (not its length): what
    /// `f` returns, or `None` when there is no value.
    pub fn update<T>(&mut self, key: &[u8], f: impl FnOnce(&mut [u8]) -> T) -> Option<T> {
        let value: Option<&mut [u8]> = match prefix_len(key) {
            Some(p) if p == key.len() => self
                .own
                .find_mut(xxh3_64(key), |e| e.key() == key)
                .map(|e| &mut e.0[4 + key.len()..]),
            Some(p) => self
                .nested
                .find_mut(xxh3_64(&key[..p]), |(k, _)| **k == key[..p])
                .and_then(|(_, m)| m.get_mut(&key[p..]))
                .map(|v| &mut v[..]),
            None => self.other.get_mut(key).map(|v| &mut v[..]),
        };
        value.map(f)
    }

    /// Calls `f` with every entry, in no particular order, letting it change
    /// the value in place (not its length); the entries it returns false
    /// for are removed.
    pub fn retain(&mut self, f: &mut dyn FnMut(&[u8], &mut [u8]) -> bool) {
        let mut removed = 0;
        self.own.retain(|e| {
            let at = 4 + e.key_len();
            let (head, value) = e.0.split_at_mut(at);
            let keep = f(&head[4..], value);
            if !keep {
                removed += footprint(at - 4, value.len());
            }
            keep
        });
        let mut key = Vec::new();
        for (prefix, entries) in self.nested.iter_mut() {
            entries.retain(|suffix, v| {
                key.clear();
                key.extend_from_slice(prefix);
                key.extend_from_slice(suffix);
                let keep = f(&key, v);
                if !keep {
                    removed += footprint(key.len(), v.len());
                }
                keep
            });
        }
        self.nested.retain(|(_, entries)| !entries.is_empty());
        self.other.retain(|k, v| {
            let keep = f(k, v);
            if !keep {
                removed += footprint(k.len(), v.len());
            }
            keep
        });
        self.bytes -= removed;
    }

    fn find_own(&self, key: &[u8]) -> Option<&Entry> {
        self.own.find(xxh3_64(key), |e| e.key() == key)
    }

    /// The entries under the keyed prefix `prefix`.
    fn nested_at(&self, prefix: &[u8]) -> Option<&Ordered> {
        self.nested
            .find(xxh3_64(prefix), |(k, _)| **k == *prefix)
            .map(|(_, m)| m)
    }

    /// Every entry in `from..to`, in order, the slow way.
    fn walk_all(&self, from: &[u8], to: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) {
        let within = |k: &[u8]| from <= k && k < to;
        let mut all: Vec<(Vec<u8>, &[u8])> = Vec::new();
        all.extend(
            self.own
                .iter()
                .filter(|e| within(e.key()))
                .map(|e| (e.key().to_vec(), e.value())),
        );
        for (prefix, entries) in self.nested.iter() {
            for (suffix, v) in entries {
                let k = [&prefix[..], &suffix[..]].concat();
                if within(&k) {
                    all.push((k, v));
                }
            }
        }
        let range = (Bound::Included(from), Bound::Excluded(to));
        all.extend(
            self.other
                .range::<[u8], _>(range)
                .map(|(k, v)| (k.to_vec(), &v[..])),
        );
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (k, v) in all {
            if !f(&k, v) {
                break;
            }
        }
    }

    /// The entries under one key's prefix `from[..p]`, when `to` bounds them
    /// within it; `false` when the range is of another shape.
    fn scan_key(&self, from: &[u8], p: usize, to: &[u8], f: &mut dyn FnMut(&[u8], &[u8]) -> bool) -> bool {
        let prefix = &from[..p];
        let upper = if to.starts_with(prefix) {
            Bound::Excluded(&to[p..])
        } else if keys::prefix_end(prefix).as_deref() == Some(to) {
            Bound::Unbounded
        } else {
            return false;
        };
        if p == from.len()
            && let Some(e) = self.find_own(prefix)
            && !f(e.key(), e.value())
        {
            return true;
        }
        if let Some(entries) = self.nested_at(prefix) {
            let mut key = prefix.to_vec();
            for (suffix, v) in entries.range::<[u8], _>((Bound::Included(&from[p..]), upper)) {
                key.truncate(p);
                key.extend_from_slice(suffix);
                if !f(&key, v) {
                    break;
                }
            }
        }
        true
    }
}

impl StateBackend for MemoryBackend {
    fn snapshot(&mut self, dir: &std::path::Path) -> Result<(), StateError> {
        super::snapshot::write_entries(self, dir)
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.read(key, <[u8]>::to_vec))
    }

    fn read_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), StateError> {
        if self.read(key, |v| f(Some(v))).is_none() {
            f(None);
        }
        Ok(())
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        let replaced = match prefix_len(key) {
            Some(p) if p == key.len() => {
                let hash = xxh3_64(key);
                let found = self.own.find_mut(hash, |e| e.key() == key);
                match found {
                    Some(e) if e.value().len() == value.len() => {
                        let at = 4 + key.len();
                        e.0[at..].copy_from_slice(value);
                        Some(value.len())
                    }
                    Some(e) => {
                        let old = e.value().len();
                        *e = Entry::new(key, value);
                        Some(old)
                    }
                    None => {
                        self.own
                            .insert_unique(hash, Entry::new(key, value), |e| xxh3_64(e.key()));
                        None
                    }
                }
            }
            Some(p) => {
                let (prefix, suffix) = key.split_at(p);
                let hash = xxh3_64(prefix);
                let entries = match self.nested.find_mut(hash, |(k, _)| **k == *prefix) {
                    Some((_, m)) => m,
                    None => {
                        let new = (prefix.into(), Ordered::new());
                        &mut self
                            .nested
                            .insert_unique(hash, new, |(k, _)| xxh3_64(k))
                            .into_mut()
                            .1
                    }
                };
                match entries.get_mut(suffix) {
                    // Replaced in place: no allocation.
                    Some(v) if v.len() == value.len() => {
                        v.copy_from_slice(value);
                        Some(value.len())
                    }
                    Some(v) => Some(std::mem::replace(v, value.into()).len()),
                    None => {
                        entries.insert(suffix.into(), value.into());
                        None
                    }
                }
            }
            None => self.other.insert(key.into(), value.into()).map(|old| old.len()),
        };
        self.bytes += footprint(key.len(), value.len());
        if let Some(old) = replaced {
            self.bytes -= footprint(key.len(), old);
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        let removed = match prefix_len(key) {
            Some(p) if p == key.len() => match self.own.find_entry(xxh3_64(key), |e| e.key() == key) {
                Ok(e) => Some(e.remove().0.value().len()),
                Err(_) => None,
            },
            Some(p) => match self
                .nested
                .find_entry(xxh3_64(&key[..p]), |(k, _)| **k == key[..p])
            {
                Ok(mut at) => {
                    let entries = &mut at.get_mut().1;
                    let old = entries.remove(&key[p..]).map(|old| old.len());
                    if entries.is_empty() {
                        at.remove();
                    }
                    old
                }
                Err(_) => None,
            },
            None => self.other.remove(key).map(|old| old.len()),
        };
        if let Some(old) = removed {
            self.bytes -= footprint(key.len(), old);
        }
        Ok(())
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        if from >= to {
            return Ok(());
        }
        if let Some(p) = prefix_len(from)
            && self.scan_key(from, p, to, f)
        {
            return Ok(());
        }
        if from >= &keys::TIMERS.to_be_bytes()[..] {
            // Only timers (and other unkeyed entries) sort this high.
            for (k, v) in self
                .other
                .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)))
            {
                if !f(k, v) {
                    break;
                }
            }
            return Ok(());
        }
        self.walk_all(from, to, f);
        Ok(())
    }
}
