//! Window functions backed by plugins: the `aggregate` world grows an
//! accumulator the plugin defines; the `window` world gets all of a
//! window's records when it fires.

use super::{AccumulatorGroup, DueWindow, Window, WindowFnError, WindowFunction, corrupt, emit_each};
use crate::batch::{Batch, write_record};
use crate::failure::OperatorError;
use crate::operators::wasm::fatal;
use crate::plugin::{AggregateStep, CallError, PluginInstance, World};
use crate::plugin::{Outcomes, Raw};
use crate::record::Record;
use crate::swap::PluginSlot;
use bytes::Bytes;
use mailer_wire::{Reader, Writer};

/// A call's result as a window function step: a failure of the plugin
/// (error, trap, deadline) fails the record or window; only a plugin that
/// cannot be instantiated afresh stops the operator.
fn step<T>(operator: &str, r: Result<Result<T, String>, CallError>) -> Result<T, WindowFnError> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(reason)) => Err(WindowFnError::Input(reason)),
        Err(CallError::Instantiate(e)) => Err(WindowFnError::Fatal(fatal(operator, e))),
        Err(e) => Err(WindowFnError::Input(e.to_string())),
    }
}

/// A window function of the `aggregate` world: the plugin's accumulator per
/// (key, window); the result is one record, the key and the finished value
/// at the window's last millisecond.
pub struct WasmAggregate {
    name: String,
    slot: PluginSlot,
}

impl WasmAggregate {
    /// Operator `name` calling `instance`.
    pub fn new(name: &str, instance: PluginInstance) -> Self {
        Self {
            name: name.to_owned(),
            slot: PluginSlot::new(name, instance),
        }
    }

    fn call(&mut self, s: AggregateStep<'_>) -> Result<Vec<u8>, WindowFnError> {
        step(&self.name, self.slot.instance().call_aggregate(s))
    }
}

impl WindowFunction for WasmAggregate {
    fn plugin_slot(&mut self) -> Option<&mut PluginSlot> {
        Some(&mut self.slot)
    }

