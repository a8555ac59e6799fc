//! State migration of the key in scope: a plugin that changed the shape of
//! its state declares a higher state version and exports `migrate`; before
//! such a plugin handles a key whose state an older version wrote, the
//! operator hands each of the key's values through it and writes them back
//! among the call's own changes, so a key is migrated exactly when its
//! call commits (atomically per key, and again after a crash if the call's
//! checkpoint never completed).
//!
//! A migrated key carries a mark, an entry holding its state version:
//! `keyed(key_group, op, key) 0xFF 0xFF` (a state name's length byte
//! followed by a byte no UTF-8 name starts with, so no state of the
//! plugin's can reach it). A key without a mark is at the worker's
//! unmarked version ([`StateVersions::unmarked`]).

use super::{KeyedContext, KeyedError, LIST, MAP, VALUE, parse_suffix};
use crate::state::{StateError, keys};
use serde::{Deserialize, Serialize};

/// The suffix of a key's state version mark.
const MARK: [u8; 2] = [0xFF, 0xFF];

/// The state versions of a keyed operator's state on one worker, as
/// checkpoints record them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateVersions {
    /// The plugin's: each key it handles is brought to it first.
    pub current: u32,
    /// The version of every key without a mark: the plugin's when the
    /// state started empty, the older one while a migration goes on.
    pub unmarked: u32,
}

impl StateVersions {
    /// State written from the start by a plugin of state version `v`.
    pub fn at(v: u32) -> Self {
        Self {
            current: v,
            unmarked: v,
        }
    }

    /// Whether keys may still be at an older version than the plugin's.
    pub fn migrating(&self) -> bool {
        self.unmarked < self.current
    }
}

/// Where an eager migration (every key, in the background) is: the key
/// group it looks in, and the last key it handled there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MigrationCursor {
    key_group: u16,
    after: Option<Vec<u8>>,
}

/// One value of the key in scope written under an older state version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleValue {
    entry: Vec<u8>,
    /// Its state's name.
    pub name: String,
    /// The expiry a state with a time-to-live keeps before the value.
    expiry: Option<[u8; 8]>,
    /// The value as the older version wrote it.
    pub value: Vec<u8>,
}

impl KeyedContext {
    /// The key in scope's mark entry.
    fn mark_entry(&self) -> Result<Vec<u8>, KeyedError> {
        let (kg, key) = self.scope()?;
        Ok(self.state.entry(*kg, key, &MARK))
    }

    /// When the key in scope is at an older state version than
    /// `versions.current`: that version and each of its live values (the
    /// items of a list state, the values of a map state). `None` when it
    /// is at the current version or above (a forced downgrade).
    pub fn stale_values(
        &self,
        versions: StateVersions,
    ) -> Result<Option<(u32, Vec<StaleValue>)>, KeyedError> {
        let marked = self
            .read_raw(&self.mark_entry()?)?
            .and_then(|v| Some(u32::from_be_bytes(v.get(..4)?.try_into().ok()?)));
        let from = marked.unwrap_or(versions.unmarked);
        if from >= versions.current {
            return Ok(None);
        }
        let (kg, key) = self.scope()?;
        let prefix = self.state.entry(*kg, key, &[]);
        let mut stale = Vec::new();
        for (entry, stored) in self.scan_raw(&prefix, true)? {
            let Some((name, kind, sub)) = parse_suffix(&entry[prefix.len()..]) else {
                continue; // the mark
            };
            let is_value = match kind {
                VALUE | MAP => true,
                LIST => !sub.is_empty(), // not the list's length
                _ => false,
            };
            if !is_value {
                continue;
            }
            let (expiry, value) = match self.ttl.contains_key(name) {
                false => (None, stored),
                true => {
                    let Some(expiry) = stored.get(..8).and_then(|e| <[u8; 8]>::try_from(e).ok()) else {
                        continue;
                    };
                    if i64::from_be_bytes(expiry) <= self.now {
                        continue; // expired: it reads as absent whatever its shape
                    }
                    (Some(expiry), stored[8..].to_vec())
                }
            };
            stale.push(StaleValue {
                name: name.to_owned(),
                entry,
                expiry,
                value,
            });
        }
        Ok(Some((from, stale)))
    }

