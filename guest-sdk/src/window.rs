//! Window functions: a function of all of a window's records
//! (`#[operator(window)]`), or an incremental aggregate the host keeps per
//! (key, window) (`#[operator(aggregate)]` on an `impl Aggregate`).

use crate::batch::{MALFORMED, POOL, write_records};
use crate::{Emit, Error, Record, Result};
use mailer_wire::{Reader, Writer};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// A window of event (or processing) time: the records with
/// `start <= timestamp < end`, ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// First millisecond.
    pub start: i64,
    /// One past the last millisecond.
    pub end: i64,
}

impl Window {
    /// The window's last millisecond: the event time of its results.
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }
}

/// The signature of a window function: the key, the window, its records in
/// arrival order, and where its results go (emitted at the window's last
/// millisecond).
pub type WindowFn = fn(Option<&[u8]>, Window, Vec<Record>, &mut Emit) -> Result<()>;

/// An incremental window aggregate. The host keeps one per (key, window),
/// stored as JSON: [`Default`] starts it, `add` grows it by one record,
/// `merge` joins two (when session windows merge), `finish` gives the
/// window's result value.
///
/// ```
/// use mailer_sdk::{operator, Aggregate, Record, Result};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Default, Serialize, Deserialize)]
/// struct CountSum {
///     count: u64,
///     sum: i64,
/// }
///
/// #[operator(aggregate)]
/// impl Aggregate for CountSum {
///     fn add(&mut self, rec: &Record) -> Result<()> {
///         self.count += 1;
///         self.sum += rec.value_i64()?;
///         Ok(())
///     }
///     fn merge(&mut self, other: Self) -> Result<()> {
///         self.count += other.count;
///         self.sum += other.sum;
///         Ok(())
///     }
///     fn finish(self) -> Result<Vec<u8>> {
///         Ok(format!("{} {}", self.count, self.sum).into_bytes())
///     }
/// }
/// ```
pub trait Aggregate: Default + Serialize + DeserializeOwned {
    /// Adds one record.
    fn add(&mut self, rec: &Record) -> Result<()>;
    /// Takes in another accumulator of the same key (its records came
    /// later).
    fn merge(&mut self, other: Self) -> Result<()>;
    /// The window's result value.
    fn finish(self) -> Result<Vec<u8>>;
}

fn decode<A: DeserializeOwned>(b: &[u8]) -> Result<A> {
    serde_json::from_slice(b).map_err(|e| Error::new(format!("the accumulator does not decode: {e}")))
}

fn encode<A: Serialize>(a: &A) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(a)?)
}

/// The `create` export.
pub fn aggregate_create<A: Aggregate>() -> Vec<u8> {
    encode(&A::default()).expect("a default accumulator serialises")
}

/// The `add` export.
pub fn aggregate_add<A: Aggregate>(acc: &[u8], rec: Record) -> Result<Vec<u8>> {
    let mut a: A = decode(acc)?;
    a.add(&rec)?;
    encode(&a)
}

/// The `merge` export.
pub fn aggregate_merge<A: Aggregate>(a: &[u8], b: &[u8]) -> Result<Vec<u8>> {
    let mut a: A = decode(a)?;
    a.merge(decode(b)?)?;
    encode(&a)
}

/// The `finish` export.
pub fn aggregate_finish<A: Aggregate>(acc: &[u8]) -> Result<Vec<u8>> {
    decode::<A>(acc)?.finish()
}

/// The `finish-batch` export: per window its accumulator in; per window its
/// result value, or why it failed, out.
pub fn aggregate_finish_batch<A: Aggregate>(input: &[u8]) -> Vec<u8> {
    let mut r = Reader::new(input);
    let n = r.count().expect(MALFORMED);
    let mut w = Writer::with_capacity(n, 16 * n);
    for _ in 0..n {
        match aggregate_finish::<A>(r.bytes().expect(MALFORMED)) {
            Ok(value) => {
                w.ok();
                w.bytes(&value);
            }
            Err(e) => w.err(e.message()),
        }
    }
    r.end().expect(MALFORMED);
    w.finish()
}

/// The `add-batch` export: per group (one window of one key) its
/// accumulator (a fresh one for none) and its records in; per group the
/// accumulator with its records added, or the first record's failure, out.
pub fn aggregate_add_batch<A: Aggregate>(input: &[u8]) -> Vec<u8> {
    POOL.with_borrow_mut(|pool| {
        let mut r = Reader::new(input);
        let n = r.count().expect(MALFORMED);
        let mut w = Writer::with_capacity(n, 16 * n);
        // Each group's accumulator is encoded here, one buffer for all.
        let mut encoded = Vec::with_capacity(64);
        for _ in 0..n {
            let mut acc = match r.option().expect(MALFORMED) {
                Some(bytes) => decode::<A>(bytes),
                None => Ok(A::default()),
            };
            for _ in 0..r.count().expect(MALFORMED) {
                let rec = r.record().expect(MALFORMED);
                if let Ok(a) = &mut acc {
                    let rec = pool.record(rec);
                    if let Err(e) = a.add(&rec) {
                        acc = Err(e);
                    }
                    pool.recycle(rec);
                }
            }
            encoded.clear();
            match acc.and_then(|a| Ok(serde_json::to_writer(&mut encoded, &a)?)) {
                Ok(()) => {
                    w.ok();
                    w.bytes(&encoded);
                }
                Err(e) => w.err(e.message()),
            }
        }
        r.end().expect(MALFORMED);
        w.finish()
    })
}

