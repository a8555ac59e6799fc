//! Every backend behaves like an ordered map: random operations against a
//! `BTreeMap` model.

use super::*;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Debug, Clone)]
enum Op {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Get(Vec<u8>),
    Scan(Vec<u8>, Vec<u8>, usize),
}

fn small_key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0u8..4, 0..4)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (small_key(), any::<Vec<u8>>()).prop_map(|(k, v)| Op::Put(k, v)),
        small_key().prop_map(Op::Delete),
        small_key().prop_map(Op::Get),
        (small_key(), small_key(), 0usize..6).prop_map(|(a, b, n)| Op::Scan(a, b, n)),
    ]
}

/// Keys as operators lay them out: a key's own entry, entries under it, and
/// timers.
fn keyed_key() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0u16..2, 0u16..2, small_key(), small_key()).prop_map(|(kg, op, key, suffix)| {
            let mut k = keys::keyed(kg, op, &key);
            k.extend_from_slice(&suffix);
            k
        }),
        (0u16..2, -2i64..2, small_key()).prop_map(|(op, t, key)| keys::timer(op, t, 0, &key, &[])),
    ]
}

/// Ranges as operators scan them (everything under a key, part of that,
/// timers) and arbitrary ones.
fn keyed_range() -> impl Strategy<Value = (Vec<u8>, Vec<u8>)> {
    prop_oneof![
        keyed_key().prop_map(|k| {
            let end = keys::prefix_end(&k).unwrap_or_else(|| vec![0xFF; 40]);
            (k, end)
        }),
        (keyed_key(), small_key()).prop_map(|(k, more)| {
            let mut to = k.clone();
            to.extend_from_slice(&more);
            (k, to)
        }),
        (0u16..2, -2i64..3, -2i64..3)
            .prop_map(|(op, a, b)| (keys::timers_until(op, a), keys::timers_until(op, b))),
        (keyed_key(), keyed_key()),
    ]
}

fn keyed_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (keyed_key(), any::<Vec<u8>>()).prop_map(|(k, v)| Op::Put(k, v)),
        keyed_key().prop_map(Op::Delete),
        keyed_key().prop_map(Op::Get),
        (keyed_range(), 0usize..6).prop_map(|((a, b), n)| Op::Scan(a, b, n)),
    ]
}

fn check(backend: &mut dyn StateBackend, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for op in ops {
        match op {
            Op::Put(k, v) => {
                backend.put(k, v).unwrap();
                model.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                backend.delete(k).unwrap();
                model.remove(k);
            }
            Op::Get(k) => prop_assert_eq!(backend.get(k).unwrap(), model.get(k).cloned()),
            Op::Scan(from, to, limit) => {
                let mut got = Vec::new();
                backend
                    .scan(from, to, &mut |k, v| {
                        got.push((k.to_vec(), v.to_vec()));
                        got.len() < *limit
                    })
                    .unwrap();
                let expected: Vec<_> = if from < to {
                    model
                        .range(from.clone()..to.clone())
                        .take((*limit).max(1))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                } else {
                    Vec::new()
                };
                prop_assert_eq!(got, expected);
            }
        }
    }
    Ok(())
}

proptest! {
    #[test]
    fn memory_backend_is_an_ordered_map(ops in proptest::collection::vec(op(), 0..60)) {
        check(&mut MemoryBackend::default(), &ops)?;
    }

    #[test]
    fn memory_backend_is_an_ordered_map_for_operator_layouts(ops in proptest::collection::vec(keyed_op(), 0..80)) {
        check(&mut MemoryBackend::default(), &ops)?;
    }
}

#[cfg(feature = "rocksdb")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn rocksdb_backend_is_an_ordered_map(ops in proptest::collection::vec(op(), 0..60)) {
        let dir = tempfile::tempdir().unwrap();
        let mut db = RocksBackend::open_fresh(&dir.path().join("db")).unwrap();
        check(&mut db, &ops)?;
    }
}
