//! Operators from Rust closures, for pipelines built in code: one record in
//! and any number out, without state ([`Closure`]), or each key's records
//! folded into an accumulator kept in the state backend ([`Reduce`]).

use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::operators::{NativeFactory, Operator};
use crate::record::Record;
use crate::state::KeyedState;
use std::sync::Arc;

/// What a closure operator does with one record: pushes its outputs.
pub(super) type PerRecord = Arc<dyn Fn(Record, &mut Vec<Record>) + Send + Sync>;

/// Makes a [`Closure`] operator named `name` running `f`, one per worker.
pub(super) fn closure_factory(name: &str, f: PerRecord) -> NativeFactory {
    let name = name.to_owned();
    Arc::new(move |_, _| {
        Ok(Box::new(Closure {
            name: name.clone(),
            f: f.clone(),
        }) as Box<dyn Operator>)
    })
}

/// An operator running a [`PerRecord`] closure on each record, in order.
pub(super) struct Closure {
    pub(super) name: String,
    pub(super) f: PerRecord,
}

impl Operator for Closure {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        for record in input.into_records() {
            (self.f)(record, &mut out);
        }
        Ok(Batch::Records(out))
    }
}

/// How a [`Reduce`] folds one record into its key's accumulator (`None`
/// for the key's first record): the new accumulator.
pub(super) type Fold = Arc<dyn Fn(Option<&[u8]>, &Record) -> Vec<u8> + Send + Sync>;

/// Makes a [`Reduce`] operator named `name` folding with `f`, one per
/// worker, each with its state backend.
pub(super) fn reduce_factory(name: &str, f: Fold) -> NativeFactory {
    let name = name.to_owned();
    Arc::new(move |ctx, _| {
        Ok(Box::new(Reduce {
            state: ctx.open_state(&name)?,
            name: name.clone(),
            f: f.clone(),
        }) as Box<dyn Operator>)
    })
}

/// A keyed reduce by a closure: each record's key's accumulator is read
/// from the state backend, folded with the record, written back and
/// emitted (key and time of the record, the accumulator as its value), as
/// the `reduce` world does.
pub(super) struct Reduce {
    name: String,
    state: KeyedState,
    f: Fold,
}

impl Operator for Reduce {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        let failed = |e| OperatorError::state(&self.name, e);
        for record in input.into_records() {
            let entry = self.state.key_entry(record.key_bytes());
            let accumulator = self.state.get(&entry).map_err(failed)?;
            let next = (self.f)(accumulator.as_deref(), &record);
            self.state.put(&entry, &next).map_err(failed)?;
            out.push(Record::new(record.key, next, record.timestamp));
        }
        Ok(Batch::Records(out))
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        crate::operators::snapshot_state(&self.name, &mut self.state, dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_record_gives_what_the_closure_pushes_in_order() {
        let f: PerRecord = Arc::new(|r: Record, out: &mut Vec<Record>| {
            let n: i64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
            for _ in 0..n {
                out.push(r.clone());
            }
        });
        let mut op = Closure {
            name: "repeat".into(),
            f,
        };
        let input = ["2", "0", "1"].iter().map(|v| Record::new(None, *v, 0)).collect();
        let out = op.process(Batch::Records(input)).unwrap().into_records();
        let values: Vec<&[u8]> = out.iter().map(|r| &r.value[..]).collect();
        assert_eq!(values, [b"2", b"2", b"1"]);
    }

    #[test]
    fn each_keys_accumulator_is_folded_kept_and_emitted() {
        let sum: Fold = Arc::new(|acc: Option<&[u8]>, r: &Record| {
            let before: u64 = acc.map_or(0, |a| std::str::from_utf8(a).unwrap().parse().unwrap());
            let n: u64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
            (before + n).to_string().into_bytes()
        });
        let mut op = Reduce {
            name: "sum".into(),
            state: KeyedState::new(Box::new(crate::state::MemoryBackend::default()), 1, 128),
            f: sum,
        };
        let rec = |k: &'static str, v: &'static str| {
            Record::new(Some(bytes::Bytes::from_static(k.as_bytes())), v, 7)
        };
        let input = vec![rec("a", "1"), rec("b", "10"), rec("a", "2"), rec("a", "3")];
        let out = op.process(Batch::Records(input)).unwrap().into_records();
        let got: Vec<(&[u8], &[u8], i64)> = out
            .iter()
            .map(|r| (r.key_bytes(), &r.value[..], r.timestamp))
            .collect();
        assert_eq!(
            got,
            [
                (&b"a"[..], &b"1"[..], 7),
                (b"b", b"10", 7),
                (b"a", b"3", 7),
                (b"a", b"6", 7)
            ]
        );
    }
}
