//! The stream-table join: input 0 is a keyed stream, input 1 a table, read
//! as a changelog (the latest value per key; an empty value, a tombstone,
//! deletes the key). Each stream record is joined with its key's row:
//!
//! - as of `latest`: the row when the record is processed, at once;
//! - as of `event_time`: the row version valid at the record's time (the
//!   newest one at or before it). The record waits in the state until the
//!   watermark (the lower of both inputs') reaches its time, so every
//!   version up to then has arrived (Flink's temporal join). A version is
//!   dropped once a newer one is at or before the watermark: no record to
//!   come can need it.
//!
//! The output is `{"stream": …, "table": …}` under the key at the stream
//! record's time; with `left`, a record without a row has `"table": null`,
//! with `inner` it is dropped. Stream records at or before the watermark
//! when they arrive are late (under `event_time` only: their time passed).
//!
//! ```text
//! latest row    := keyed(kg, op, key) 'T'                 -> value
//! version       := keyed(kg, op, key) 'V' time:sortable   -> present:u8 value
//! waiting       := keyed(kg, op, key) 'S' time:sortable   -> item* (items.rs)
//! timers        := payload 'S' time (records due) or 'V' time (older versions out)
//! (tag and time after the key: timed.rs)
//! ```

use super::items::{Item, decode, encode};
use super::timed;
use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::operators::Operator;
use crate::record::Record;
use crate::state::{Answer, KeyEntries, StateRequest, TimeDomain, answer, bytes_json};
use bytes::Bytes;
use serde_json::{Value, json};

const LATEST: u8 = b'T';
const VERSION: u8 = b'V';
const WAITING: u8 = b'S';

/// A version of a row: its time, and the row (`None`: deleted).
type Version = (i64, Option<Vec<u8>>);

/// Which row a stream record is joined with (`as_of` in a manifest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AsOf {
    /// The row when the record is processed.
    #[default]
    Latest,
    /// The row version valid at the record's event time.
    EventTime,
}

/// What a stream-table join computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LookupJoinSpec {
    /// Which row a record is joined with.
    pub as_of: AsOf,
    /// Whether a record without a row is emitted (with `"table": null`).
    pub keep_unmatched: bool,
}

/// One keyed worker's stream-table join.
pub type LookupJoin = super::keyed::KeyedJoin<LookupJoinSpec>;

impl LookupJoin {
    fn corrupt(&self) -> OperatorError {
        self.failed("a stream-table join entry in the state backend is corrupt")
    }

    fn timed(&self, kg: u16, key: &[u8], kind: u8, time: i64) -> Vec<u8> {
        self.state.entry(kg, key, &timed::suffix(kind, time))
    }

    /// The joined record of `value` (of the stream, at `time`) and `row`.
    fn join_row(
        &mut self,
        key: &Option<Bytes>,
        value: &[u8],
        time: i64,
        row: Option<&[u8]>,
        out: &mut Vec<Record>,
    ) {
        if row.is_some() || self.spec.keep_unmatched {
            let row_key = key.as_deref().unwrap_or_default();
            self.emit.row(key, value, time, row_key, row, out);
        }
    }

    fn on_row(&mut self, rec: Record) -> Result<(), OperatorError> {
        let key = rec.key_bytes();
        let kg = self.state.key_group(key);
        let deleted = rec.value.is_empty();
        if self.spec.as_of == AsOf::Latest {
            let entry = self.state.entry(kg, key, &[LATEST]);
            return match deleted {
                true => self.state.delete(&entry),
                false => self.state.put(&entry, &rec.value),
            }
            .map_err(|e| self.failed(e));
        }
        let mut version = Vec::with_capacity(rec.value.len() + 1);
        version.push(u8::from(!deleted));
        version.extend_from_slice(&rec.value);
        if rec.timestamp <= self.time.watermark() {
            // Its time passed: it can only replace the current version (the
            // one valid at the watermark), if it is newer.
            let current = self.version_at(kg, key, self.time.watermark())?;
            if current.as_ref().is_some_and(|(t, _)| *t > rec.timestamp) {
                return Ok(());
            }
            if let Some((t, _)) = current {
                let old = self.timed(kg, key, VERSION, t);
                self.state.delete(&old).map_err(|e| self.failed(e))?;
            }
            if deleted {
                return Ok(());
            }
        } else {
            let timer = self.state.timer(
                TimeDomain::EventTime,
                rec.timestamp,
                kg,
                key,
                &timed::suffix(VERSION, rec.timestamp),
            );
            self.state.put(&timer, &[]).map_err(|e| self.failed(e))?;
        }
        let entry = self.timed(kg, key, VERSION, rec.timestamp);
        self.state.put(&entry, &version).map_err(|e| self.failed(e))
    }

    /// The newest version of `key` at or before `time`, if any: its time
    /// and the row (`None`: deleted).
    fn version_at(&self, kg: u16, key: &[u8], time: i64) -> Result<Option<Version>, OperatorError> {
        let (from, to) = timed::range(&self.state, kg, key, VERSION, i64::MIN, time);
        let mut newest = None;
        self.state
            .scan(&from, &to, &mut |k, v| {
                newest = Some((k.to_vec(), v.to_vec()));
                true
            })
            .map_err(|e| self.failed(e))?;
        let Some((k, v)) = newest else { return Ok(None) };
        let (_, t) = timed::parse(&k).ok_or_else(|| self.corrupt())?;
        let row = match v.split_first() {
            Some((1, row)) => Some(row.to_vec()),
            Some((0, _)) => None,
            _ => return Err(self.corrupt()),
        };
        Ok(Some((t, row)))
    }

