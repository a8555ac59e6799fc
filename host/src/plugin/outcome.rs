//! What a plugin returned for a batch: each record's outcome, checked whole
//! before any is used (a malformed output changes nothing), as spans of the
//! returned buffer.

use super::World;
use crate::batch::{EncodedRecords, Span, decode_at};
use crate::record::Record;
use bytes::Bytes;
use mailer_wire::{Reader, WireError};

/// What a plugin made of one record, owned (the per-record path).
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

/// One record's outcome in a batch output, as spans of the buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Raw {
    /// Map: the output record.
    Record(Span),
    /// Filter: keep or drop.
    Keep(bool),
    /// Flat-map: `count` output records from index `first` of the nested spans.
    Records { first: u32, count: u32 },
    /// Reduce: the new accumulator's bytes.
    Accumulator(Span),
    /// The record failed; the message's bytes.
    Failed(Span),
}

/// The checked outcomes of one batch call.
#[derive(Debug)]
pub struct Outcomes {
    buf: Bytes,
    items: Vec<Raw>,
    nested: Vec<Span>,
}

fn span(start: usize, end: usize) -> Span {
    (start as u32, end as u32)
}

/// Why a plugin's output was refused.
#[derive(Debug, thiserror::Error)]
pub enum OutcomeError {
    /// It is not the encoding of the world's outcomes.
    #[error("plugin returned a malformed batch: {0}")]
    Malformed(#[from] WireError),
    /// One input record turned into too many.
    #[error(
        "plugin emitted {count} records from one input record or timer, more than max_outputs_per_record ({max})"
    )]
    TooManyOutputs {
        /// Records emitted.
        count: usize,
        /// The operator's limit.
        max: u32,
    },
}

impl Outcomes {
    /// Checks that `output` holds exactly `expected` well-formed outcomes of
    /// `world`, none with more than `max_outputs` records, and notes where
    /// each lies.
    pub fn parse(
        world: World,
        output: Vec<u8>,
        expected: usize,
        max_outputs: u32,
    ) -> Result<Self, OutcomeError> {
        let buf = Bytes::from(output);
        let mut r = Reader::new(&buf);
        let n = r.count()?;
        if n != expected {
            return Err(WireError::Truncated { offset: 0 }.into());
        }
        let mut items = Vec::with_capacity(n);
        let mut nested = Vec::new();
        for _ in 0..n {
            let at = r.offset();
            let raw = match r.outcome()? {
                Err(message) => {
                    let end = r.offset();
                    Raw::Failed(span(end - message.len(), end))
                }
                Ok(()) => match world {
                    World::Map => {
                        let start = r.offset();
                        r.record()?;
                        Raw::Record(span(start, r.offset()))
                    }
                    World::Filter => Raw::Keep(r.u8()? != 0),
                    World::FlatMap | World::Process | World::Window | World::Join | World::CoProcess => {
                        let count = r.count()?;
                        if count > max_outputs as usize {
                            return Err(OutcomeError::TooManyOutputs {
                                count,
                                max: max_outputs,
                            });
                        }
                        let first = nested.len() as u32;
                        for _ in 0..count {
                            let start = r.offset();
                            r.record()?;
                            nested.push(span(start, r.offset()));
                        }
                        Raw::Records {
                            first,
                            count: count as u32,
                        }
                    }
                    World::Reduce | World::Aggregate => {
                        let acc = r.bytes()?;
                        let end = r.offset();
                        Raw::Accumulator(span(end - acc.len(), end))
                    }
                },
            };
            debug_assert!(r.offset() > at);
            items.push(raw);
        }
        r.end()?;
        Ok(Self { buf, items, nested })
    }

    /// Each record's outcome, in input order.
    pub fn items(&self) -> &[Raw] {
        &self.items
    }

    /// The text of a failure message (checked UTF-8 when parsed).
    pub fn message(&self, (start, end): Span) -> String {
        String::from_utf8_lossy(&self.buf[start as usize..end as usize]).into_owned()
    }

    /// Bytes of the buffer, shared (no copy).
    pub fn bytes(&self, (start, end): Span) -> Bytes {
        self.buf.slice(start as usize..end as usize)
    }

    /// The spans of a flat-map outcome's records.
    pub fn nested(&self, first: u32, count: u32) -> &[Span] {
        &self.nested[first as usize..(first + count) as usize]
    }

    /// Records at these spans, still encoded, sharing the buffer.
    pub fn encoded(&self, spans: Vec<Span>) -> EncodedRecords {
        EncodedRecords::new(self.buf.clone(), spans)
    }

    /// Whether record `i`'s outcome here and record `j`'s in `other` are
    /// the same, compared as encoded (nothing decoded).
    pub fn same(&self, i: usize, other: &Outcomes, j: usize) -> bool {
        let mine = |(s, e): Span| &self.buf[s as usize..e as usize];
        let theirs = |(s, e): Span| &other.buf[s as usize..e as usize];
        match (self.items[i], other.items[j]) {
            (Raw::Record(a), Raw::Record(b))
            | (Raw::Accumulator(a), Raw::Accumulator(b))
            | (Raw::Failed(a), Raw::Failed(b)) => mine(a) == theirs(b),
            (Raw::Keep(a), Raw::Keep(b)) => a == b,
            (Raw::Records { first: f, count: c }, Raw::Records { first: g, count: d }) => {
                c == d
                    && self
                        .nested(f, c)
                        .iter()
                        .zip(other.nested(g, d))
                        .all(|(&a, &b)| mine(a) == theirs(b))
            }
            _ => false,
        }
    }