/// Runs a window function over a batch of windows: per window its key,
/// bounds and records in; one outcome (its records) per window out.
pub fn window_batch(f: WindowFn, input: &[u8]) -> Vec<u8> {
    POOL.with_borrow_mut(|pool| {
        let mut r = Reader::new(input);
        let n = r.count().expect(MALFORMED);
        let mut w = Writer::with_capacity(n, input.len());
        for _ in 0..n {
            let key = r.option().expect(MALFORMED);
            let window = Window {
                start: r.i64().expect(MALFORMED),
                end: r.i64().expect(MALFORMED),
            };
            let count = r.count().expect(MALFORMED);
            let records = (0..count)
                .map(|_| pool.record(r.record().expect(MALFORMED)))
                .collect();
            let mut out = Emit::at(window.max_timestamp());
            let result = f(key, window, records, &mut out).map(|()| out.into_records());
            write_records(result, &mut w, pool);
        }
        r.end().expect(MALFORMED);
        w.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pages(key: Option<&[u8]>, w: Window, records: Vec<Record>, out: &mut Emit) -> Result<()> {
        let values: Vec<String> = records
            .iter()
            .map(|r| r.value_str().unwrap().to_owned())
            .collect();
        out.emit(key, format!("{}..{} {}", w.start, w.end, values.join(",")))
    }

    #[test]
    fn each_window_gets_its_records_and_emits_at_its_end() {
        let mut w = Writer::batch(2);
        for (key, start, values) in [(&b"k"[..], 0, &["a", "b"][..]), (b"j", 10, &["c"])] {
            w.option(Some(key));
            w.i64(start);
            w.i64(start + 10);
            w.u32(values.len());
            for v in values {
                Record::new(*v).write_to(&mut w);
            }
        }
        let out = window_batch(pages, &w.finish());
        let mut r = Reader::new(&out);
        assert_eq!(r.count(), Ok(2));
        for (key, value, ts) in [(&b"k"[..], &b"0..10 a,b"[..], 9), (b"j", b"10..20 c", 19)] {
            assert_eq!(r.outcome(), Ok(Ok(())));
            assert_eq!(r.u32(), Ok(1));
            let rec = r.record().unwrap();
            assert_eq!((rec.key, rec.value, rec.timestamp), (Some(key), value, ts));
        }
        assert_eq!(r.end(), Ok(()));
    }
    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Sum {
        count: u64,
        sum: i64,
    }

    impl Aggregate for Sum {
        fn add(&mut self, rec: &Record) -> Result<()> {
            self.count += 1;
            self.sum += rec.value_i64()?;
            Ok(())
        }
        fn merge(&mut self, other: Self) -> Result<()> {
            self.count += other.count;
            self.sum += other.sum;
            Ok(())
        }
        fn finish(self) -> Result<Vec<u8>> {
            Ok(self.sum.to_string().into_bytes())
        }
    }

    #[test]
    fn add_batch_folds_each_group_from_its_accumulator_and_reports_a_failed_group() {
        let groups: [(Option<Sum>, &[&str]); 3] = [
            (None, &["1", "2"]),
            (Some(Sum { count: 1, sum: 5 }), &["x", "3"]),
            (Some(Sum { count: 2, sum: 7 }), &[]),
        ];
        let mut w = Writer::batch(groups.len());
        for (acc, values) in &groups {
            let acc = acc.as_ref().map(|a| encode(a).unwrap());
            w.option(acc.as_deref());
            w.u32(values.len());
            for v in *values {
                Record::new(*v).write_to(&mut w);
            }
        }
        let out = aggregate_add_batch::<Sum>(&w.finish());
        let mut r = Reader::new(&out);
        assert_eq!(r.count(), Ok(3));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(
            decode::<Sum>(r.bytes().unwrap()).unwrap(),
            Sum { count: 2, sum: 3 }
        );
        assert!(
            matches!(r.outcome(), Ok(Err(m)) if m.contains("x")),
            "the group with `x` fails"
        );
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(
            decode::<Sum>(r.bytes().unwrap()).unwrap(),
            Sum { count: 2, sum: 7 }
        );
        assert_eq!(r.end(), Ok(()));
    }

    #[test]
    fn finish_batch_finishes_each_window_and_reports_one_that_does_not_decode() {
        let mut w = Writer::batch(3);
        w.bytes(&encode(&Sum { count: 2, sum: 9 }).unwrap());
        w.bytes(b"not json");
        w.bytes(&encode(&Sum { count: 1, sum: -4 }).unwrap());
        let out = aggregate_finish_batch::<Sum>(&w.finish());
        let mut r = Reader::new(&out);
        assert_eq!(r.count(), Ok(3));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.bytes(), Ok(&b"9"[..]));
        assert!(matches!(r.outcome(), Ok(Err(m)) if m.contains("does not decode")));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.bytes(), Ok(&b"-4"[..]));
        assert_eq!(r.end(), Ok(()));
    }
}
