//! State queries: a keyed operator's state of one key, or of the keys
//! starting with a prefix, read on the worker's own thread between two
//! batches (so it is consistent) and shown as JSON by the operator that
//! knows its layout.

use super::{KeyedState, StateError, keys};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// What a state query asks of a keyed operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateRequest {
    /// The state of this key.
    Key(Vec<u8>),
    /// The state of the first `limit` keys (in byte order) starting with
    /// `prefix`.
    Scan {
        /// What the keys start with (empty: every key).
        prefix: Vec<u8>,
        /// At most this many keys.
        limit: usize,
    },
}

/// Everything one key holds in an operator's state: each entry's suffix
/// (what follows the key in the entry) and value, in entry order.
pub type KeyEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// Keys and their state as an operator shows it, in key order.
pub type Answer = Vec<(Vec<u8>, Value)>;

impl KeyedState {
    /// What `key` holds.
    pub fn key_entries(&self, key: &[u8]) -> Result<KeyEntries, StateError> {
        let prefix = self.key_entry(key);
        let mut entries = Vec::new();
        self.scan_prefix(&prefix, &mut |k, v| {
            entries.push((k[prefix.len()..].to_vec(), v.to_vec()));
            true
        })?;
        Ok(entries)
    }

    /// The first `limit` keys starting with `prefix` (byte order) and what
    /// each holds: every key group is read (a debugging aid, not a hot
    /// path), the keys kept bounded by `limit`.
    pub fn keys_with_prefix(
        &self,
        prefix: &[u8],
        limit: usize,
    ) -> Result<BTreeMap<Vec<u8>, KeyEntries>, StateError> {
        let mut found: BTreeMap<Vec<u8>, KeyEntries> = BTreeMap::new();
        for key_group in 0..self.key_groups() {
            let operator = &keys::keyed(key_group, self.op(), &[])[..4];
            self.scan_prefix(operator, &mut |k, v| {
                if let Some((key, suffix)) = split_entry(k)
                    && key.starts_with(prefix)
                {
                    found
                        .entry(key.to_vec())
                        .or_default()
                        .push((suffix.to_vec(), v.to_vec()));
                    if found.len() > limit {
                        found.pop_last();
                    }
                }
                true
            })?;
        }
        Ok(found)
    }
}

/// The key and the suffix of a keyed entry (`key_group op key_len key
/// suffix`).
fn split_entry(entry: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(entry.get(4..8)?.try_into().ok()?) as usize;
    Some((entry.get(8..8 + len)?, &entry[8 + len..]))
}

/// Answers `request` from `state`, each key's entries shown by `view`
/// (`None`: nothing of the key's to show, as if it had no state).
pub fn answer(
    state: &KeyedState,
    request: &StateRequest,
    view: impl Fn(&KeyEntries) -> Option<Value>,
) -> Result<Answer, StateError> {
    Ok(match request {
        StateRequest::Key(key) => {
            let entries = state.key_entries(key)?;
            match entries.is_empty() {
                true => Vec::new(),
                false => view(&entries).map(|v| (key.clone(), v)).into_iter().collect(),
            }
        }
        StateRequest::Scan { prefix, limit } => state
            .keys_with_prefix(prefix, *limit)?
            .into_iter()
            .filter_map(|(key, entries)| Some((key, view(&entries)?)))
            .collect(),
    })
}

/// Bytes as JSON: a string when they are UTF-8 text, else `{"hex": …}`.
pub fn bytes_json(bytes: &[u8]) -> Value {
    match std::str::from_utf8(bytes) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => json!({ "hex": hex::encode(bytes) }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryBackend;

    fn state(op: u16) -> KeyedState {
        KeyedState::new(Box::new(MemoryBackend::default()), op, 16)
    }

    fn put(s: &mut KeyedState, key: &str, suffix: &[u8], value: &str) {
        let e = s.entry(s.key_group(key.as_bytes()), key.as_bytes(), suffix);
        s.put(&e, value.as_bytes()).unwrap();
    }

    fn texts(answer: &Answer) -> Vec<(String, Value)> {
        answer
            .iter()
            .map(|(k, v)| (String::from_utf8(k.clone()).unwrap(), v.clone()))
            .collect()
    }

    fn first_value(entries: &KeyEntries) -> Option<Value> {
        Some(json!({ "entries": entries.len(), "first": bytes_json(&entries[0].1) }))
    }

    #[test]
    fn a_key_answers_with_all_its_entries_and_nothing_of_other_keys() {
        let mut s = state(3);
        put(&mut s, "a", b"", "1");
        put(&mut s, "a", b"x", "2");
        put(&mut s, "ab", b"", "3");
        let got = answer(&s, &StateRequest::Key(b"a".to_vec()), first_value).unwrap();
        assert_eq!(
            texts(&got),
            vec![("a".into(), json!({"entries": 2, "first": "1"}))]
        );
        let none = answer(&s, &StateRequest::Key(b"zz".to_vec()), first_value).unwrap();
        assert!(none.is_empty());
    }

    #[test]
    fn a_scan_gives_the_first_keys_with_the_prefix_in_byte_order() {
        let mut s = state(1);
        for key in ["user-9", "user-1", "other", "user-5", "user-3", "user-7"] {
            put(&mut s, key, b"", key);
        }
        let request = StateRequest::Scan {
            prefix: b"user-".to_vec(),
            limit: 3,
        };
        let got = answer(&s, &request, first_value).unwrap();
        let keys: Vec<String> = texts(&got).into_iter().map(|(k, _)| k).collect();
        assert_eq!(keys, ["user-1", "user-3", "user-5"]);
    }

    #[test]
    fn bytes_show_as_text_or_hex() {
        assert_eq!(bytes_json(b"12"), json!("12"));
        assert_eq!(bytes_json(&[0xff, 0]), json!({"hex": "ff00"}));
    }
}