    /// Whether record `i` failed.
    pub fn failed(&self, i: usize) -> bool {
        matches!(self.items[i], Raw::Failed(_))
    }

    /// The outcome of record `i`, owned.
    pub fn owned(&self, i: usize) -> RecordOutcome {
        match self.items[i] {
            Raw::Failed(m) => Err(self.message(m)),
            Raw::Record((start, _)) => Ok(Outcome::Record(decode_at(&self.buf, start))),
            Raw::Keep(k) => Ok(Outcome::Keep(k)),
            Raw::Records { first, count } => Ok(Outcome::Records(
                self.nested(first, count)
                    .iter()
                    .map(|&(start, _)| decode_at(&self.buf, start))
                    .collect(),
            )),
            Raw::Accumulator(s) => Ok(Outcome::Accumulator(self.bytes(s))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::write_record;
    use mailer_wire::Writer;

    #[test]
    fn map_outputs_are_spans_of_one_buffer() {
        let rec = Record::new(Some(Bytes::from_static(b"k")), "value", 9);
        let mut w = Writer::batch(2);
        w.ok();
        write_record(&mut w, &rec);
        w.err("nope");
        let out = Outcomes::parse(World::Map, w.finish(), 2, u32::MAX).unwrap();
        assert_eq!(out.owned(0), Ok(Outcome::Record(rec)));
        assert_eq!(out.owned(1), Err("nope".into()));
        assert!(matches!(out.items()[0], Raw::Record(_)));
    }

    #[test]
    fn flat_map_outputs_list_their_records() {
        let a = Record::new(None, "a", 1);
        let mut w = Writer::batch(1);
        w.ok();
        w.u32(2);
        write_record(&mut w, &a);
        write_record(&mut w, &a);
        let output = w.finish();
        let out = Outcomes::parse(World::FlatMap, output.clone(), 1, u32::MAX).unwrap();
        assert_eq!(out.owned(0), Ok(Outcome::Records(vec![a.clone(), a])));
        let refused = Outcomes::parse(World::FlatMap, output, 1, 1).err().unwrap();
        assert_eq!(
            refused.to_string(),
            "plugin emitted 2 records from one input record or timer, more than max_outputs_per_record (1)"
        );
    }

    #[test]
    fn a_wrong_outcome_count_is_malformed() {
        let mut w = Writer::batch(1);
        w.ok();
        w.u8(1);
        assert!(Outcomes::parse(World::Filter, w.finish(), 2, u32::MAX).is_err());
    }

    #[test]
    fn garbage_is_malformed_not_a_panic() {
        for garbage in [
            vec![],
            vec![1, 0, 0, 0, 7],
            vec![255; 9],
            vec![1, 0, 0, 0, 0, 9, 0, 0, 0],
        ] {
            assert!(Outcomes::parse(World::FlatMap, garbage, 1, u32::MAX).is_err());
        }
    }

    /// A valid output of `world` for `n` inputs: records, failures, keeps.
    fn valid(world: World, n: usize) -> Vec<u8> {
        let rec = Record::new(Some(Bytes::from_static(b"key")), "value", 7);
        let mut w = Writer::batch(n);
        for i in 0..n {
            if i % 3 == 2 {
                w.err("failed");
                continue;
            }
            w.ok();
            match world {
                World::Map => write_record(&mut w, &rec),
                World::Filter => w.u8(1),
                World::FlatMap | World::Process | World::Window | World::Join | World::CoProcess => {
                    w.u32(2);
                    write_record(&mut w, &rec);
                    write_record(&mut w, &rec);
                }
                World::Reduce | World::Aggregate => w.bytes(b"accumulator"),
            }
        }
        w.finish()
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(5000))]

        /// Whatever a plugin returns is outcomes or an error, never a panic
        /// (nor an allocation its lengths ask for).
        #[test]
        fn any_output_is_outcomes_or_an_error_never_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256),
            world in 0usize..7,
            expected in 0usize..4,
        ) {
            let _ = Outcomes::parse(World::ALL[world], bytes, expected, 1000);
        }

        /// The same for a valid output damaged here and there, and cut.
        #[test]
        fn damaged_output_is_outcomes_or_an_error_never_a_panic(
            world in 0usize..7,
            n in 1usize..6,
            flips in proptest::collection::vec((proptest::prelude::any::<usize>(), proptest::prelude::any::<u8>()), 1..6),
            cut in proptest::prelude::any::<usize>(),
        ) {
            let world = World::ALL[world];
            let mut bytes = valid(world, n);
            let len = bytes.len();
            for (at, value) in flips {
                bytes[at % len] = value;
            }
            bytes.truncate(cut % (len + 1));
            let _ = Outcomes::parse(world, bytes, n, 1000);
        }
    }

    #[test]
    fn valid_outputs_of_every_world_parse() {
        for world in World::ALL {
            let out = Outcomes::parse(world, valid(world, 5), 5, 1000).unwrap();
            assert_eq!(out.items().len(), 5);
        }
    }
}
