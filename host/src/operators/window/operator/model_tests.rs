//! The window operator against a brute-force model: random out-of-order
//! streams of several keys with random watermarks, through tumbling,
//! sliding and session windows, with and without allowed lateness. After
//! every input event, the results emitted (as a multiset) and the late
//! records must equal the model's.

use super::*;
use crate::failure::FailurePolicy;
use crate::state::MemoryBackend;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

#[derive(Debug, Clone)]
enum Event {
    Record { key: u8, ts: i64, value: i64 },
    Watermark(i64),
}

/// (key, start, end, count, sum) of one emitted result.
type Emission = (String, i64, i64, u64, i64);

fn events() -> impl Strategy<Value = Vec<Event>> {
    let event = prop_oneof![
        4 => (0u8..3, 0i64..120, -20i64..20).prop_map(|(key, ts, value)| Event::Record { key, ts, value }),
        1 => (0i64..25).prop_map(Event::Watermark),
    ];
    proptest::collection::vec(event, 0..80).prop_map(|mut evs| {
        // Watermark events carry increments; make them a rising sequence.
        let mut wm = -10;
        for e in &mut evs {
            if let Event::Watermark(step) = e {
                wm += *step;
                *e = Event::Watermark(wm);
            }
        }
        evs
    })
}

fn operator(spec: WindowSpec) -> WindowOperator {
    operator_failing_to(
        spec,
        FailureHandler::new("w", FailurePolicy::Fail, None, Default::default()),
    )
}

/// An operator over a memory backend whose failed records go to `failure`.
fn operator_failing_to(spec: WindowSpec, failure: FailureHandler) -> WindowOperator {
    WindowOperator::new(
        "w",
        spec,
        KeyedState::new(Box::new(MemoryBackend::default()), 1, 128),
        LateRecords::dropped(),
        failure,
    )
}

