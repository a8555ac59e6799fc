//! The interval join of two keyed streams: a left record at time `l` and a
//! right record at time `r` of the same key join when
//! `l + lower <= r <= l + upper`.
//!
//! Each record is kept in the state backend, under its key, side and time,
//! for as long as a partner may still arrive: a left record until the
//! watermark reaches `l + upper`, a right one until it reaches `r - lower`.
//! A record that arrives finds its partners among the kept records of the
//! other side, so every pair is emitted once, by whichever of the two came
//! second. When a kept record's time is up, an outer join emits it alone if
//! it never joined. A record at or before the watermark is late: it is
//! counted and dropped or sent to the late output (it could miss partners
//! already gone).
//!
//! ```text
//! entry := keyed(kg, op, key) side:u8 time:sortable  ->  item* (timed.rs, items.rs)
//! timer := at the entry's last useful time, payload side:u8 time:sortable
//! ```

use super::items::{Item, decode, encode};
use super::output::{JoinKind, Side};
use super::timed;
use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::operators::Operator;
use crate::record::Record;
use crate::state::{Answer, KeyEntries, StateRequest, TimeDomain, answer, bytes_json};
use bytes::Bytes;
use serde_json::json;

/// What an interval join computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntervalJoinSpec {
    /// The earliest right record a left one joins, relative to it (ms).
    pub lower: i64,
    /// The latest right record a left one joins, relative to it (ms).
    pub upper: i64,
    /// Which unmatched records are emitted alone.
    pub kind: JoinKind,
}

/// One keyed worker's interval join: input 0 is the left stream, input 1
/// the right one.
pub type IntervalJoin = super::keyed::KeyedJoin<IntervalJoinSpec>;

impl IntervalJoin {
    /// The last time at which a record of `side` at `time` may still get a
    /// partner: a partner after it would be late.
    fn kept_until(&self, side: Side, time: i64) -> i64 {
        match side {
            Side::Left => time.saturating_add(self.spec.upper),
            Side::Right => time.saturating_sub(self.spec.lower),
        }
    }

    /// The times of the other side's records that a record of `side` at
    /// `time` joins.
    fn partner_times(&self, side: Side, time: i64) -> (i64, i64) {
        match side {
            Side::Left => (
                time.saturating_add(self.spec.lower),
                time.saturating_add(self.spec.upper),
            ),
            Side::Right => (
                time.saturating_sub(self.spec.upper),
                time.saturating_sub(self.spec.lower),
            ),
        }
    }

    fn entry(&self, kg: u16, key: &[u8], side: Side, time: i64) -> Vec<u8> {
        self.state.entry(kg, key, &timed::suffix(side as u8, time))
    }