    fn add(&mut self, acc: Option<&[u8]>, rec: &Record) -> Result<Vec<u8>, WindowFnError> {
        let fresh;
        let acc = match acc {
            Some(a) => a,
            None => {
                fresh = self.call(AggregateStep::Create)?;
                &fresh
            }
        };
        self.call(AggregateStep::Add(acc, rec))
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, WindowFnError> {
        self.call(AggregateStep::Merge(a, b))
    }

    /// One `add-batch` call for all the groups.
    fn add_groups(
        &mut self,
        groups: &[AccumulatorGroup<'_>],
    ) -> Result<Vec<Result<Vec<u8>, String>>, OperatorError> {
        let bytes: usize = groups
            .iter()
            .map(|g| {
                9 + g.accumulator.map_or(0, <[u8]>::len)
                    + g.records.iter().map(|r| 25 + r.value.len()).sum::<usize>()
            })
            .sum();
        let mut input = Writer::with_capacity(groups.len(), bytes);
        for g in groups {
            input.option(g.accumulator);
            input.u32(g.records.len());
            for rec in g.records {
                write_record(&mut input, rec);
            }
        }
        let outcomes = match self.slot.instance().call_batch(&input.finish()) {
            Ok(output) => {
                Outcomes::parse(World::Aggregate, output, groups.len(), 0).map_err(|e| e.to_string())
            }
            Err(CallError::Instantiate(e)) => return Err(fatal(&self.name, e)),
            Err(e) => Err(e.to_string()),
        };
        Ok(match outcomes {
            Ok(o) => o
                .items()
                .iter()
                .map(|raw| match *raw {
                    Raw::Accumulator(s) => Ok(o.bytes(s).to_vec()),
                    Raw::Failed(m) => Err(o.message(m)),
                    _ => unreachable!("parsed as an aggregate output"),
                })
                .collect(),
            Err(reason) => vec![Err(reason); groups.len()],
        })
    }

    /// One `finish-batch` call for all the windows; when the call itself
    /// fails (a trap, the deadline), each window is finished alone, so the
    /// failure lands on its window.
    fn emit_all(
        &mut self,
        due: &[DueWindow<'_>],
        out: &mut Vec<Record>,
    ) -> Result<Vec<Result<(), String>>, OperatorError> {
        let bytes: usize = due.iter().map(|d| 4 + d.accumulator.len()).sum();
        let mut input = Writer::with_capacity(due.len(), bytes);
        for d in due {
            input.bytes(d.accumulator);
        }
        let outcomes = match self.slot.instance().call_finish_batch(&input.finish()) {
            Ok(output) => Outcomes::parse(World::Aggregate, output, due.len(), 0).ok(),
            Err(CallError::Instantiate(e)) => return Err(fatal(&self.name, e)),
            Err(_) => None,
        };
        let Some(o) = outcomes else {
            return emit_each(self, due, out);
        };
        Ok(due
            .iter()
            .zip(o.items())
            .map(|(d, raw)| match *raw {
                Raw::Accumulator(s) => {
                    out.push(Record::new(
                        Some(Bytes::copy_from_slice(d.key)),
                        o.bytes(s).to_vec(),
                        d.window.max_timestamp(),
                    ));
                    Ok(())
                }
                Raw::Failed(m) => Err(o.message(m)),
                _ => unreachable!("parsed as an aggregate output"),
            })
            .collect())
    }

    fn emit(
        &mut self,
        key: &[u8],
        w: Window,
        acc: &[u8],
        out: &mut Vec<Record>,
    ) -> Result<(), WindowFnError> {
        let value = self.call(AggregateStep::Finish(acc))?;
        out.push(Record::new(
            Some(Bytes::copy_from_slice(key)),
            value,
            w.max_timestamp(),
        ));
        Ok(())
    }
}

/// A window function of the `window` world. The accumulator is the window's
/// records as a batch in the flat encoding (`count:u32 record*`), appended
/// to as they arrive; when the window fires, the plugin gets the key, the
/// bounds and the records in one call.
///
/// Each record added rewrites the window's stored records, so a window of
/// `n` records costs `O(n²)` bytes written: use the `aggregate` world for
/// large windows.
pub struct WasmWindow {
    name: String,
    slot: PluginSlot,
}

impl WasmWindow {
    /// Operator `name` calling `instance`.
    pub fn new(name: &str, instance: PluginInstance) -> Self {
        Self {
            name: name.to_owned(),
            slot: PluginSlot::new(name, instance),
        }
    }

    /// The record count of a stored batch and its records' bytes.
    fn parts<'a>(&self, acc: &'a [u8]) -> Result<(usize, &'a [u8]), WindowFnError> {
        let mut r = Reader::new(acc);
        let count = r.count().map_err(|_| corrupt(&self.name))?;
        Ok((count, &acc[r.offset()..]))
    }

    fn join(&self, parts: &[(usize, &[u8])]) -> Vec<u8> {
        let count = parts.iter().map(|p| p.0).sum();
        let bytes = parts.iter().map(|p| p.1.len()).sum();
        let mut w = Writer::with_capacity(count, bytes);
        for (_, records) in parts {
            w.raw(records);
        }
        w.finish()
    }
}

impl WindowFunction for WasmWindow {
    fn plugin_slot(&mut self) -> Option<&mut PluginSlot> {
        Some(&mut self.slot)
    }

    fn add(&mut self, acc: Option<&[u8]>, rec: &Record) -> Result<Vec<u8>, WindowFnError> {
        let one = Batch::Records(vec![rec.clone()]).encode().into_owned();
        let added = self.parts(&one)?;
        Ok(match acc {
            None => one,
            Some(acc) => self.join(&[self.parts(acc)?, added]),
        })
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, WindowFnError> {
        Ok(self.join(&[self.parts(a)?, self.parts(b)?]))
    }

    fn emit(
        &mut self,
        key: &[u8],
        w: Window,
        acc: &[u8],
        out: &mut Vec<Record>,
    ) -> Result<(), WindowFnError> {
        let mut input = Writer::with_capacity(1, acc.len() + key.len() + 32);
        input.option((!key.is_empty()).then_some(key));
        input.i64(w.start);
        input.i64(w.end);
        input.raw(acc);
        let output = step(
            &self.name,
            self.slot.instance().call_batch(&input.finish()).map(Ok),
        )?;
        let max = self.slot.instance().limits().max_outputs_per_record;
        let outcomes = Outcomes::parse(World::Window, output, 1, max)
            .map_err(|e| WindowFnError::Input(e.to_string()))?;
        match outcomes.items()[0] {
            Raw::Records { first, count } => {
                let spans = outcomes.nested(first, count).to_vec();
                out.extend(Batch::Encoded(outcomes.encoded(spans)).into_records());
                Ok(())
            }
            Raw::Failed(m) => Err(WindowFnError::Input(outcomes.message(m))),
            _ => unreachable!("parsed as a window output"),
        }
    }
}
