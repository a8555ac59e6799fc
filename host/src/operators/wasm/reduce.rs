//! The reduce operator: the host keeps each key's accumulator and passes it
//! to the plugin, which returns the new one; one output per input record
//! (the key and its new accumulator).

use super::retry::{self, PluginCalls, fatal};
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::Operator;
use crate::plugin::{CallMode, PluginInstance};
use crate::plugin::{Outcome, Raw, RecordOutcome};
use crate::record::Record;
use crate::state::{Answer, KeyEntries, KeyedState, StateRequest, answer, bytes_json};
use crate::swap::PluginSlot;
use bytes::Bytes;
use hashbrown::HashTable;
use mailer_wire::Writer;
use xxhash_rust::xxh3::xxh3_64;

/// A keyed reduce backed by a plugin of the reduce world; each key's
/// accumulator lives in the worker's state backend.
pub struct WasmReduce {
    name: String,
    slot: PluginSlot,
    mode: CallMode,
    failure: FailureHandler,
    state: KeyedState,
    /// A state key, built in place record after record.
    key_buf: Vec<u8>,
}

impl WasmReduce {
    /// The operator `name` calling `instance` in `mode`, keeping
    /// accumulators in `state`.
    pub fn new(
        name: &str,
        instance: PluginInstance,
        mode: CallMode,
        failure: FailureHandler,
        state: KeyedState,
    ) -> Self {
        Self {
            name: name.to_owned(),
            slot: PluginSlot::new(name, instance),
            mode,
            failure,
            state,
            key_buf: Vec::new(),
        }
    }

    /// Builds `key`'s state key in `key_buf`.
    fn fill_state_key(&mut self, key: &[u8]) {
        let key_group = self.state.key_group(key);
        self.state.entry_into(&mut self.key_buf, key_group, key, &[]);
    }

    fn accumulator(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, OperatorError> {
        self.fill_state_key(key);
        self.state
            .get(&self.key_buf)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    /// Encodes the batch's records with their keys' accumulators: each
    /// distinct key is a slot carrying its accumulator once, read from the
    /// state in place; encoded records are copied as they are.
    fn encode(&mut self, batch: &Batch) -> Result<Vec<u8>, OperatorError> {
        let n = batch.len();
        let mut slot_of = HashTable::<usize>::with_capacity(n);
        let mut slots: Vec<&[u8]> = Vec::new();
        let mut record_slots = Vec::with_capacity(n);
        for i in 0..n {
            let key = batch.key_at(i);
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
        let mut w = Writer::with_capacity(slots.len(), n * 48);
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
        w.u32(n);
        for (i, slot) in record_slots.into_iter().enumerate() {
            w.u32(slot);
            batch.write_at(i, &mut w);
        }
        Ok(w.finish())
    }

    fn one(&mut self, rec: &Record) -> Result<RecordOutcome, OperatorError> {
        let res = match self.mode {
            CallMode::Record => {
                let acc = self.accumulator(rec.key_bytes())?;
                self.slot.instance().one_outcome(rec, acc.as_deref())
            }
            CallMode::Batch => {
                let input = self.encode(&Batch::Records(vec![rec.clone()]))?;
                self.slot
                    .instance()
                    .batch_outcomes(&input, 1)
                    .map(|r| r.and_then(|o| o.owned(0)))
            }
        };
        res.map_err(|e| fatal(&self.name, e))
    }

    /// Stores `acc` as the accumulator of `key` and emits it.
    fn store(
        &mut self,
        key: Option<Bytes>,
        timestamp: i64,
        acc: Bytes,
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        self.fill_state_key(key.as_deref().unwrap_or_default());
        self.state
            .put(&self.key_buf, &acc)
            .map_err(|e| OperatorError::state(&self.name, e))?;
        out.push(Record::new(key, acc, timestamp));
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
        let encoded = self.encode(&input)?;
        let outcomes = match self.slot.instance().batch_outcomes(&encoded, input.len()) {
            Err(e) => return Err(fatal(&self.name, e)),
            Ok(Err(reason)) => return Ok(Err((reason, input))),
            Ok(Ok(outcomes)) => outcomes,
        };
        let mut out = Vec::with_capacity(input.len());
        for (i, raw) in outcomes.items().iter().enumerate() {
            match *raw {
                Raw::Accumulator(s) => {
                    let (key, timestamp) = input.key_and_time_at(i);
                    self.store(key, timestamp, outcomes.bytes(s), &mut out)?;
                }
                Raw::Failed(m) => self.failure.fail(input.record(i), &outcomes.message(m))?,
                _ => unreachable!("parsed as a reduce output"),
            }
        }
        Ok(Ok(Batch::Records(out)))
    }

    fn single(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        match self.one(&rec)? {
            Ok(Outcome::Accumulator(acc)) => self.store(rec.key, rec.timestamp, acc, out),
            Ok(_) => unreachable!("decoded by the reduce world"),
            Err(reason) => self.failure.fail(rec, &reason),
        }
    }
}

impl Operator for WasmReduce {
    fn name(&self) -> &str {
        &self.name
    }

    fn plugin_slot(&mut self) -> Option<&mut PluginSlot> {
        Some(&mut self.slot)
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(input.len());
        retry::process(self, input)
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        crate::operators::snapshot_state(&self.name, &mut self.state, dir)
    }

    fn query_state(&mut self, request: &StateRequest) -> Option<Result<Answer, OperatorError>> {
        let view =
            |entries: &KeyEntries| Some(serde_json::json!({ "accumulator": bytes_json(&entries[0].1) }));
        Some(answer(&self.state, request, view).map_err(|e| OperatorError::state(&self.name, e)))
    }
}