    fn on_stream(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let key = rec.key_bytes();
        let kg = self.state.key_group(key);
        if self.spec.as_of == AsOf::Latest {
            let row = self
                .state
                .get(&self.state.entry(kg, key, &[LATEST]))
                .map_err(|e| self.failed(e))?;
            self.join_row(&rec.key, &rec.value, rec.timestamp, row.as_deref(), out);
            return Ok(());
        }
        if rec.timestamp <= self.time.watermark() {
            self.late.handle(rec);
            return Ok(());
        }
        let entry = self.timed(kg, key, WAITING, rec.timestamp);
        let mut items = match self.state.get(&entry).map_err(|e| self.failed(e))? {
            Some(v) => decode(&v).ok_or_else(|| self.corrupt())?,
            None => {
                let payload = timed::suffix(WAITING, rec.timestamp);
                let timer = self
                    .state
                    .timer(TimeDomain::EventTime, rec.timestamp, kg, key, &payload);
                self.state.put(&timer, &[]).map_err(|e| self.failed(e))?;
                Vec::new()
            }
        };
        items.push(Item {
            joined: false,
            value: rec.value.to_vec(),
        });
        self.state
            .put(&entry, &encode(&items))
            .map_err(|e| self.failed(e))
    }

    /// Fires what is due in `from..=upto`, in time order: waiting records are
    /// joined with the version valid at their time; a version's timer drops
    /// the versions before it (and a deletion itself).
    fn fire(&mut self, from: i64, upto: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let due = self
            .state
            .take_due_timers(TimeDomain::EventTime, from, upto)
            .map_err(|e| self.failed(e))?;
        for t in due {
            let (kind, time) = timed::parse(t.payload()).ok_or_else(|| self.corrupt())?;
            let (kg, key) = (t.key_group, t.key());
            match kind {
                WAITING => {
                    let entry = self.timed(kg, key, WAITING, time);
                    let Some(v) = self.state.get(&entry).map_err(|e| self.failed(e))? else {
                        continue;
                    };
                    self.state.delete(&entry).map_err(|e| self.failed(e))?;
                    let items = decode(&v).ok_or_else(|| self.corrupt())?;
                    let row = self.version_at(kg, key, time)?.and_then(|(_, row)| row);
                    let record_key = Some(Bytes::copy_from_slice(key));
                    for item in items {
                        self.join_row(&record_key, &item.value, time, row.as_deref(), out);
                    }
                }
                VERSION => self.drop_versions_before(kg, key, time)?,
                _ => return Err(self.corrupt()),
            }
        }
        Ok(())
    }

    /// Drops the versions of `key` older than the one at `time`, and that
    /// one too when it is a deletion.
    fn drop_versions_before(&mut self, kg: u16, key: &[u8], time: i64) -> Result<(), OperatorError> {
        let (from, to) = timed::range(&self.state, kg, key, VERSION, i64::MIN, time);
        let at = self.timed(kg, key, VERSION, time);
        let mut old = Vec::new();
        let mut deletion = false;
        self.state
            .scan(&from, &to, &mut |k, v| {
                if k == at.as_slice() {
                    deletion = v.first() == Some(&0);
                } else {
                    old.push(k.to_vec());
                }
                true
            })
            .map_err(|e| self.failed(e))?;
        if deletion {
            old.push(at);
        }
        for k in old {
            self.state.delete(&k).map_err(|e| self.failed(e))?;
        }
        Ok(())
    }
}

impl Operator for LookupJoin {
    super::join_operator_methods!(timed);

    fn query_state(&mut self, request: &StateRequest) -> Option<Result<Answer, OperatorError>> {
        let view = |entries: &KeyEntries| {
            let (mut row, mut versions, mut waiting) = (Value::Null, Vec::new(), 0);
            for (suffix, value) in entries {
                match (suffix.first(), timed::parse(suffix)) {
                    (Some(&LATEST), _) if suffix.len() == 1 => row = bytes_json(value),
                    (Some(&VERSION), Some((_, time))) => {
                        let row = match value.split_first() {
                            Some((1, v)) => bytes_json(v),
                            _ => Value::Null,
                        };
                        versions.push(json!({ "time": time, "row": row }));
                    }
                    (Some(&WAITING), Some(_)) => waiting += decode(value).map_or(0, |items| items.len()),
                    _ => {}
                }
            }
            Some(json!({ "row": row, "versions": versions, "waiting_records": waiting }))
        };
        Some(answer(&self.state, request, view).map_err(|e| OperatorError::state(&self.name, e)))
    }

    fn process_input(&mut self, input: usize, batch: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::new();
        for rec in batch.into_records() {
            match input {
                0 => self.on_stream(rec, &mut out)?,
                _ => self.on_row(rec)?,
            }
        }
        self.emit.flush(&mut out)?;
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod model_tests;
