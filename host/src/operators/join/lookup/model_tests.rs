//! The stream-table join against brute-force models, on both backends:
//! as of `latest`, the row of the last table record before each stream
//! record; as of `event_time`, the row of the newest table record at or
//! before each (non-late) stream record's time, whenever it arrived —
//! with deletions and re-inserts, out-of-order input and late records.

use super::*;
use crate::operators::LateRecords;
use crate::state::KeyedState;
use crate::state::{BackendKind, StateBackend};
use proptest::prelude::*;
use std::collections::HashMap;

#[derive(Debug, Clone)]
enum Event {
    Stream {
        key: u8,
        time: i64,
    },
    /// A table record; `None` deletes. Under `event_time` its time is
    /// moved past the watermark (the model takes table records in time).
    Table {
        key: u8,
        time: i64,
        row: Option<u8>,
    },
    Watermark(i64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (0u8..3, 0i64..50).prop_map(|(key, time)| Event::Stream { key, time }),
        3 => (0u8..3, 0i64..50, prop::option::weighted(0.75, 0u8..5))
            .prop_map(|(key, time, row)| Event::Table { key, time, row }),
        1 => (0i64..50).prop_map(Event::Watermark),
    ]
}

/// `events` with every table record after the watermark it arrives at.
fn in_time(events: &[Event]) -> Vec<Event> {
    let mut watermark = i64::MIN;
    events
        .iter()
        .map(|e| match *e {
            Event::Watermark(w) => {
                watermark = watermark.max(w);
                e.clone()
            }
            Event::Table { key, time, row } => Event::Table {
                key,
                time: time.max(watermark.saturating_add(1)),
                row,
            },
            _ => e.clone(),
        })
        .collect()
}

type Emitted = Vec<(u8, String, i64)>;

