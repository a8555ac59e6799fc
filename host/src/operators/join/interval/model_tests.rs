//! The interval join against a brute-force model: every pair of records of
//! equal keys in the interval, none of them late, plus the unmatched ones
//! of the outer sides, over out-of-order input with watermarks and late
//! records, on both state backends. The join's state is empty at the end.

use super::*;
use crate::operators::LateRecords;
use crate::operators::join::JoinKind;
use crate::state::KeyedState;
use crate::state::{BackendKind, StateBackend};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Event {
    Record { side: Side, key: u8, time: i64 },
    Watermark(i64),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (any::<bool>(), 0u8..3, 0i64..60).prop_map(|(left, key, time)| Event::Record {
            side: if left { Side::Left } else { Side::Right },
            key,
            time,
        }),
        1 => (0i64..60).prop_map(Event::Watermark),
    ]
}

fn kind() -> impl Strategy<Value = JoinKind> {
    prop_oneof![
        Just(JoinKind::Inner),
        Just(JoinKind::Left),
        Just(JoinKind::Right),
        Just(JoinKind::Full),
    ]
}

/// What the model and the operator emit, comparable: key, value, time.
type Emitted = Vec<(Vec<u8>, String, i64)>;

fn value(id: usize) -> String {
    format!(r#"{{"id":{id}}}"#)
}

/// The brute-force join of the events: what is emitted, and how many
/// records were late.
fn model(spec: IntervalJoinSpec, events: &[Event]) -> (Emitted, u64) {
    let mut watermark = i64::MIN;
    let mut kept: Vec<(Side, u8, i64, usize)> = Vec::new();
    let mut late = 0;
    for (id, e) in events.iter().enumerate() {
        match *e {
            Event::Watermark(w) => watermark = watermark.max(w),
            Event::Record { time, .. } if time <= watermark => late += 1,
            Event::Record { side, key, time } => kept.push((side, key, time, id)),
        }
    }
    let mut out = Vec::new();
    let mut joined = vec![false; kept.len()];
    for (i, l) in kept.iter().enumerate().filter(|(_, r)| r.0 == Side::Left) {
        for (j, r) in kept.iter().enumerate().filter(|(_, r)| r.0 == Side::Right) {
            if l.1 == r.1 && l.2 + spec.lower <= r.2 && r.2 <= l.2 + spec.upper {
                let v = format!(r#"{{"left":{},"right":{}}}"#, value(l.3), value(r.3));
                out.push((vec![l.1], v, l.2.max(r.2)));
                joined[i] = true;
                joined[j] = true;
            }
        }
    }
    for (i, &(side, key, time, id)) in kept.iter().enumerate() {
        if !joined[i] && spec.kind.keeps(side) {
            let v = match side {
                Side::Left => format!(r#"{{"left":{},"right":null}}"#, value(id)),
                Side::Right => format!(r#"{{"left":null,"right":{}}}"#, value(id)),
            };
            out.push((vec![key], v, time));
        }
    }
    out.sort();
    (out, late)
}

/// The operator over `backend` on the same events.
fn run(spec: IntervalJoinSpec, events: &[Event], backend: Box<dyn StateBackend>) -> (Emitted, u64, usize) {
    let mut op = IntervalJoin::new(
        "j",
        spec,
        KeyedState::new(backend, 1, 128),
        LateRecords::dropped(),
    );
    let mut out = Vec::new();
    for (id, e) in events.iter().enumerate() {
        match *e {
            Event::Watermark(w) => op.on_watermark(w, &mut out).unwrap(),
            Event::Record { side, key, time } => {
                let rec = Record::new(Some(Bytes::from(vec![key])), value(id), time);
                let batch = Batch::Records(vec![rec]);
                out.extend(op.process_input(side as usize, batch).unwrap().into_records());
            }
        }
    }
    op.on_end(&mut out).unwrap();
    let mut left_over = 0;
    op.state
        .scan(&[], &[0xFF; 20], &mut |_, _| {
            left_over += 1;
            true
        })
        .unwrap();
    let mut emitted: Emitted = out
        .into_iter()
        .map(|r| {
            let key = r.key_bytes().to_vec();
            (key, String::from_utf8(r.value.to_vec()).unwrap(), r.timestamp)
        })
        .collect();
    emitted.sort();
    (emitted, op.late.count(), left_over)
}

fn spec() -> impl Strategy<Value = IntervalJoinSpec> {
    (-10i64..6, 0i64..15, kind()).prop_map(|(lower, width, kind)| IntervalJoinSpec {
        lower,
        upper: lower + width,
        kind,
    })
}

fn check(
    spec: IntervalJoinSpec,
    events: &[Event],
    backend: Box<dyn StateBackend>,
) -> Result<(), TestCaseError> {
    let (want, want_late) = model(spec, events);
    let (got, late, left_over) = run(spec, events, backend);
    prop_assert_eq!(got, want);
    prop_assert_eq!(late, want_late);
    prop_assert_eq!(left_over, 0, "every kept record and timer is gone at the end");
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn the_interval_join_matches_the_model_in_memory(spec in spec(), events in prop::collection::vec(event(), 0..60)) {
        check(spec, &events, BackendKind::Memory.open("join", 0).unwrap())?;
    }

    #[cfg(feature = "rocksdb")]
    #[test]
    fn the_interval_join_matches_the_model_on_rocksdb(spec in spec(), events in prop::collection::vec(event(), 0..60)) {
        let dir = tempfile::tempdir().unwrap();
        check(spec, &events, BackendKind::rocks(dir.path().to_owned()).open("join", 0).unwrap())?;
    }
}

#[test]
fn a_pair_is_emitted_once_whichever_side_comes_first() {
    let spec = IntervalJoinSpec {
        lower: -2,
        upper: 3,
        kind: JoinKind::Inner,
    };
    let events = [
        Event::Record {
            side: Side::Right,
            key: 1,
            time: 10,
        },
        Event::Record {
            side: Side::Left,
            key: 1,
            time: 8,
        },
        Event::Record {
            side: Side::Left,
            key: 1,
            time: 13,
        },
        Event::Record {
            side: Side::Left,
            key: 2,
            time: 9,
        },
    ];
    let (got, _, _) = run(spec, &events, BackendKind::Memory.open("join", 0).unwrap());
    let values: Vec<&str> = got.iter().map(|(_, v, _)| v.as_str()).collect();
    assert_eq!(values, [r#"{"left":{"id":1},"right":{"id":0}}"#]);
}
