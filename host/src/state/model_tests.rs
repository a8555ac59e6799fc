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
    /// A checkpoint: the backend is snapshotted and replaced by one restored
    /// from the snapshot (in the tests that restore).
    Restore,
}

/// Makes a backend restored from snapshot number `n` of the one given.
type Restorer<'a> = dyn FnMut(&mut dyn StateBackend, usize) -> Box<dyn StateBackend> + 'a;

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

fn check(backend: impl StateBackend + 'static, ops: &[Op]) -> Result<(), TestCaseError> {
    check_restoring(Box::new(backend), ops, &mut |_, _| {
        unreachable!("no restore here")
    })
}

fn check_restoring(
    mut backend: Box<dyn StateBackend>,
    ops: &[Op],
    restore: &mut Restorer<'_>,
) -> Result<(), TestCaseError> {
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    let mut snapshots = 0;
    for op in ops {
        match op {
            Op::Restore => {
                backend = restore(backend.as_mut(), snapshots);
                snapshots += 1;
            }
            Op::Put(k, v) => {
                backend.put(k, v).unwrap();
                model.insert(k.clone(), v.clone());
            }
            Op::Delete(k) => {
                backend.delete(k).unwrap();
                model.remove(k);
            }
            Op::Get(k) => {
                let mut read = None;
                backend
                    .read_with(k, &mut |v| read = Some(v.map(<[u8]>::to_vec)))
                    .unwrap();
                prop_assert_eq!(read, Some(model.get(k).cloned()));
                prop_assert_eq!(backend.get(k).unwrap(), model.get(k).cloned());
            }
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
        check(MemoryBackend::default(), &ops)?;
    }

    #[test]
    fn memory_backend_is_an_ordered_map_for_operator_layouts(ops in proptest::collection::vec(keyed_op(), 0..80)) {
        check(MemoryBackend::default(), &ops)?;
    }
}

#[cfg(feature = "rocksdb")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn rocksdb_backend_is_an_ordered_map(ops in proptest::collection::vec(op(), 0..60)) {
        let dir = tempfile::tempdir().unwrap();
        let db = RocksBackend::open_fresh(&dir.path().join("db"), super::DEFAULT_BLOCK_CACHE_BYTES).unwrap();
        check(db, &ops)?;
    }
}

/// Operator-shaped ops with checkpoints between them.
fn keyed_op_or_restore() -> impl Strategy<Value = Op> {
    prop_oneof![8 => keyed_op(), 1 => Just(Op::Restore)]
}

proptest! {
    /// A cache over the memory backend, small enough that writes go back
    /// and entries are dropped all the time, restored from its snapshots.
    #[test]
    fn cached_backend_is_an_ordered_map(
        capacity in 0usize..3000,
        ops in proptest::collection::vec(keyed_op_or_restore(), 0..120),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let backend = CachedBackend::new(MemoryBackend::default(), capacity);
        check_restoring(Box::new(backend), &ops, &mut |b, n| {
            let snap = dir.path().join(format!("snap-{n}"));
            b.snapshot(&snap).unwrap();
            let mut fresh = MemoryBackend::default();
            snapshot::read_entries(&snap, &mut |k, v| fresh.put(k, v)).unwrap();
            Box::new(CachedBackend::new(fresh, capacity))
        })?;
    }
}

#[cfg(feature = "rocksdb")]
proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn cached_rocksdb_backend_is_an_ordered_map(
        capacity in 0usize..3000,
        ops in proptest::collection::vec(keyed_op_or_restore(), 0..120),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = RocksBackend::open_fresh(&dir.path().join("db-0"), super::DEFAULT_BLOCK_CACHE_BYTES).unwrap();
        check_restoring(Box::new(CachedBackend::new(db, capacity)), &ops, &mut |b, n| {
            let snap = dir.path().join(format!("snap-{n}"));
            b.snapshot(&snap).unwrap();
            let db = RocksBackend::open_copy(
                &snap,
                &dir.path().join(format!("db-{}", n + 1)),
                super::DEFAULT_BLOCK_CACHE_BYTES,
            )
            .unwrap();
            Box::new(CachedBackend::new(db, capacity))
        })?;
    }
}

proptest! {
    /// The memory backend's byte count is what its entries take.
    #[test]
    fn memory_backend_counts_its_bytes(ops in proptest::collection::vec(keyed_op(), 0..80)) {
        let mut m = MemoryBackend::default();
        for op in &ops {
            match op {
                Op::Put(k, v) => m.put(k, v).unwrap(),
                Op::Delete(k) => m.delete(k).unwrap(),
                _ => {}
            }
        }
        let mut expected = 0;
        m.retain(&mut |k, v| {
            expected += k.len() + v.len() + memory::ENTRY_OVERHEAD;
            true
        });
        prop_assert_eq!(m.bytes(), expected);
        m.retain(&mut |_, _| false);
        prop_assert_eq!((m.bytes(), m.len()), (0, 0));
    }
}
