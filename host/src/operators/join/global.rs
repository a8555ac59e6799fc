//! The join with a global table: input 1 is a changelog (the latest value
//! per record key; an empty value deletes the key) that every worker reads
//! whole, so the stream on input 0 needs no `key_by`: each record is
//! joined, at once, with the row of its join key — a JSON field of its
//! value, or its own key — as the table stands when the record is
//! processed (Kafka Streams' `GlobalKTable` join). The table is bounded
//! by `max_rows`: a change that would add a row past it stops the
//! pipeline with an error naming the operator.
//!
//! ```text
//! row   := keyed(kg, op, key)           -> value
//! count := keyed(kg(""), op, "") 'N'    -> rows:u64 (little endian)
//! ```
//!
//! A row is its key's own entry (no suffix): the in-memory backend keeps
//! such entries in one hash table, key and value together, so a lookup is
//! one probe and one read.
//!
//! Every worker holds the same rows (each gets every change, in the
//! changelog's order, and barriers cut them at the same point), so a
//! restore at any parallelism takes one worker's snapshot whole.

use super::emit::JoinEmitter;
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::json::field;
use crate::operators::Operator;
use crate::operators::builtin::{json_of, key_text};
use crate::record::Record;
use crate::state::{Answer, KeyEntries, KeyedState, StateError, StateRequest, answer, bytes_json};
use std::borrow::Cow;

const COUNT: u8 = b'N';

/// What a join with a global table computes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalJoinSpec {
    /// The JSON field (dotted path) of a stream record holding its join
    /// key; the record's own key when absent.
    pub key_field: Option<String>,
    /// Whether a record without a row is emitted (with `"table": null`).
    pub keep_unmatched: bool,
    /// The most rows the table may hold.
    pub max_rows: u64,
}

/// One worker's join with its copy of a global table.
pub struct GlobalJoin {
    name: String,
    spec: GlobalJoinSpec,
    state: KeyedState,
    failure: FailureHandler,
    /// The rows the table holds.
    rows: u64,
    emit: JoinEmitter,
    /// The entry looked up last (a buffer reused from record to record).
    entry: Vec<u8>,
}

impl GlobalJoin {
    /// The join `name` of `spec` keeping its table in `state` (restored
    /// whole, or fresh); a record without its join key goes to `failure`.
    pub fn new(
        name: &str,
        spec: GlobalJoinSpec,
        state: KeyedState,
        failure: FailureHandler,
    ) -> Result<Self, StateError> {
        let mut join = Self {
            name: name.to_owned(),
            spec,
            state,
            failure,
            rows: 0,
            emit: JoinEmitter::json(),
            entry: Vec::new(),
        };
        join.rows = match join
            .state
            .get(&join.count_entry())?
            .as_deref()
            .map(<[u8; 8]>::try_from)
        {
            None => 0,
            Some(Ok(bytes)) => u64::from_le_bytes(bytes),
            Some(Err(_)) => {
                return Err(StateError::Restore(format!(
                    "operator `{name}`: the global table's row count in the state backend is corrupt"
                )));
            }
        };
        Ok(join)
    }

    /// The same join emitting through `emit`.
    pub fn with_emitter(self, emit: JoinEmitter) -> Self {
        Self { emit, ..self }
    }

    fn failed(&self, e: impl std::fmt::Display) -> OperatorError {
        OperatorError::state(&self.name, e)
    }

    fn count_entry(&self) -> Vec<u8> {
        self.state.entry(self.state.key_group(b""), b"", &[COUNT])
    }

    /// Writes the entry of `key`'s row into `self.entry`.
    fn set_row_entry(&mut self, key: &[u8]) {
        self.state
            .entry_into(&mut self.entry, self.state.key_group(key), key, &[]);
    }

    fn on_row(&mut self, rec: &Record) -> Result<(), OperatorError> {
        self.set_row_entry(rec.key_bytes());
        let entry = &self.entry;
        let present = self.state.get(entry).map_err(|e| self.failed(e))?.is_some();
        let rows = match (rec.value.is_empty(), present) {
            (true, false) => return Ok(()),
            (true, true) => {
                self.state.delete(entry).map_err(|e| self.failed(e))?;
                self.rows - 1
            }
            (false, true) => self.rows,
            (false, false) if self.rows >= self.spec.max_rows => {
                return Err(OperatorError::RecordFailed {
                    operator: self.name.clone(),
                    record: crate::failure::preview(rec),
                    reason: format!(
                        "the global table holds `max_rows` ({}) rows and this change adds one more: raise `max_rows`, or key both sides by the join key and drop `global` for a table spread over the workers",
                        self.spec.max_rows
                    ),
                });
            }
            (false, false) => self.rows + 1,
        };
        if !rec.value.is_empty() {
            self.state.put(entry, &rec.value).map_err(|e| self.failed(e))?;
        }
        if rows != self.rows {
            self.rows = rows;
            let count = self.count_entry();
            self.state
                .put(&count, &rows.to_le_bytes())
                .map_err(|e| self.failed(e))?;
        }
        Ok(())
    }

    /// The join key of `rec`, or why it has none.
    fn join_key<'r>(&self, rec: &'r Record) -> Result<Cow<'r, [u8]>, String> {
        let Some(path) = &self.spec.key_field else {
            return Ok(Cow::Borrowed(rec.key_bytes()));
        };
        let doc = json_of(rec)?;
        field(&doc, path)
            .map(|v| Cow::Owned(key_text(v)))
            .ok_or_else(|| format!("the value has no field `{path}` to join the global table by"))
    }

    fn on_stream(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let key = match self.join_key(&rec) {
            Ok(key) => key,
            Err(reason) => return self.failure.fail(rec, &reason),
        };
        self.set_row_entry(&key);
        // The row is read in place: only the output is written.
        let (emit, keep_unmatched) = (&mut self.emit, self.spec.keep_unmatched);
        self.state
            .read_with(&self.entry, &mut |row| {
                if row.is_some() || keep_unmatched {
                    emit.row(&rec.key, &rec.value, rec.timestamp, &key, row, out);
                }
            })
            .map_err(|e| OperatorError::state(&self.name, e))
    }
}

impl Operator for GlobalJoin {
    super::join_operator_methods!();

    fn query_state(&mut self, request: &StateRequest) -> Option<Result<Answer, OperatorError>> {
        // A row is its key's entry without a suffix (the row count is not).
        let view = |entries: &KeyEntries| {
            let (_, row) = entries.iter().find(|(suffix, _)| suffix.is_empty())?;
            Some(serde_json::json!({ "row": bytes_json(row) }))
        };
        Some(answer(&self.state, request, view).map_err(|e| OperatorError::state(&self.name, e)))
    }

    fn process_input(&mut self, input: usize, batch: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::new();
        if input == 0 {
            self.failure.count_records(batch.len());
        }
        for rec in batch.into_records() {
            match input {
                0 => self.on_stream(rec, &mut out)?,
                _ => self.on_row(&rec)?,
            }
        }
        self.emit.flush(&mut out)?;
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod model_tests;
