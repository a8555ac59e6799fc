//! Comparing what a sink got with what a case expects, and naming the first
//! difference.
//!
//! Order counts only within a key (a keyed pipeline's output interleaves
//! keys as its workers go), unless the case asks for the whole order.
//! Expected lines without keys are compared as a multiset.

use super::records_file::CaseRecord;
use crate::record::Record;
use crate::tap::record_line;
use std::collections::BTreeMap;

/// How to compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// Within each key (or none, when the expected lines give no keys).
    PerKey,
    /// The records in exactly this order.
    Whole,
}

/// What a key is expected to get, and what it got.
type KeyRecords<'a> = (Vec<&'a CaseRecord>, Vec<&'a Record>);

/// The first difference between `expected` and `got`, in words; `None`
/// when they match.
pub fn first_difference(expected: &[CaseRecord], got: &[Record], order: Order) -> Option<String> {
    if order == Order::Whole {
        return in_order(expected.iter().collect(), got.iter().collect(), "");
    }
    if expected.iter().any(|e| !e.has_key) {
        return in_any_order(expected, got);
    }
    let mut by_key: BTreeMap<Option<&[u8]>, KeyRecords<'_>> = BTreeMap::new();
    for e in expected {
        by_key.entry(e.record.key.as_deref()).or_default().0.push(e);
    }
    for g in got {
        by_key.entry(g.key.as_deref()).or_default().1.push(g);
    }
    by_key.into_iter().find_map(|(key, (expected, got))| {
        let key = match key {
            Some(k) => format!(" of key {}", crate::state::bytes_json(k)),
            None => " without a key".to_owned(),
        };
        in_order(expected, got, &key)
    })
}

/// The first place the two sequences differ.
fn in_order(expected: Vec<&CaseRecord>, got: Vec<&Record>, which: &str) -> Option<String> {
    for i in 0..expected.len().max(got.len()) {
        match (expected.get(i), got.get(i)) {
            (Some(e), Some(g)) if matches(e, g) => {}
            (Some(e), Some(g)) => {
                return Some(format!(
                    "record {}{which}: expected {}, got {}",
                    i + 1,
                    shown(e),
                    record_line(g)
                ));
            }
            (Some(e), None) => {
                return Some(format!(
                    "{} records{which} expected, {} came: the first missing is {}",
                    expected.len(),
                    got.len(),
                    shown(e)
                ));
            }
            (None, Some(g)) => {
                return Some(format!(
                    "{} records{which} expected, {} came: the first extra is {}",
                    expected.len(),
                    got.len(),
                    record_line(g)
                ));
            }
            (None, None) => unreachable!("i is below the longer length"),
        }
    }
    None
}

/// The first record missing or extra when order does not count.
fn in_any_order(expected: &[CaseRecord], got: &[Record]) -> Option<String> {
    let mut e: Vec<&CaseRecord> = expected.iter().collect();
    let mut g: Vec<&Record> = got.iter().collect();
    // Ties of value in an order both sides share.
    e.sort_by(|a, b| (&a.record.value, a.record.timestamp).cmp(&(&b.record.value, b.record.timestamp)));
    g.sort_by(|a, b| (&a.value, a.timestamp).cmp(&(&b.value, b.timestamp)));
    let counts = format!(
        "{} records expected (in any order: the expected lines give no keys), {} came",
        e.len(),
        g.len()
    );
    let (mut i, mut j) = (0, 0);
    loop {
        match (e.get(i), g.get(j)) {
            (Some(x), Some(y)) if matches(x, y) => (i, j) = (i + 1, j + 1),
            (Some(x), Some(y)) if x.record.value <= y.value => {
                return Some(format!("{counts}: {} is missing", shown(x)));
            }
            (_, Some(y)) => return Some(format!("{counts}: {} is extra", record_line(y))),
            (Some(x), None) => return Some(format!("{counts}: {} is missing", shown(x))),
            (None, None) => return None,
        }
    }
}

/// Whether `got` is what `expected` says (as far as its line says).
fn matches(expected: &CaseRecord, got: &Record) -> bool {
    let e = &expected.record;
    let sorted = |h: &[(String, bytes::Bytes)]| {
        let mut h = h.to_vec();
        h.sort();
        h
    };
    e.value == got.value
        && (!expected.has_key || e.key == got.key)
        && (!expected.has_timestamp || e.timestamp == got.timestamp)
        && (e.headers.is_empty() || sorted(&e.headers) == sorted(&got.headers))
}

/// An expected record as its line gave it.
fn shown(expected: &CaseRecord) -> String {
    let mut line = record_line(&expected.record);
    if let Some(fields) = line.as_object_mut()
        && !expected.has_timestamp
    {
        fields.remove("timestamp");
    }
    line.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn rec(key: Option<&str>, value: &str) -> Record {
        Record::new(key.map(|k| Bytes::from(k.to_owned())), value.to_owned(), 0)
    }

    fn expect(key: Option<&str>, value: &str) -> CaseRecord {
        CaseRecord {
            record: rec(key, value),
            has_key: key.is_some(),
            has_timestamp: false,
        }
    }

    #[test]
    fn keys_may_interleave_but_each_keys_order_counts() {
        let expected = [
            expect(Some("a"), "1"),
            expect(Some("b"), "1"),
            expect(Some("a"), "2"),
        ];
        let got = [rec(Some("b"), "1"), rec(Some("a"), "1"), rec(Some("a"), "2")];
        assert_eq!(first_difference(&expected, &got, Order::PerKey), None);
        let swapped = [rec(Some("a"), "2"), rec(Some("a"), "1"), rec(Some("b"), "1")];
        assert_eq!(
            first_difference(&expected, &swapped, Order::PerKey).unwrap(),
            r#"record 1 of key "a": expected {"key":"a","value":"1"}, got {"key":"a","timestamp":0,"value":"2"}"#
        );
        assert!(first_difference(&expected, &got, Order::Whole).is_some());
    }

    #[test]
    fn missing_and_extra_records_are_named() {
        let expected = [expect(None, "x"), expect(None, "y")];
        assert_eq!(
            first_difference(&expected, &[rec(None, "y")], Order::PerKey).unwrap(),
            r#"2 records expected (in any order: the expected lines give no keys), 1 came: {"value":"x"} is missing"#
        );
        let got = [rec(None, "y"), rec(None, "x"), rec(None, "z")];
        assert!(
            first_difference(&expected, &got, Order::PerKey)
                .unwrap()
                .ends_with(r#"{"timestamp":0,"value":"z"} is extra"#)
        );
        let keyed = [expect(Some("a"), "1")];
        assert_eq!(
            first_difference(&keyed, &[], Order::PerKey).unwrap(),
            r#"1 records of key "a" expected, 0 came: the first missing is {"key":"a","value":"1"}"#
        );
    }
}
