//! The host side of the flat batch encoding: records in, outcomes out.

use super::World;
use crate::record::Record;
use bytes::Bytes;
use mailer_wire::{Reader, RecordRef, WireError, Writer};

/// What a plugin made of one record.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Map: the output record.
    Record(Record),
    /// Filter: whether to keep the input record.
    Keep(bool),
    /// Flat-map: the output records.
    Records(Vec<Record>),
    /// Reduce: the key's new accumulator.
    Accumulator(Bytes),
}

/// One record's outcome: the plugin's result or its error message.
pub type RecordOutcome = Result<Outcome, String>;

/// Appends one host record to a batch.
pub fn write_record(w: &mut Writer, r: &Record) {
    w.record(
        r.key.as_deref(),
        &r.value,
        r.timestamp,
        r.headers.iter().map(|(n, v)| (n.as_str(), v.as_ref())),
    );
}

/// Encodes records as a batch for the stateless worlds.
pub fn encode_records(records: &[Record]) -> Vec<u8> {
    let bytes: usize = records
        .iter()
        .map(|r| 21 + r.value.len() + r.key.as_ref().map_or(0, |k| 4 + k.len()))
        .sum();
    let mut w = Writer::with_capacity(records.len(), bytes);
    for r in records {
        write_record(&mut w, r);
    }
    w.finish()
}

/// Turns a record read from `buf` into a host record whose payloads are
/// slices of `buf` (no copy).
fn to_record(buf: &Bytes, r: RecordRef<'_>) -> Record {
    Record {
        key: r.key.map(|k| buf.slice_ref(k)),
        value: buf.slice_ref(r.value),
        timestamp: r.timestamp,
        headers: if r.headers.is_empty() {
            Vec::new()
        } else {
            r.headers
                .into_iter()
                .map(|(n, v)| (n.to_owned(), buf.slice_ref(v)))
                .collect()
        },
    }
}

/// The outcomes of a batch call, checked whole before the first is used (a
/// malformed output changes nothing), then decoded one by one without an
/// intermediate collection.
pub struct Outcomes {
    world: World,
    buf: Bytes,
    pos: usize,
    remaining: usize,
}

impl Outcomes {
    /// Checks that `output` holds exactly `expected` well-formed outcomes of
    /// `world`.
    pub fn parse(world: World, output: Vec<u8>, expected: usize) -> Result<Self, WireError> {
        let buf = Bytes::from(output);
        let mut r = Reader::new(&buf);
        let n = r.count()?;
        if n != expected {
            return Err(WireError::Truncated { offset: 0 });
        }
        let pos = r.offset();
        for _ in 0..n {
            if r.outcome()?.is_ok() {
                skip_payload(world, &mut r)?;
            }
        }
        r.end()?;
        Ok(Self {
            world,
            buf,
            pos,
            remaining: n,
        })
    }
}

fn skip_payload(world: World, r: &mut Reader<'_>) -> Result<(), WireError> {
    match world {
        World::Map => drop(r.record()?),
        World::Filter => drop(r.u8()?),
        World::FlatMap => {
            for _ in 0..r.count()? {
                r.record()?;
            }
        }
        World::Reduce => drop(r.bytes()?),
    }
    Ok(())
}

impl Iterator for Outcomes {
    type Item = RecordOutcome;

    fn next(&mut self) -> Option<RecordOutcome> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        const CHECKED: &str = "outcomes were checked in Outcomes::parse";
        let buf = &self.buf;
        let mut r = Reader::at(buf, self.pos);
        let outcome = match r.outcome().expect(CHECKED) {
            Err(message) => Err(message.to_owned()),
            Ok(()) => Ok(match self.world {
                World::Map => Outcome::Record(to_record(buf, r.record().expect(CHECKED))),
                World::Filter => Outcome::Keep(r.u8().expect(CHECKED) != 0),
                World::FlatMap => {
                    let count = r.count().expect(CHECKED);
                    let out = (0..count)
                        .map(|_| to_record(buf, r.record().expect(CHECKED)))
                        .collect();
                    Outcome::Records(out)
                }
                World::Reduce => Outcome::Accumulator(buf.slice_ref(r.bytes().expect(CHECKED))),
            }),
        };
        self.pos = r.offset();
        Some(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_outputs_are_sliced_from_one_buffer() {
        let rec = Record::new(Some(Bytes::from_static(b"k")), "value", 9);
        let mut w = Writer::batch(2);
        w.ok();
        write_record(&mut w, &rec);
        w.err("nope");
        let out: Vec<_> = Outcomes::parse(World::Map, w.finish(), 2).unwrap().collect();
        assert_eq!(out, vec![Ok(Outcome::Record(rec)), Err("nope".into())]);
    }

    #[test]
    fn a_wrong_outcome_count_is_malformed() {
        let mut w = Writer::batch(1);
        w.ok();
        w.u8(1);
        assert!(Outcomes::parse(World::Filter, w.finish(), 2).is_err());
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for garbage in [vec![], vec![1, 0, 0, 0, 7], vec![255; 9]] {
            assert!(Outcomes::parse(World::FlatMap, garbage, 1).is_err());
        }
    }
}
