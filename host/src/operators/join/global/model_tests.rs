//! The join with a global table against a brute-force model, on both
//! backends: each stream record joined with the row its join key had when
//! it arrived (the last change before it; deletions and re-inserts), the
//! key taken from a JSON field or the record's own; the row count bound.

use super::*;
use crate::failure::FailurePolicy;
use crate::state::{BackendKind, StateBackend};
use bytes::Bytes;
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Event {
    /// A stream record whose join key is `key` (`None`: the field is
    /// missing, so it fails).
    Stream { key: Option<u8> },
    /// A table change; `None` deletes.
    Table { key: u8, row: Option<u8> },
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => prop::option::weighted(0.9, 0u8..4).prop_map(|key| Event::Stream { key }),
        3 => (0u8..4, prop::option::weighted(0.7, 0u8..5)).prop_map(|(key, row)| Event::Table { key, row }),
    ]
}

fn stream_value(id: usize, key: Option<u8>, by_field: bool) -> String {
    match (by_field, key) {
        (true, Some(k)) => format!(r#"{{"id":{id},"customer":{{"id":"c{k}"}}}}"#),
        (true, None) => format!(r#"{{"id":{id}}}"#),
        (false, _) => format!(r#"{{"id":{id}}}"#),
    }
}

fn table_key(key: u8, by_field: bool) -> Vec<u8> {
    match by_field {
        true => format!("c{key}").into_bytes(),
        false => vec![key],
    }
}

/// What the model emits (the stream value and its row, or `null`), and
/// how many records failed.
fn model(events: &[Event], by_field: bool, keep_unmatched: bool) -> (Vec<String>, u64) {
    let mut rows: HashMap<u8, u8> = HashMap::new();
    let (mut out, mut failed) = (Vec::new(), 0);
    for (id, e) in events.iter().enumerate() {
        match *e {
            Event::Table { key, row: Some(r) } => {
                rows.insert(key, r);
            }
            Event::Table { key, row: None } => {
                rows.remove(&key);
            }
            Event::Stream { key: None } if by_field => failed += 1,
            Event::Stream { key } => {
                let row = key.and_then(|k| rows.get(&k));
                if row.is_some() || keep_unmatched {
                    let table = row.map_or("null".to_owned(), |r| format!(r#"{{"row":{r}}}"#));
                    out.push(format!(
                        r#"{{"stream":{},"table":{table}}}"#,
                        stream_value(id, key, by_field)
                    ));
                }
            }
        }
    }
    (out, failed)
}

fn join(
    spec: GlobalJoinSpec,
    backend: Box<dyn StateBackend>,
    stats: &Arc<crate::failure::FailureStats>,
) -> GlobalJoin {
    let failure = FailureHandler::new("g", FailurePolicy::Skip, None, stats.clone());
    GlobalJoin::new("g", spec, KeyedState::new(backend, 1, 128), failure).unwrap()
}

use std::sync::Arc;

fn run(events: &[Event], spec: GlobalJoinSpec, backend: Box<dyn StateBackend>) -> (Vec<String>, u64) {
    let by_field = spec.key_field.is_some();
    let stats: Arc<crate::failure::FailureStats> = Default::default();
    let mut op = join(spec, backend, &stats);
    let mut out = Vec::new();
    for (id, e) in events.iter().enumerate() {
        let (input, rec) = match *e {
            // Without a key field the record's own key is the join key (a
            // record without one joins the empty key, which has no row).
            Event::Stream { key } => {
                let record_key = match by_field {
                    true => Some(Bytes::from_static(b"ignored")),
                    false => key.map(|k| Bytes::from(vec![k])),
                };
                (
                    0,
                    Record::new(record_key, stream_value(id, key, by_field), id as i64),
                )
            }
            Event::Table { key, row } => {
                let value = row.map_or(String::new(), |r| format!(r#"{{"row":{r}}}"#));
                (
                    1,
                    Record::new(Some(Bytes::from(table_key(key, by_field))), value, 0),
                )
            }
        };
        let produced = op.process_input(input, Batch::Records(vec![rec])).unwrap();
        out.extend(
            produced
                .into_records()
                .into_iter()
                .map(|r| String::from_utf8(r.value.to_vec()).unwrap()),
        );
    }
    (out, stats.failures.load(std::sync::atomic::Ordering::Relaxed))
}

fn spec() -> impl Strategy<Value = GlobalJoinSpec> {
    (any::<bool>(), any::<bool>()).prop_map(|(by_field, keep_unmatched)| GlobalJoinSpec {
        key_field: by_field.then(|| "customer.id".to_owned()),
        keep_unmatched,
        max_rows: 1_000,
    })
}

fn check(
    spec: GlobalJoinSpec,
    events: &[Event],
    backend: Box<dyn StateBackend>,
) -> Result<(), TestCaseError> {
    let want = model(events, spec.key_field.is_some(), spec.keep_unmatched);
    prop_assert_eq!(run(events, spec, backend), want);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_global_join_matches_the_model_in_memory(spec in spec(), events in prop::collection::vec(event(), 0..60)) {
        check(spec, &events, BackendKind::Memory.open("global", 0).unwrap())?;
    }

    #[cfg(feature = "rocksdb")]
    #[test]
    fn the_global_join_matches_the_model_on_rocksdb(spec in spec(), events in prop::collection::vec(event(), 0..60)) {
        let dir = tempfile::tempdir().unwrap();
        check(spec, &events, BackendKind::rocks(dir.path().to_owned()).open("global", 0).unwrap())?;
    }
}

/// Rows up to `max_rows` are taken (replacing and deleting keep the count
/// right); the change adding one more stops the join with the reason; the
/// count survives a snapshot and a restore.
#[test]
fn the_table_holds_at_most_max_rows() {
    let spec = GlobalJoinSpec {
        key_field: None,
        keep_unmatched: false,
        max_rows: 2,
    };
    let stats = Default::default();
    let mut op = join(
        spec.clone(),
        BackendKind::Memory.open("global", 0).unwrap(),
        &stats,
    );
    let change =
        |k: u8, v: &str| Batch::Records(vec![Record::new(Some(Bytes::from(vec![k])), v.to_owned(), 0)]);
    for (k, v) in [(1, "a"), (2, "b"), (1, "c"), (2, ""), (3, "d"), (3, "e")] {
        op.process_input(1, change(k, v)).unwrap();
    }
    let err = op.process_input(1, change(4, "f")).unwrap_err().to_string();
    assert!(err.contains("operator `g` failed on record"), "{err}");
    assert!(
        err.contains("the global table holds `max_rows` (2) rows"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    op.snapshot(&dir.path().join("snap")).unwrap();
    let mut backend = BackendKind::Memory.open("global", 0).unwrap();
    crate::state::snapshot::read_entries(&dir.path().join("snap"), &mut |k, v| backend.put(k, v)).unwrap();
    let mut restored = join(spec, backend, &stats);
    let err = restored.process_input(1, change(5, "g")).unwrap_err().to_string();
    assert!(err.contains("holds `max_rows` (2) rows"), "{err}");
    restored.process_input(1, change(1, "")).unwrap();
    restored.process_input(1, change(5, "g")).unwrap();
}