    /// Writes the migrated values of the key in scope, each `(value, new
    /// bytes)`, among the call's changes, and marks the key as at state
    /// version `to`. A key without values is marked only if the call
    /// writes state for it.
    pub fn put_migrated(&mut self, to: u32, migrated: Vec<(StaleValue, Vec<u8>)>) -> Result<(), KeyedError> {
        if migrated.is_empty() {
            self.mark_on_write = Some(to);
            return Ok(());
        }
        for (stale, bytes) in migrated {
            let stored = match stale.expiry {
                None => bytes,
                Some(expiry) => [&expiry[..], &bytes].concat(),
            };
            self.write(stale.entry, Some(stored))?;
        }
        let mark = self.mark_entry()?;
        self.write(mark, Some(to.to_be_bytes().to_vec()))
    }

    /// Up to `n` keys of the operator's state from `cursor` on (key group by
    /// key group, each in key order), the cursor moved past them; none at
    /// the end of the state.
    pub fn next_keys(&self, cursor: &mut MigrationCursor, n: usize) -> Result<Vec<Vec<u8>>, StateError> {
        let mut found: Vec<Vec<u8>> = Vec::new();
        while found.len() < n && cursor.key_group < self.state.key_groups() {
            let group = self.state.entry(cursor.key_group, &[], &[]);
            let group = &group[..4]; // key group and operator
            let from = match &cursor.after {
                Some(key) => keys::prefix_end(&self.state.entry(cursor.key_group, key, &[]))
                    .expect("a keyed entry starts below 0xFFFF"),
                None => group.to_vec(),
            };
            let end = keys::prefix_end(group).expect("a keyed entry starts below 0xFFFF");
            let before = found.len();
            self.state.scan(&from, &end, &mut |entry, _| {
                let Some(len) = entry
                    .get(4..8)
                    .map(|l| u32::from_be_bytes(l.try_into().expect("4 bytes")))
                else {
                    return true;
                };
                let Some(key) = entry.get(8..8 + len as usize) else {
                    return true;
                };
                if found.last().is_none_or(|last| last.as_slice() != key) {
                    if found.len() == n {
                        return false;
                    }
                    found.push(key.to_vec());
                }
                true
            })?;
            match found.len() - before {
                0 => {
                    cursor.key_group += 1;
                    cursor.after = None;
                }
                _ => cursor.after = found.last().cloned(),
            }
        }
        Ok(found)
    }

