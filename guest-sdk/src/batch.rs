//! The batch loops behind each world's batch export: decode the flat batch,
//! call the author's per-record function, encode one outcome per record.
//!
//! The host encodes every batch it sends, so a batch that does not decode is
//! a host bug; the loops then panic, which the host sees as a trap.

use crate::pool::Pool;
use crate::{Record, RecordView, Result};
use mailer_wire::{Reader, RecordRef, Writer};
use std::borrow::Cow;
use std::cell::RefCell;

pub(crate) const MALFORMED: &str = "mailer host sent a malformed batch";

thread_local! {
    pub(crate) static POOL: RefCell<Pool> = RefCell::default();
}

/// Reads each record of the batch where it lies and lets `f` write its
/// outcome into an output of about `bytes_per_record` bytes a record.
fn each_in_place(
    input: &[u8],
    bytes_per_record: impl Fn(usize) -> usize,
    mut f: impl FnMut(RecordRef<'_>, &mut Writer),
) -> Vec<u8> {
    let mut r = Reader::new(input);
    let n = r.count().expect(MALFORMED);
    let mut w = Writer::with_capacity(n, bytes_per_record(n));
    for _ in 0..n {
        f(r.record().expect(MALFORMED), &mut w);
    }
    r.end().expect(MALFORMED);
    w.finish()
}

/// Decodes each record of the batch into a pooled [`Record`] and lets `f`
/// write its outcome; `f` hands the records it is done with back to the pool.
fn each_record(input: &[u8], mut f: impl FnMut(Record, &mut Writer, &mut Pool)) -> Vec<u8> {
    POOL.with_borrow_mut(|pool| each_in_place(input, |n| input.len() + n, |r, w| f(pool.record(r), w, pool)))
}

/// Writes a filter's outcome: whether the record is kept, or the error.
fn write_kept(result: Result<bool>, w: &mut Writer) {
    match result {
        Ok(keep) => {
            w.ok();
            w.u8(u8::from(keep));
        }
        Err(e) => w.err(e.message()),
    }
}

/// Runs a map function over a batch.
pub fn map_batch(f: fn(Record) -> Result<Record>, input: &[u8]) -> Vec<u8> {
    each_record(input, |rec, w, pool| match f(rec) {
        Ok(out) => {
            w.ok();
            out.write_to(w);
            pool.recycle(out);
        }
        Err(e) => w.err(e.message()),
    })
}

/// Runs a filter function over a batch.
pub fn filter_batch(f: fn(&Record) -> Result<bool>, input: &[u8]) -> Vec<u8> {
    each_record(input, |rec, w, pool| {
        write_kept(f(&rec), w);
        pool.recycle(rec);
    })
}

/// Runs a filter function that takes a [`RecordView`] over a batch: each
/// record is read where it lies in the batch, never copied.
pub fn filter_batch_view(f: fn(RecordView<'_>) -> Result<bool>, input: &[u8]) -> Vec<u8> {
    each_in_place(input, |n| 2 * n, |rec, w| write_kept(f(rec.into()), w))
}

/// Writes a flat-map style outcome: the records, or the error.
pub(crate) fn write_records(result: Result<Vec<Record>>, w: &mut Writer, pool: &mut Pool) {
    match result {
        Ok(out) => {
            w.ok();
            w.u32(out.len());
            for o in out {
                o.write_to(w);
                pool.recycle(o);
            }
        }
        Err(e) => w.err(e.message()),
    }
}

/// Runs a flat-map function over a batch.
pub fn flat_map_batch(f: fn(Record) -> Result<Vec<Record>>, input: &[u8]) -> Vec<u8> {
    each_record(input, |rec, w, pool| write_records(f(rec), w, pool))
}

/// Runs a process operator's record function over a batch (the records of
/// one key): one outcome per record, the records it emitted.
pub fn process_batch(f: fn(Record, &mut crate::Emit) -> Result<()>, input: &[u8]) -> Vec<u8> {
    each_record(input, |rec, w, pool| {
        let mut out = crate::Emit::at(rec.timestamp);
        let result = f(rec, &mut out).map(|()| out.into_records());
        write_records(result, w, pool)
    })
}

/// Runs a co-process operator over a batch (the records of one key from
/// one input, whose number comes first): `left` for input 0, `right` for
/// input 1.
pub fn co_process_batch(
    left: fn(Record, &mut crate::Emit) -> Result<()>,
    right: fn(Record, &mut crate::Emit) -> Result<()>,
    input: &[u8],
) -> Vec<u8> {
    let (side, batch) = input.split_first().expect(MALFORMED);
    process_batch(if *side == 0 { left } else { right }, batch)
}

/// The signature of a join function: a pair's left and right records (at
/// most one absent), its output records.
pub type JoinFn = fn(Option<Record>, Option<Record>) -> Result<Vec<Record>>;

/// Runs a join function over a batch of pairs: `count:u32 (side side)*`,
/// each side `0:u8` (absent) or `1:u8 record`.
pub fn join_batch(f: JoinFn, input: &[u8]) -> Vec<u8> {
    POOL.with_borrow_mut(|pool| {
        let mut r = Reader::new(input);
        let n = r.count().expect(MALFORMED);
        let mut w = Writer::with_capacity(n, input.len() + n);
        for _ in 0..n {
            let mut side = || match r.u8().expect(MALFORMED) {
                0 => None,
                _ => Some(pool.record(r.record().expect(MALFORMED))),
            };
            let (left, right) = (side(), side());
            write_records(f(left, right), &mut w, pool);
        }
        r.end().expect(MALFORMED);
        w.finish()
    })
}

/// The signature of a reduce function: the key's accumulator (`None` at
/// first) and a record in, the new accumulator out.
pub type ReduceFn = fn(Option<&[u8]>, Record) -> Result<Vec<u8>>;

/// A reduce function that borrows its record: the SDK reuses the record's
/// buffers from one record to the next.
pub type ReduceByRefFn = fn(Option<&[u8]>, &Record) -> Result<Vec<u8>>;

/// Runs a reduce function over a batch: the batch carries each key's starting
/// accumulator once (a slot); records name their slot, and the running
/// accumulator of a slot is updated record by record.
pub fn reduce_batch(f: ReduceFn, input: &[u8]) -> Vec<u8> {
    reduce_slots(input, |acc, rec| f(acc, Record::from_ref(rec)))
}

/// [`reduce_batch`] for a function that borrows its record: records are
/// decoded into pooled buffers.
pub fn reduce_batch_by_ref(f: ReduceByRefFn, input: &[u8]) -> Vec<u8> {
    POOL.with_borrow_mut(|pool| {
        reduce_slots(input, |acc, rec| {
            let rec = pool.record(rec);
            let result = f(acc, &rec);
            pool.recycle(rec);
            result
        })
    })
}

/// A reduce function that takes a [`RecordView`]: records are read where
/// they lie in the batch, never copied.
pub type ReduceViewFn = fn(Option<&[u8]>, RecordView<'_>) -> Result<Vec<u8>>;

/// [`reduce_batch`] for a function that takes a [`RecordView`].
pub fn reduce_batch_view(f: ReduceViewFn, input: &[u8]) -> Vec<u8> {
    reduce_slots(input, |acc, rec| f(acc, rec.into()))
}

/// The loop of the reduce batch exports.
fn reduce_slots(
    input: &[u8],
    mut f: impl FnMut(Option<&[u8]>, mailer_wire::RecordRef<'_>) -> Result<Vec<u8>>,
) -> Vec<u8> {
    let mut r = Reader::new(input);
    let slot_count = r.count().expect(MALFORMED);
    // A slot's accumulator is read from the input until a record replaces it.
    let mut slots: Vec<Option<Cow<'_, [u8]>>> = Vec::with_capacity(slot_count.min(input.len()));
    for _ in 0..slot_count {
        let acc = match r.u8().expect(MALFORMED) {
            0 => None,
            _ => Some(Cow::Borrowed(r.bytes().expect(MALFORMED))),
        };
        slots.push(acc);
    }
    let n = r.count().expect(MALFORMED);
    let mut w = Writer::with_capacity(n, input.len());
    for _ in 0..n {
        let slot = r.u32().expect(MALFORMED);
        let rec = r.record().expect(MALFORMED);
        let acc = slots.get_mut(slot).expect(MALFORMED);
        match f(acc.as_deref(), rec) {
            Ok(next) => {
                w.ok();
                w.bytes(&next);
                *acc = Some(Cow::Owned(next));
            }
            Err(e) => w.err(e.message()),
        }
    }
    r.end().expect(MALFORMED);
    w.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn batch(values: &[&str]) -> Vec<u8> {
        let mut w = Writer::batch(values.len());
        for v in values {
            Record::new(*v).with_key(*v).write_to(&mut w);
        }
        w.finish()
    }

    fn upper(mut r: Record) -> Result<Record> {
        if r.value.is_empty() {
            return Err(Error::new("empty"));
        }
        r.value.make_ascii_uppercase();
        Ok(r)
    }

    #[test]
    fn map_batch_reports_each_outcome_in_order() {
        let out = map_batch(upper, &batch(&["ab", "", "c"]));
        let mut r = Reader::new(&out);
        assert_eq!(r.count(), Ok(3));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.record().unwrap().value, b"AB");
        assert_eq!(r.outcome(), Ok(Err("empty")));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.record().unwrap().value, b"C");
        assert_eq!(r.end(), Ok(()));
    }

    fn short(r: RecordView<'_>) -> Result<bool> {
        if r.value().is_empty() {
            return Err(Error::new("empty"));
        }
        Ok(r.value().len() < 2)
    }

    #[test]
    fn filter_batch_view_reads_records_in_place_in_order() {
        let out = filter_batch_view(short, &batch(&["ab", "", "c"]));
        let mut r = Reader::new(&out);
        assert_eq!(r.count(), Ok(3));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.u8(), Ok(0));
        assert_eq!(r.outcome(), Ok(Err("empty")));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.end(), Ok(()));
    }

    fn count(acc: Option<&[u8]>, _r: Record) -> Result<Vec<u8>> {
        let n: u64 = match acc {
            Some(a) => std::str::from_utf8(a)?.parse()?,
            None => 0,
        };
        Ok((n + 1).to_string().into_bytes())
    }

    #[test]
    fn reduce_batch_threads_accumulators_per_slot() {
        let mut w = Writer::batch(2);
        w.u8(1);
        w.bytes(b"41");
        w.u8(0);
        w.u32(3);
        for slot in [0, 1, 0] {
            w.u32(slot);
            Record::new("x").write_to(&mut w);
        }
        let out = reduce_batch(count, &w.finish());
        let mut r = Reader::new(&out);
        assert_eq!(r.count(), Ok(3));
        for expected in [&b"42"[..], b"1", b"43"] {
            assert_eq!(r.outcome(), Ok(Ok(())));
            assert_eq!(r.bytes(), Ok(expected));
        }
    }
}
