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
        headers: r
            .headers
            .into_iter()
            .map(|(n, v)| (n.to_owned(), buf.slice_ref(v)))
            .collect(),
    }
}

/// Decodes a batch output of `world` that must hold `expected` outcomes.
pub fn decode_outcomes(
    world: World,
    output: Vec<u8>,
    expected: usize,
) -> Result<Vec<RecordOutcome>, WireError> {
    let buf = Bytes::from(output);
    let mut r = Reader::new(&buf);
    let count_at = r.offset();
    let n = r.count()?;
    if n != expected {
        return Err(WireError::Truncated { offset: count_at });
    }
    let mut outcomes = Vec::with_capacity(n);
    for _ in 0..n {
        outcomes.push(match r.outcome()? {
            Err(message) => Err(message.to_owned()),
            Ok(()) => Ok(match world {
                World::Map => Outcome::Record(to_record(&buf, r.record()?)),
                World::Filter => Outcome::Keep(r.u8()? != 0),
                World::FlatMap => {
                    let count = r.count()?;
                    let mut out = Vec::with_capacity(count.min(buf.len() / 17));
                    for _ in 0..count {
                        out.push(to_record(&buf, r.record()?));
                    }
                    Outcome::Records(out)
                }
                World::Reduce => Outcome::Accumulator(buf.slice_ref(r.bytes()?)),
            }),
        });
    }
    r.end()?;
    Ok(outcomes)
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
        let out = decode_outcomes(World::Map, w.finish(), 2).unwrap();
        assert_eq!(out, vec![Ok(Outcome::Record(rec)), Err("nope".into())]);
    }

    #[test]
    fn a_wrong_outcome_count_is_malformed() {
        let mut w = Writer::batch(1);
        w.ok();
        w.u8(1);
        assert!(decode_outcomes(World::Filter, w.finish(), 2).is_err());
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for garbage in [vec![], vec![1, 0, 0, 0, 7], vec![255; 9]] {
            assert!(decode_outcomes(World::FlatMap, garbage, 1).is_err());
        }
    }
}
