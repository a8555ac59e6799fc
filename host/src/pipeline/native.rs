//! Operators from Rust closures, for pipelines built in code: one record in,
//! any number out, no state.

use crate::batch::Batch;
use crate::operator::{Operator, OperatorError};
use crate::plan::NativeFactory;
use crate::record::Record;
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
}