fn stream_value(id: usize) -> String {
    format!(r#"{{"id":{id}}}"#)
}

fn row_value(row: u8) -> String {
    format!(r#"{{"row":{row}}}"#)
}

fn joined(id: usize, row: Option<u8>) -> String {
    let table = row.map_or("null".to_owned(), row_value);
    format!(r#"{{"stream":{},"table":{table}}}"#, stream_value(id))
}

/// The brute-force join: what is emitted and how many records were late.
fn model(spec: LookupJoinSpec, events: &[Event]) -> (Emitted, u64) {
    let mut out = Vec::new();
    let mut late = 0;
    match spec.as_of {
        AsOf::Latest => {
            let mut rows: HashMap<u8, u8> = HashMap::new();
            for (id, e) in events.iter().enumerate() {
                match *e {
                    Event::Table {
                        key, row: Some(r), ..
                    } => {
                        rows.insert(key, r);
                    }
                    Event::Table { key, row: None, .. } => {
                        rows.remove(&key);
                    }
                    Event::Stream { key, time } => out.push((key, rows.get(&key).copied(), id, time)),
                    Event::Watermark(_) => {}
                }
            }
        }
        AsOf::EventTime => {
            let mut watermark = i64::MIN;
            for (id, e) in events.iter().enumerate() {
                match *e {
                    Event::Watermark(w) => watermark = watermark.max(w),
                    Event::Stream { time, .. } if time <= watermark => late += 1,
                    Event::Stream { key, time } => {
                        // The newest table record at or before `time`; of
                        // equal times, the last to arrive.
                        let row = events
                            .iter()
                            .filter_map(|t| match *t {
                                Event::Table {
                                    key: k,
                                    time: tt,
                                    row,
                                } if k == key && tt <= time => Some((tt, row)),
                                _ => None,
                            })
                            .fold(None, |best: Option<(i64, Option<u8>)>, (tt, row)| match best {
                                Some((bt, _)) if bt > tt => best,
                                _ => Some((tt, row)),
                            })
                            .and_then(|(_, row)| row);
                        out.push((key, row, id, time));
                    }
                    Event::Table { .. } => {}
                }
            }
        }
    }
    let mut emitted: Emitted = out
        .into_iter()
        .filter(|(_, row, _, _)| row.is_some() || spec.keep_unmatched)
        .map(|(key, row, id, time)| (key, joined(id, row), time))
        .collect();
    emitted.sort();
    (emitted, late)
}

fn run(spec: LookupJoinSpec, events: &[Event], backend: Box<dyn StateBackend>) -> (Emitted, u64) {
    let mut op = LookupJoin::new(
        "l",
        spec,
        KeyedState::new(backend, 1, 128),
        LateRecords::dropped(),
    );
    let mut out = feed(&mut op, events);
    op.on_end(&mut out).unwrap();
    let mut emitted: Emitted = out
        .into_iter()
        .map(|r| {
            (
                r.key_bytes()[0],
                String::from_utf8(r.value.to_vec()).unwrap(),
                r.timestamp,
            )
        })
        .collect();
    emitted.sort();
    (emitted, op.late.count())
}

/// Runs `events` through `op`; what it emitted.
fn feed(op: &mut LookupJoin, events: &[Event]) -> Vec<Record> {
    let mut out = Vec::new();
    for (id, e) in events.iter().enumerate() {
        let (input, rec) = match *e {
            Event::Watermark(w) => {
                op.on_watermark(w, &mut out).unwrap();
                continue;
            }
            Event::Stream { key, time } => (
                0,
                Record::new(Some(Bytes::from(vec![key])), stream_value(id), time),
            ),
            Event::Table { key, time, row } => {
                let value = row.map_or(String::new(), row_value);
                (1, Record::new(Some(Bytes::from(vec![key])), value, time))
            }
        };
        let batch = Batch::Records(vec![rec]);
        out.extend(op.process_input(input, batch).unwrap().into_records());
    }
    out
}

/// After `events` (as of `latest`), a state query shows each key's row as
/// the last table record left it: its row, or no state once deleted or
/// never given one.
fn check_queried_rows(events: &[Event]) -> Result<(), TestCaseError> {
    let spec = LookupJoinSpec {
        as_of: AsOf::Latest,
        keep_unmatched: true,
    };
    let state = KeyedState::new(BackendKind::Memory.open("lookup", 0).unwrap(), 1, 128);
    let mut op = LookupJoin::new("l", spec, state, LateRecords::dropped());
    feed(&mut op, events);
    let mut rows: HashMap<u8, u8> = HashMap::new();
    for e in events {
        match *e {
            Event::Table {
                key, row: Some(r), ..
            } => {
                rows.insert(key, r);
            }
            Event::Table { key, row: None, .. } => {
                rows.remove(&key);
            }
            _ => {}
        }
    }
    for key in 0u8..3 {
        let answer = op.query_state(&StateRequest::Key(vec![key])).unwrap().unwrap();
        let shown = answer.first().map(|(_, state)| state["row"].clone());
        let want = rows.get(&key).map(|&r| Value::String(row_value(r)));
        prop_assert_eq!(shown, want, "key {}", key);
    }
    Ok(())
}

fn spec() -> impl Strategy<Value = LookupJoinSpec> {
    (any::<bool>(), any::<bool>()).prop_map(|(event_time, keep_unmatched)| LookupJoinSpec {
        as_of: if event_time { AsOf::EventTime } else { AsOf::Latest },
        keep_unmatched,
    })
}

fn check(
    spec: LookupJoinSpec,
    events: &[Event],
    backend: Box<dyn StateBackend>,
) -> Result<(), TestCaseError> {
    let events = match spec.as_of {
        AsOf::EventTime => in_time(events),
        AsOf::Latest => events.to_vec(),
    };
    let (want, want_late) = model(spec, &events);
    let (got, late) = run(spec, &events, backend);
    prop_assert_eq!(got, want);
    prop_assert_eq!(late, want_late);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_lookup_join_matches_the_model_in_memory(spec in spec(), events in prop::collection::vec(event(), 0..60)) {
        check(spec, &events, BackendKind::Memory.open("lookup", 0).unwrap())?;
    }

    #[test]
    fn a_state_query_shows_each_keys_latest_row(events in prop::collection::vec(event(), 0..60)) {
        check_queried_rows(&events)?;
    }

    #[cfg(feature = "rocksdb")]
    #[test]
    fn the_lookup_join_matches_the_model_on_rocksdb(spec in spec(), events in prop::collection::vec(event(), 0..60)) {
        let dir = tempfile::tempdir().unwrap();
        check(spec, &events, BackendKind::rocks(dir.path().to_owned()).open("lookup", 0).unwrap())?;
    }
}

/// A table record whose time passed replaces the version valid at the
/// watermark only when it is newer; a late deletion removes it.
#[test]
fn a_late_table_record_replaces_the_current_version_only_when_newer() {
    let spec = LookupJoinSpec {
        as_of: AsOf::EventTime,
        keep_unmatched: true,
    };
    let events = [
        Event::Table {
            key: 1,
            time: 5,
            row: Some(1),
        },
        Event::Watermark(10),
        Event::Table {
            key: 1,
            time: 3,
            row: Some(2),
        },
        Event::Stream { key: 1, time: 12 },
        Event::Watermark(13),
        Event::Table {
            key: 1,
            time: 7,
            row: Some(3),
        },
        Event::Stream { key: 1, time: 15 },
        Event::Watermark(16),
        Event::Table {
            key: 1,
            time: 8,
            row: None,
        },
        Event::Stream { key: 1, time: 20 },
    ];
    let (got, _) = run(spec, &events, BackendKind::Memory.open("lookup", 0).unwrap());
    let rows: Vec<&str> = got.iter().map(|(_, v, _)| v.as_str()).collect();
    assert_eq!(
        rows,
        [
            r#"{"stream":{"id":3},"table":{"row":1}}"#,
            r#"{"stream":{"id":6},"table":{"row":3}}"#,
            r#"{"stream":{"id":9},"table":null}"#,
        ]
    );
}