    /// The mark that [`put_migrated`](Self::put_migrated) left for the
    /// key in scope, as a pending write when the call wrote state of the
    /// key (before the scope ends).
    pub(super) fn take_mark_on_write(&mut self) -> Option<(Vec<u8>, Vec<u8>)> {
        let to = self.mark_on_write.take()?;
        let (kg, key) = self.scope.as_ref()?;
        let prefix = self.state.entry(*kg, key, &[]);
        let written = self
            .pending
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .any(|(_, v)| v.is_some());
        written.then(|| (self.state.entry(*kg, key, &MARK), to.to_be_bytes().to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{KeyedState, MemoryBackend};
    use std::sync::Arc;

    fn context() -> KeyedContext {
        let ttl = [("fresh".to_owned(), 1_000)].into_iter().collect();
        KeyedContext::new(
            KeyedState::new(Box::new(MemoryBackend::default()), 3, 128),
            ttl,
            Arc::new(|| 5_000),
        )
    }

    fn upper(stale: Vec<StaleValue>) -> Vec<(StaleValue, Vec<u8>)> {
        stale
            .into_iter()
            .map(|s| {
                let up = s.value.to_ascii_uppercase();
                (s, up)
            })
            .collect()
    }

    #[test]
    fn a_key_is_migrated_once_with_every_kind_of_state_and_its_ttl() {
        let mut ctx = context();
        ctx.enter(b"k");
        ctx.set("n", b"one".to_vec()).unwrap();
        ctx.set("fresh", b"ttl".to_vec()).unwrap();
        ctx.list_append("l", b"a".to_vec()).unwrap();
        ctx.list_append("l", b"b".to_vec()).unwrap();
        ctx.map_set("m", b"x", b"v".to_vec()).unwrap();
        ctx.commit().unwrap();
        let versions = StateVersions {
            current: 2,
            unmarked: 1,
        };
        ctx.enter(b"k");
        let (from, stale) = ctx.stale_values(versions).unwrap().unwrap();
        assert_eq!(from, 1);
        let mut names: Vec<&str> = stale.iter().map(|s| s.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, ["fresh", "l", "l", "m", "n"]);
        ctx.put_migrated(2, upper(stale)).unwrap();
        ctx.commit().unwrap();
        ctx.enter(b"k");
        assert_eq!(ctx.get("n").unwrap(), Some(b"ONE".to_vec()));
        assert_eq!(
            ctx.get("fresh").unwrap(),
            Some(b"TTL".to_vec()),
            "its expiry kept"
        );
        assert_eq!(ctx.list_get("l").unwrap(), [b"A".to_vec(), b"B".to_vec()]);
        assert_eq!(ctx.map_get("m", b"x").unwrap(), Some(b"V".to_vec()));
        assert_eq!(ctx.stale_values(versions).unwrap(), None, "marked: migrated once");
        let shown = ctx
            .query(&crate::state::StateRequest::Key(b"k".to_vec()))
            .unwrap();
        assert_eq!(shown[0].1["n"], "ONE", "the mark is no state of the plugin's");
        assert_eq!(shown[0].1.as_object().unwrap().len(), 4);
    }

    #[test]
    fn the_cursor_walks_every_key_once() {
        let mut ctx = context();
        let keys: Vec<Vec<u8>> = (0..50).map(|i| format!("k{i}").into_bytes()).collect();
        for key in &keys {
            ctx.enter(key);
            ctx.set("a", b"1".to_vec()).unwrap();
            ctx.list_append("b", b"2".to_vec()).unwrap();
            ctx.commit().unwrap();
        }
        let mut cursor = MigrationCursor::default();
        let mut seen = Vec::new();
        loop {
            let next = ctx.next_keys(&mut cursor, 7).unwrap();
            if next.is_empty() {
                break;
            }
            assert!(next.len() <= 7);
            seen.extend(next);
        }
        seen.sort();
        let mut expected = keys.clone();
        expected.sort();
        assert_eq!(seen, expected);
    }

    #[test]
    fn an_aborted_call_leaves_the_key_unmigrated() {
        let mut ctx = context();
        ctx.enter(b"k");
        ctx.set("n", b"one".to_vec()).unwrap();
        ctx.commit().unwrap();
        let versions = StateVersions {
            current: 2,
            unmarked: 1,
        };
        ctx.enter(b"k");
        let (_, stale) = ctx.stale_values(versions).unwrap().unwrap();
        ctx.put_migrated(2, upper(stale)).unwrap();
        ctx.abort();
        ctx.enter(b"k");
        let (from, stale) = ctx.stale_values(versions).unwrap().unwrap();
        assert_eq!((from, stale[0].value.as_slice()), (1, &b"one"[..]));
    }

    #[test]
    fn a_new_key_is_marked_only_when_its_call_writes_state() {
        let mut ctx = context();
        let versions = StateVersions {
            current: 3,
            unmarked: 2,
        };
        ctx.enter(b"quiet");
        let (_, stale) = ctx.stale_values(versions).unwrap().unwrap();
        ctx.put_migrated(3, upper(stale)).unwrap();
        ctx.register_timer(crate::state::TimeDomain::EventTime, 7)
            .unwrap();
        ctx.commit().unwrap();
        ctx.enter(b"quiet");
        assert!(
            ctx.stale_values(versions).unwrap().is_some(),
            "no mark: nothing stored"
        );
        ctx.abort();
        ctx.enter(b"new");
        let (_, stale) = ctx.stale_values(versions).unwrap().unwrap();
        ctx.put_migrated(3, upper(stale)).unwrap();
        ctx.set("n", b"written by version 3".to_vec()).unwrap();
        ctx.commit().unwrap();
        ctx.enter(b"new");
        assert_eq!(
            ctx.stale_values(versions).unwrap(),
            None,
            "its state is version 3's"
        );
        assert_eq!(ctx.stale_values(StateVersions::at(3)).unwrap(), None);
    }
}