    fn on_record(&mut self, side: Side, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        if rec.timestamp <= self.time.watermark() {
            self.late.handle(rec);
            return Ok(());
        }
        let key = rec.key_bytes().to_vec();
        let kg = self.state.key_group(&key);
        let other = side.other();
        let (from, to) = self.partner_times(side, rec.timestamp);
        let (start, end) = timed::range(&self.state, kg, &key, other as u8, from, to);
        let mut partners: Vec<(Vec<u8>, i64, Vec<Item>)> = Vec::new();
        let mut corrupt = false;
        self.state
            .scan(&start, &end, &mut |k, v| {
                match (timed::parse(k), decode(v)) {
                    (Some((_, time)), Some(items)) => partners.push((k.to_vec(), time, items)),
                    _ => corrupt = true,
                }
                true
            })
            .map_err(|e| self.failed(e))?;
        if corrupt {
            return Err(self.failed("a kept join record in the state backend is corrupt"));
        }
        let found = partners.iter().any(|(_, _, items)| !items.is_empty());
        let outer_other = self.spec.kind.keeps(other);
        for (entry, time, mut items) in partners {
            let mut changed = false;
            for item in &mut items {
                let mine = (&rec.value[..], rec.timestamp);
                let (left, right) = side.order(mine, (&item.value[..], time));
                self.emit.pair(&rec.key, left, right, out);
                changed |= outer_other && !item.joined;
                item.joined = true;
            }
            if changed {
                self.state
                    .put(&entry, &encode(&items))
                    .map_err(|e| self.failed(e))?;
            }
        }
        let until = self.kept_until(side, rec.timestamp);
        if until <= self.time.watermark() {
            // No partner can come any more: it is done with now.
            if !found && self.spec.kind.keeps(side) {
                self.emit.alone(side, &rec.key, &rec.value, rec.timestamp, out);
            }
            return Ok(());
        }
        let entry = self.entry(kg, &key, side, rec.timestamp);
        let mut items = match self.state.get(&entry).map_err(|e| self.failed(e))? {
            Some(v) => {
                decode(&v).ok_or_else(|| self.failed("a kept join record in the state backend is corrupt"))?
            }
            None => {
                let timer = self.state.timer(
                    TimeDomain::EventTime,
                    until,
                    kg,
                    &key,
                    &timed::suffix(side as u8, rec.timestamp),
                );
                self.state.put(&timer, &[]).map_err(|e| self.failed(e))?;
                Vec::new()
            }
        };
        items.push(Item {
            joined: found,
            value: rec.value.to_vec(),
        });
        self.state
            .put(&entry, &encode(&items))
            .map_err(|e| self.failed(e))
    }

    /// Fires every timer due in `from..=upto`: the kept records whose time is up
    /// leave the state, the unmatched ones of an outer side alone.
    fn fire(&mut self, from: i64, upto: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let due = self
            .state
            .take_due_timers(TimeDomain::EventTime, from, upto)
            .map_err(|e| self.failed(e))?;
        for t in due {
            let parsed = timed::parse(t.payload());
            let Some((side, time)) = parsed.and_then(|(tag, time)| Some((Side::from_byte(tag)?, time)))
            else {
                return Err(self.failed("a join timer in the state backend is corrupt"));
            };
            let entry = self.entry(t.key_group, t.key(), side, time);
            let Some(v) = self.state.get(&entry).map_err(|e| self.failed(e))? else {
                continue;
            };
            self.state.delete(&entry).map_err(|e| self.failed(e))?;
            if !self.spec.kind.keeps(side) {
                continue;
            }
            let items = decode(&v)
                .ok_or_else(|| self.failed("a kept join record in the state backend is corrupt"))?;
            let key = Some(Bytes::copy_from_slice(t.key()));
            for item in items.into_iter().filter(|i| !i.joined) {
                self.emit.alone(side, &key, &item.value, time, out);
            }
        }
        Ok(())
    }
}

impl Operator for IntervalJoin {
    super::join_operator_methods!(timed);

    fn query_state(&mut self, request: &StateRequest) -> Option<Result<Answer, OperatorError>> {
        let view = |entries: &KeyEntries| {
            let (mut left, mut right) = (Vec::new(), Vec::new());
            for (suffix, value) in entries {
                let (Some((side, time)), Some(items)) = (timed::parse(suffix), decode(value)) else {
                    continue;
                };
                let kept = if side == Side::Left as u8 {
                    &mut left
                } else {
                    &mut right
                };
                kept.extend(
                    items
                        .iter()
                        .map(|i| json!({ "time": time, "value": bytes_json(&i.value), "joined": i.joined })),
                );
            }
            Some(json!({ "left": left, "right": right }))
        };
        Some(answer(&self.state, request, view).map_err(|e| OperatorError::state(&self.name, e)))
    }

    fn process_input(&mut self, input: usize, batch: Batch) -> Result<Batch, OperatorError> {
        let side = Side::of_input(input);
        let mut out = Vec::new();
        for rec in batch.into_records() {
            self.on_record(side, rec, &mut out)?;
        }
        self.emit.flush(&mut out)?;
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod model_tests;