fn parse(out: Vec<Record>) -> Vec<Emission> {
    let mut v: Vec<Emission> = out
        .into_iter()
        .map(|r| {
            let d: serde_json::Value = serde_json::from_slice(&r.value).unwrap();
            assert_eq!(r.timestamp, d["end"].as_i64().unwrap() - 1);
            (
                d["key"].as_str().unwrap().to_owned(),
                d["start"].as_i64().unwrap(),
                d["end"].as_i64().unwrap(),
                d["count"].as_u64().unwrap(),
                d["sum"].as_i64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The brute-force model of fixed (tumbling, sliding) windows.
struct FixedModel {
    assigner: Assigner,
    lateness: i64,
    watermark: i64,
    /// (key, window) -> (count, sum) of the accepted records.
    windows: BTreeMap<(String, Window), (u64, i64)>,
    late: u64,
}

impl FixedModel {
    fn record(&mut self, key: String, ts: i64, value: i64) -> Vec<Emission> {
        let mut out = Vec::new();
        let mut accepted = false;
        for w in self.assigner.assign(ts) {
            if w.end - 1 + self.lateness <= self.watermark {
                continue;
            }
            accepted = true;
            let e = self.windows.entry((key.clone(), w)).or_default();
            e.0 += 1;
            e.1 += value;
            if w.end - 1 <= self.watermark {
                out.push((key.clone(), w.start, w.end, e.0, e.1));
            }
        }
        if !accepted {
            self.late += 1;
        }
        out
    }

    fn watermark(&mut self, wm: i64) -> Vec<Emission> {
        let old = self.watermark;
        if wm <= old {
            return Vec::new();
        }
        self.watermark = wm;
        let out = self
            .windows
            .iter()
            .filter(|((_, w), _)| old < w.end - 1 && w.end - 1 <= wm)
            .map(|((k, w), (c, s))| (k.clone(), w.start, w.end, *c, *s))
            .collect();
        let lateness = self.lateness;
        self.windows.retain(|(_, w), _| w.end - 1 + lateness > wm);
        out
    }
}

/// A session of the model: its window, count, sum and member records.
type ModelSession = (Window, u64, i64, Vec<(i64, i64)>);

/// The brute-force model of session windows (no lateness): each key's live
/// records, grouped into sessions afresh from scratch whenever needed.
struct SessionModel {
    gap: i64,
    watermark: i64,
    live: BTreeMap<String, Vec<(i64, i64)>>,
    late: u64,
}

impl SessionModel {
    /// Sessions of `records`: sorted by time, a record within `gap` of the
    /// previous one's window (touching included) joins its session.
    fn sessions(&self, records: &[(i64, i64)]) -> Vec<ModelSession> {
        let mut sorted = records.to_vec();
        sorted.sort();
        let mut out: Vec<ModelSession> = Vec::new();
        for (ts, v) in sorted {
            match out.last_mut() {
                Some((w, c, s, members)) if ts <= w.end => {
                    w.end = w.end.max(ts + self.gap);
                    *c += 1;
                    *s += v;
                    members.push((ts, v));
                }
                _ => out.push((
                    Window {
                        start: ts,
                        end: ts + self.gap,
                    },
                    1,
                    v,
                    vec![(ts, v)],
                )),
            }
        }
        out
    }

    fn record(&mut self, key: String, ts: i64, value: i64) -> Vec<Emission> {
        let mut with = self.live.get(&key).cloned().unwrap_or_default();
        with.push((ts, value));
        let mine = self
            .sessions(&with)
            .into_iter()
            .find(|(_, _, _, m)| m.contains(&(ts, value)))
            .unwrap();
        if mine.0.end - 1 <= self.watermark {
            self.late += 1;
            return Vec::new();
        }
        self.live.insert(key, with);
        Vec::new()
    }

    fn watermark(&mut self, wm: i64) -> Vec<Emission> {
        if wm <= self.watermark {
            return Vec::new();
        }
        self.watermark = wm;
        let mut out = Vec::new();
        let keys: Vec<String> = self.live.keys().cloned().collect();
        for key in keys {
            let mut keep = Vec::new();
            for (w, c, s, members) in self.sessions(&self.live[&key]) {
                if w.end - 1 <= wm {
                    out.push((key.clone(), w.start, w.end, c, s));
                } else {
                    keep.extend(members);
                }
            }
            self.live.insert(key, keep);
        }
        out
    }
}

fn record(key: u8, ts: i64, value: i64) -> Record {
    Record::new(Some(bytes::Bytes::from(format!("k{key}"))), value.to_string(), ts)
}

fn run_fixed(assigner: Assigner, lateness: i64, evs: &[Event]) -> Result<(), TestCaseError> {
    let spec = WindowSpec {
        assigner,
        allowed_lateness: lateness,
        aggregates: vec![AggregateKind::Count, AggregateKind::Sum],
        field: None,
        processing_time: false,
    };
    let mut op = operator(spec);
    let mut model = FixedModel {
        assigner,
        lateness,
        watermark: i64::MIN,
        windows: BTreeMap::new(),
        late: 0,
    };
    // The records between two watermarks go in as one batch (so the
    // operator groups them by window), the model's emissions for them
    // together.
    let mut batch = Vec::new();
    let mut expected_for_batch = Vec::new();
    for e in evs.iter().cloned().chain([Event::Watermark(i64::MAX)]) {
        if let Event::Record { key, ts, value } = e {
            batch.push(record(key, ts, value));
            expected_for_batch.extend(model.record(format!("k{key}"), ts, value));
            continue;
        }
        if !batch.is_empty() {
            let out = op.process(Batch::Records(std::mem::take(&mut batch))).unwrap();
            let mut expected = std::mem::take(&mut expected_for_batch);
            expected.sort();
            prop_assert_eq!(parse(out.into_records()), expected, "the batch before {:?}", e);
        }
        let Event::Watermark(wm) = e else {
            unreachable!("records went into the batch")
        };
        let mut out = Vec::new();
        if wm == i64::MAX {
            op.on_end(&mut out).unwrap();
        } else {
            op.on_watermark(wm, &mut out).unwrap();
        }
        let mut expected = model.watermark(wm);
        expected.sort();
        prop_assert_eq!(parse(out), expected, "after {:?}", e);
    }
    prop_assert_eq!(op.late.count(), model.late);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn tumbling_windows_match_the_model(size in 1i64..40, lateness in prop_oneof![Just(0i64), 1i64..30], evs in events()) {
        run_fixed(Assigner::Tumbling { size }, lateness, &evs)?;
    }

    #[test]
    fn sliding_windows_match_the_model(slide in 1i64..15, k in 1i64..4, lateness in prop_oneof![Just(0i64), 1i64..30], evs in events()) {
        run_fixed(Assigner::Sliding { size: slide * k, slide }, lateness, &evs)?;
    }

    #[test]
    fn session_windows_match_the_model(gap in 1i64..20, evs in events()) {
        let spec = WindowSpec {
            assigner: Assigner::Session { gap },
            allowed_lateness: 0,
            aggregates: vec![AggregateKind::Count, AggregateKind::Sum],
            field: None,
            processing_time: false,
        };
        let mut op = operator(spec);
        let mut model = SessionModel { gap, watermark: i64::MIN, live: BTreeMap::new(), late: 0 };
        for e in evs.iter().cloned().chain([Event::Watermark(i64::MAX - gap)]) {
            let (got, mut expected) = match e {
                Event::Record { key, ts, value } => {
                    let out = op.process(Batch::Records(vec![record(key, ts, value)])).unwrap();
                    (parse(out.into_records()), model.record(format!("k{key}"), ts, value))
                }
                Event::Watermark(wm) => {
                    let mut out = Vec::new();
                    op.on_watermark(wm, &mut out).unwrap();
                    (parse(out), model.watermark(wm))
                }
            };
            expected.sort();
            prop_assert_eq!(got, expected, "after {:?}", e);
        }
        prop_assert_eq!(op.late.count(), model.late);
    }
}

/// Processing time: records go to the window of the clock when handled, and
/// windows fire on processing-time ticks, not on watermarks.
#[test]
fn processing_time_windows_follow_the_clock_and_its_ticks() {
    use std::sync::atomic::AtomicI64;
    let spec = WindowSpec {
        assigner: Assigner::Tumbling { size: 100 },
        allowed_lateness: 0,
        aggregates: vec![AggregateKind::Count, AggregateKind::Sum],
        field: None,
        processing_time: true,
    };
    let now = Arc::new(AtomicI64::new(1_000));
    let clock = now.clone();
    let mut op = operator(spec).with_clock(Arc::new(move || clock.load(Ordering::Relaxed)));
    // Event times are ignored: both land in [1000, 1100).
    op.process(Batch::Records(vec![record(0, 5, 1), record(0, 999_999, 2)]))
        .unwrap();
    let mut out = Vec::new();
    op.on_watermark(5_000, &mut out).unwrap();
    assert!(out.is_empty(), "watermarks do not fire processing-time windows");
    now.store(1_150, Ordering::Relaxed);
    op.process(Batch::Records(vec![record(0, 7, 4)])).unwrap();
    op.on_processing_time(1_120, &mut out).unwrap();
    assert_eq!(parse(out), vec![("k0".to_owned(), 1_000, 1_100, 2, 3)]);
    let mut out = Vec::new();
    op.on_end(&mut out).unwrap();
    assert_eq!(parse(out), vec![("k0".to_owned(), 1_100, 1_200, 1, 4)]);
}

#[test]
fn a_record_failing_in_a_grouped_batch_fails_once_and_the_others_count() {
    let stats = Arc::new(crate::failure::FailureStats::default());
    let failure = FailureHandler::new("w", FailurePolicy::Skip, None, stats.clone());
    let spec = WindowSpec {
        assigner: Assigner::Sliding { size: 20, slide: 10 },
        allowed_lateness: 0,
        aggregates: vec![AggregateKind::Count, AggregateKind::Sum],
        field: None,
        processing_time: false,
    };
    let mut op = operator_failing_to(spec, failure);
    let k = |v: &str, ts| Record::new(Some(bytes::Bytes::from("k")), v.to_owned(), ts);
    let batch = vec![k("1", 15), k("not a number", 16), k("2", 17), k("4", 25)];
    assert!(op.process(Batch::Records(batch)).unwrap().is_empty());
    let mut out = Vec::new();
    op.on_end(&mut out).unwrap();
    let got = parse(out);
    assert_eq!(
        got,
        vec![
            ("k".to_owned(), 0, 20, 2, 3),
            ("k".to_owned(), 10, 30, 3, 7),
            ("k".to_owned(), 20, 40, 1, 4),
        ]
    );
    assert_eq!(
        stats.failures.load(Ordering::Relaxed),
        1,
        "failed once, though in two windows"
    );
}
