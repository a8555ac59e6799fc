//! The reduce operator: the host keeps each key's accumulator and passes it
//! to the plugin, which returns the new one; one output per input record
//! (the key and its new accumulator).

use super::retry::{self, PluginCalls, fatal};
use crate::batch::{Batch, write_record};
use crate::operator::{FailureHandler, Operator, OperatorError};
use crate::plugin::{CallMode, PluginInstance};
use crate::plugin::{Outcome, Raw, RecordOutcome};
use crate::record::Record;
use crate::state::StateBackend;
use crate::state::keys;
use hashbrown::HashTable;
use mailer_wire::Writer;
use xxhash_rust::xxh3::xxh3_64;

/// A keyed reduce backed by a plugin of the reduce world; each key's
/// accumulator lives in the worker's state backend.
pub struct WasmReduce {
    name: String,
    op: u16,
    key_groups: u32,
    instance: PluginInstance,
    mode: CallMode,
    failure: FailureHandler,
    state: Box<dyn StateBackend>,
    /// A state key, built in place record after record.
    key_buf: Vec<u8>,
}

impl WasmReduce {
    /// The operator `name` (state namespace `op`) calling `instance` in
    /// `mode`, keeping accumulators in `state`.
    pub fn new(
        name: &str,
        op: u16,
        key_groups: u32,
        instance: PluginInstance,
        mode: CallMode,
        failure: FailureHandler,
        state: Box<dyn StateBackend>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            op,
            key_groups,
            instance,
            mode,
            failure,
            state,
            key_buf: Vec::new(),
        }
    }

    /// Builds `key`'s state key in `key_buf`.
    fn fill_state_key(&mut self, key: &[u8]) {
        self.key_buf.clear();
        keys::keyed_into(&mut self.key_buf, keys::group(key, self.key_groups), self.op, key);
    }

    fn accumulator(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, OperatorError> {
        self.fill_state_key(key);
        self.state
            .get(&self.key_buf)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    /// Encodes records with their keys' accumulators: each distinct key is a
    /// slot carrying its accumulator once, read from the state in place.
    fn encode(&mut self, records: &[Record]) -> Result<Vec<u8>, OperatorError> {
        let mut slot_of = HashTable::<usize>::with_capacity(records.len());
        let mut slots: Vec<&[u8]> = Vec::new();
        let mut record_slots = Vec::with_capacity(records.len());
        for r in records {
            let key = r.key_bytes();
            let hash = xxh3_64(key);
            let slot = match slot_of.find(hash, |&s| slots[s] == key) {
                Some(&s) => s,
                None => {
                    slot_of.insert_unique(hash, slots.len(), |&s| xxh3_64(slots[s]));
                    slots.push(key);
                    slots.len() - 1
                }
            };
            record_slots.push(slot);
        }
        let mut w = Writer::with_capacity(slots.len(), records.len() * 48);
        for key in &slots {
            self.fill_state_key(key);
            self.state
                .read_with(&self.key_buf, &mut |acc| match acc {
                    Some(acc) => {
                        w.u8(1);
                        w.bytes(acc);
                    }
                    None => w.u8(0),
                })
                .map_err(|e| OperatorError::state(&self.name, e))?;
        }
        w.u32(records.len());
        for (r, slot) in records.iter().zip(record_slots) {
            w.u32(slot);
            write_record(&mut w, r);
        }
        Ok(w.finish())
    }

    fn one(&mut self, rec: &Record) -> Result<RecordOutcome, OperatorError> {
        let res = match self.mode {
            CallMode::Record => {
                let acc = self.accumulator(rec.key_bytes())?;
                self.instance.one_outcome(rec, acc.as_deref())
            }
            CallMode::Batch => {
                let input = self.encode(std::slice::from_ref(rec))?;
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
                self.fill_state_key(rec.key_bytes());
                self.state
                    .put(&self.key_buf, &acc)
                    .map_err(|e| OperatorError::state(&self.name, e))?;
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
        let encoded = self.encode(&input)?;
        let outcomes = match self.instance.batch_outcomes(&encoded, input.len()) {
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

    fn swap_plugin(
        &mut self,
        plugin: &std::sync::Arc<crate::plugin::LoadedPlugin>,
    ) -> Result<(), OperatorError> {
        super::swap_instance(&self.name, &mut self.instance, plugin)
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(input.len());
        retry::process(self, input)
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        self.state
            .snapshot(dir)
            .map_err(|e| OperatorError::state(&self.name, e))?;
        Ok(true)
    }
}
