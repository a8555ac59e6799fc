//! The reduce operator: the host keeps each key's accumulator and passes it
//! to the plugin, which returns the new one; one output per input record
//! (the key and its new accumulator).

use super::outcome::{Outcome, Raw, RecordOutcome};
use super::retry::{self, PluginCalls, fatal};
use super::{CallMode, PluginInstance};
use crate::batch::{Batch, write_record};
use crate::operator::{FailureHandler, Operator, OperatorError};
use crate::record::Record;
use bytes::Bytes;
use mailer_wire::Writer;
use rustc_hash::FxHashMap;

/// A keyed reduce backed by a plugin of the reduce world, with its
/// accumulators in memory (one instance per keyed worker).
pub struct WasmReduce {
    name: String,
    instance: PluginInstance,
    mode: CallMode,
    failure: FailureHandler,
    accumulators: FxHashMap<Bytes, Bytes>,
}

impl WasmReduce {
    /// The operator `name` calling `instance` in `mode`.
    pub fn new(name: &str, instance: PluginInstance, mode: CallMode, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            instance,
            mode,
            failure,
            accumulators: FxHashMap::default(),
        }
    }

    /// The accumulator held for `key`.
    pub fn accumulator(&self, key: &[u8]) -> Option<&Bytes> {
        self.accumulators.get(key)
    }

    /// Encodes records with their keys' accumulators: each distinct key is a
    /// slot carrying its accumulator once.
    fn encode(&self, records: &[Record]) -> Vec<u8> {
        let mut slot_of: FxHashMap<&[u8], usize> = FxHashMap::default();
        let mut slots: Vec<&[u8]> = Vec::new();
        let record_slots: Vec<usize> = records
            .iter()
            .map(|r| {
                *slot_of.entry(r.key_bytes()).or_insert_with(|| {
                    slots.push(r.key_bytes());
                    slots.len() - 1
                })
            })
            .collect();
        let mut w = Writer::with_capacity(slots.len(), records.len() * 48);
        for key in &slots {
            match self.accumulators.get(*key) {
                Some(acc) => {
                    w.u8(1);
                    w.bytes(acc);
                }
                None => w.u8(0),
            }
        }
        w.u32(records.len());
        for (r, slot) in records.iter().zip(record_slots) {
            w.u32(slot);
            write_record(&mut w, r);
        }
        w.finish()
    }

    fn one(&mut self, rec: &Record) -> Result<RecordOutcome, OperatorError> {
        let res = match self.mode {
            CallMode::Record => {
                let acc = self.accumulators.get(rec.key_bytes()).cloned();
                self.instance.one_outcome(rec, acc.as_deref())
            }
            CallMode::Batch => {
                let input = self.encode(std::slice::from_ref(rec));
                self.instance
                    .batch_outcomes(&input, 1)
                    .map(|r| r.and_then(|o| o.owned(0)))
            }
        };
        res.map_err(|e| fatal(&self.name, e))
    }

    fn apply(
        &mut self,
        rec: Record,
        outcome: RecordOutcome,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        match outcome {
            Ok(Outcome::Accumulator(acc)) => {
                let key = rec.key.clone().unwrap_or_default();
                self.accumulators.insert(key, acc.clone());
                out.push(Record::new(rec.key, acc, rec.timestamp));
            }
            Ok(_) => unreachable!("decoded by the reduce world"),
            Err(reason) => self.failure.fail(rec, &reason)?,
        }
        Ok(())
    }
}

impl PluginCalls for WasmReduce {
    fn operator_name(&self) -> &str {
        &self.name
    }

    fn call_mode(&self) -> CallMode {
        self.mode
    }

    fn whole(&mut self, input: Batch) -> Result<Result<Batch, (String, Batch)>, OperatorError> {
        let input = input.into_records();
        let outcomes = match self.instance.batch_outcomes(&self.encode(&input), input.len()) {
            Err(e) => return Err(fatal(&self.name, e)),
            Ok(Err(reason)) => return Ok(Err((reason, Batch::Records(input)))),
            Ok(Ok(outcomes)) => outcomes,
        };
        let mut out = Vec::with_capacity(input.len());
        for (rec, raw) in input.into_iter().zip(outcomes.items()) {
            let outcome = match *raw {
                Raw::Accumulator(s) => Ok(Outcome::Accumulator(outcomes.bytes(s))),
                Raw::Failed(m) => Err(outcomes.message(m)),
                _ => unreachable!("parsed as a reduce output"),
            };
            self.apply(rec, outcome, &mut out)?;
        }
        Ok(Ok(Batch::Records(out)))
    }

    fn single(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let outcome = self.one(&rec)?;
        self.apply(rec, outcome, out)
    }
}

impl Operator for WasmReduce {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        retry::process(self, input)
    }
}
