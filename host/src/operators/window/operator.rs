//! The window operator: assigns each record of a key to its windows, keeps
//! one accumulator per (key, window) and the windows' timers in the state
//! backend, and emits a window's result when the watermark passes its end.
//!
//! Allowed lateness `L`: a record for a window whose end passed the
//! watermark, but by less than `L`, still updates it and the window's result
//! is emitted again; the window's state is dropped when the watermark passes
//! `end - 1 + L`. A record too late for every window it belongs to is
//! counted and dropped or sent to the side output.

use super::aggregate::AggregateKind;
use super::assigner::{Assigner, Window};
use super::function::{AccumulatorGroup, BuiltinAggregates, DueWindow, WindowFnError, WindowFunction};
use crate::batch::Batch;
use crate::clock::Clock;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::{EventTime, LateRecords, Operator};
use crate::record::Record;
use crate::state::keys;
use crate::state::{Answer, KeyEntries, KeyedState, StateRequest, TimeDomain};
use std::ops::Range;
use std::sync::Arc;
use xxhash_rust::xxh3::xxh3_64;

const FIRE: u8 = 0;
const CLEANUP: u8 = 1;
/// At most this many windows are finished in one call.
const FIRED_AT_ONCE: usize = 1024;
/// Where a window's timers are kept, whichever time it windows by: both
/// kinds fire on the operator's one clock ([`WindowOperator::advance`]).
const TIMERS_DOMAIN: TimeDomain = TimeDomain::EventTime;

/// What a window operator computes.
#[derive(Debug, Clone, PartialEq)]
pub struct WindowSpec {
    /// How records are grouped into windows.
    pub assigner: Assigner,
    /// How long after its end a window still accepts records, ms.
    pub allowed_lateness: i64,
    /// The aggregates in each result, in order.
    pub aggregates: Vec<AggregateKind>,
    /// The JSON field holding the number to aggregate (dotted path); the
    /// value itself, as decimal text, when absent.
    pub field: Option<String>,
    /// Windows of processing time (the wall clock when a record is handled,
    /// fired by the source's processing-time ticks) instead of event time.
    pub processing_time: bool,
}

/// One keyed worker's window operator.
pub struct WindowOperator {
    name: String,
    spec: WindowSpec,
    state: KeyedState,
    time: EventTime,
    late: LateRecords,
    failure: FailureHandler,
    clock: Clock,
    function: Box<dyn WindowFunction>,
}

impl WindowOperator {
    /// The operator `name`, keeping its windows and timers in `state`.
    pub fn new(
        name: &str,
        spec: WindowSpec,
        state: KeyedState,
        late: LateRecords,
        failure: FailureHandler,
    ) -> Self {
        let function = Box::new(BuiltinAggregates::new(
            name,
            spec.aggregates.clone(),
            spec.field.clone(),
        ));
        Self {
            name: name.to_owned(),
            spec,
            function,
            state,
            time: EventTime::default(),
            late,
            failure,
            clock: Arc::new(crate::clock::now_ms),
        }
    }

    /// The same operator computing `function` instead of the spec's
    /// built-in aggregates.
    pub fn with_function(mut self, function: Box<dyn WindowFunction>) -> Self {
        self.function = function;
        self
    }

    /// The same operator reading processing time from `clock`.
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Advances time (event or processing) to `t` and fires what is due.
    fn advance(&mut self, t: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        match self.time.advance(t) {
            Some((from, upto)) => self.fire(from, upto, out),
            None => Ok(()),
        }
    }

    fn acc_key(&self, kg: u16, key: &[u8], w: Window) -> Vec<u8> {
        let mut k = Vec::new();
        self.acc_key_into(&mut k, kg, key, w);
        k
    }

    /// [`acc_key`](Self::acc_key) written over `k`.
    fn acc_key_into(&self, k: &mut Vec<u8>, kg: u16, key: &[u8], w: Window) {
        self.state.entry_into(k, kg, key, &window_bytes(w));
    }

    fn timer(&self, kind: u8, time: i64, kg: u16, key: &[u8], w: Window) -> Vec<u8> {
        self.state
            .timer(TIMERS_DOMAIN, time, kg, key, &timer_payload(kind, w))
    }

    fn get(&self, k: &[u8]) -> Result<Option<Vec<u8>>, OperatorError> {
        self.state.get(k).map_err(|e| OperatorError::state(&self.name, e))
    }

    fn put(&mut self, k: &[u8], v: &[u8]) -> Result<(), OperatorError> {
        self.state
            .put(k, v)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    fn delete(&mut self, k: &[u8]) -> Result<(), OperatorError> {
        self.state
            .delete(k)
            .map_err(|e| OperatorError::state(&self.name, e))
    }

    /// Emits window `w`'s result; a failed window goes to the failure
    /// policy as a record naming it.
    fn emit(
        &mut self,
        key: &[u8],
        w: Window,
        acc: &[u8],
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        match self.function.emit(key, w, acc, out) {
            Ok(()) => Ok(()),
            Err(WindowFnError::Fatal(e)) => Err(e),
            Err(WindowFnError::Input(reason)) => self.window_failed(key, w, &reason),
        }
    }

    /// Emits the results of the windows that fire together, in one go.
    fn emit_all(
        &mut self,
        fired: &[(Vec<u8>, Window, Vec<u8>)],
        out: &mut Vec<Record>,
    ) -> Result<(), OperatorError> {
        if fired.is_empty() {
            return Ok(());
        }
        let due: Vec<DueWindow<'_>> = fired
            .iter()
            .map(|(key, window, acc)| DueWindow {
                key,
                window: *window,
                accumulator: acc,
            })
            .collect();
        let results = self.function.emit_all(&due, out)?;
        for (d, result) in due.iter().zip(results) {
            if let Err(reason) = result {
                self.window_failed(d.key, d.window, &reason)?;
            }
        }
        Ok(())
    }

    /// A window whose result failed goes to the failure policy as a record
    /// naming it.
    fn window_failed(&mut self, key: &[u8], w: Window, reason: &str) -> Result<(), OperatorError> {
        let value = format!(r#"{{"window":{{"start":{},"end":{}}}}}"#, w.start, w.end);
        let rec = Record::new(Some(bytes::Bytes::copy_from_slice(key)), value, w.max_timestamp());
        self.failure.fail(rec, reason)
    }

    /// Runs a window function step; a failed record goes to the failure
    /// policy (`Ok(None)`).
    fn step(
        &mut self,
        rec: &Record,
        f: impl FnOnce(&mut dyn WindowFunction) -> Result<Vec<u8>, WindowFnError>,
    ) -> Result<Option<Vec<u8>>, OperatorError> {
        match f(self.function.as_mut()) {
            Ok(acc) => Ok(Some(acc)),
            Err(WindowFnError::Fatal(e)) => Err(e),
            Err(WindowFnError::Input(reason)) => {
                self.failure.fail(rec.clone(), &reason)?;
                Ok(None)
            }
        }
    }

    fn too_late(&self, w: Window) -> bool {
        w.max_timestamp().saturating_add(self.spec.allowed_lateness) <= self.time.watermark()
    }

    /// Records a window's timers when it first gets state.
    fn register(&mut self, kg: u16, key: &[u8], w: Window) -> Result<(), OperatorError> {
        if w.max_timestamp() > self.time.watermark() {
            self.put(&self.timer(FIRE, w.max_timestamp(), kg, key, w), &[])?;
        }
        if self.spec.allowed_lateness > 0 {
            let at = w.max_timestamp().saturating_add(self.spec.allowed_lateness);
            self.put(&self.timer(CLEANUP, at, kg, key, w), &[])?;
        }
        Ok(())
    }

    fn unregister(&mut self, kg: u16, key: &[u8], w: Window) -> Result<(), OperatorError> {
        self.delete(&self.timer(FIRE, w.max_timestamp(), kg, key, w))?;
        let at = w.max_timestamp().saturating_add(self.spec.allowed_lateness);
        self.delete(&self.timer(CLEANUP, at, kg, key, w))
    }

    /// The time a record counts at.
    fn time_of(&self, rec: &Record) -> i64 {
        if self.spec.processing_time {
            // Never late: the wall clock may step back (and a tick may have
            // been read after it), so a record's time is at least just past
            // the time already fired.
            (self.clock)().max(self.time.watermark().saturating_add(1))
        } else {
            rec.timestamp
        }
    }

    /// Adds a batch to fixed windows with no allowed lateness: the records
    /// of each (key, window) go to the window function in one group, all the
    /// groups in one call; a group that fails is added again record by
    /// record, so the failure lands on its record. The state ends as if the
    /// records were added one by one.
    fn add_grouped(&mut self, records: Vec<Record>) -> Result<(), OperatorError> {
        /// One (key, window) of the batch; its bytes live in the shared
        /// arenas, so a group allocates nothing of its own.
        struct Group {
            kg: u16,
            /// The group's first record (whose key is the group's).
            first: usize,
            window: Window,
            /// The accumulator's state key, in `key_arena`.
            acc_key: Range<usize>,
            /// The stored accumulator, in `stored`.
            existing: Option<Range<usize>>,
            /// The group's records, in `members`.
            members: Range<usize>,
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut key_arena = Vec::new();
        // (group, record) in arrival order; sorted by group below.
        let mut membership: Vec<(u32, u32)> = Vec::with_capacity(records.len());
        // Groups by accumulator key, hashed once with xxh3; the key is built
        // in `scratch` and copied only for a new group.
        let mut by_acc_key = hashbrown::HashTable::<usize>::with_capacity(records.len());
        let mut scratch = Vec::new();
        let mut late = Vec::new();
        for (i, rec) in records.iter().enumerate() {
            let ts = self.time_of(rec);
            let key = rec.key_bytes();
            let kg = self.state.key_group(key);
            let mut accepted = false;
            for w in self.spec.assigner.assign(ts) {
                if self.too_late(w) {
                    continue;
                }
                accepted = true;
                self.acc_key_into(&mut scratch, kg, key, w);
                let hash = xxh3_64(&scratch);
                let g = match by_acc_key.find(hash, |&g| key_arena[groups[g].acc_key.clone()] == scratch[..])
                {
                    Some(&g) => g,
                    None => {
                        let acc_key = key_arena.len()..key_arena.len() + scratch.len();
                        key_arena.extend_from_slice(&scratch);
                        by_acc_key.insert_unique(hash, groups.len(), |&g| {
                            xxh3_64(&key_arena[groups[g].acc_key.clone()])
                        });
                        groups.push(Group {
                            kg,
                            first: i,
                            window: w,
                            acc_key,
                            existing: None,
                            members: 0..0,
                        });
                        groups.len() - 1
                    }
                };
                membership.push((g as u32, i as u32));
            }
            if !accepted {
                late.push(i);
            }
        }
        // Each group's records side by side, in arrival order (a stable sort).
        membership.sort_by_key(|&(g, _)| g);
        let mut at = 0;
        for (g, group) in groups.iter_mut().enumerate() {
            let len = membership[at..].partition_point(|&(m, _)| m as usize == g);
            group.members = at..at + len;
            at += len;
        }
        let members: Vec<&Record> = membership.iter().map(|&(_, i)| &records[i as usize]).collect();
        let mut stored = Vec::new();
        for g in &mut groups {
            self.state
                .read_with(&key_arena[g.acc_key.clone()], &mut |acc| {
                    g.existing = acc.map(|acc| {
                        stored.extend_from_slice(acc);
                        stored.len() - acc.len()..stored.len()
                    });
                })
                .map_err(|e| OperatorError::state(&self.name, e))?;
        }
        let inputs: Vec<AccumulatorGroup<'_>> = groups
            .iter()
            .map(|g| AccumulatorGroup {
                accumulator: g.existing.clone().map(|r| &stored[r]),
                records: &members[g.members.clone()],
            })
            .collect();
        let results = self.function.add_groups(&inputs)?;
        drop(inputs);
        // A record that failed once (in a sliding window) fails no other.
        let mut failed = std::collections::HashSet::new();
        for (g, result) in groups.iter().zip(results) {
            let existing = g.existing.clone().map(|r| &stored[r]);
            let acc = match result {
                Ok(acc) => Some(acc),
                Err(_) => {
                    let mut acc = existing.map(<[u8]>::to_vec);
                    let mut added = false;
                    for &(_, i) in &membership[g.members.clone()] {
                        if failed.contains(&i) {
                            continue;
                        }
                        let rec = &records[i as usize];
                        match self.step(rec, |f| f.add(acc.as_deref(), rec))? {
                            Some(next) => {
                                acc = Some(next);
                                added = true;
                            }
                            None => {
                                failed.insert(i);
                            }
                        }
                    }
                    acc.filter(|_| added)
                }
            };
            let Some(acc) = acc else { continue };
            self.put(&key_arena[g.acc_key.clone()], &acc)?;
            if existing.is_none() {
                self.register(g.kg, records[g.first].key_bytes(), g.window)?;
            }
        }
        if !late.is_empty() {
            for (i, rec) in records.into_iter().enumerate() {
                if late.binary_search(&i).is_ok() {
                    self.late.handle(rec);
                }
            }
        }
        Ok(())
    }

    fn add_fixed(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let ts = self.time_of(&rec);
        let key = rec.key_bytes().to_vec();
        let kg = self.state.key_group(&key);
        let mut accepted = false;
        for w in self.spec.assigner.assign(ts) {
            if self.too_late(w) {
                continue;
            }
            accepted = true;
            let k = self.acc_key(kg, &key, w);
            let existing = self.get(&k)?;
            let Some(acc) = self.step(&rec, |f| f.add(existing.as_deref(), &rec))? else {
                return Ok(());
            };
            self.put(&k, &acc)?;
            if existing.is_none() {
                self.register(kg, &key, w)?;
            }
            if w.max_timestamp() <= self.time.watermark() {
                self.emit(&key, w, &acc, out)?;
            }
        }
        if !accepted {
            self.late.handle(rec);
        }
        Ok(())
    }

    fn add_session(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let key = rec.key_bytes().to_vec();
        let kg = self.state.key_group(&key);
        let prefix = self.state.entry(kg, &key, &[]);
        let mut sessions: Vec<(Window, Vec<u8>)> = Vec::new();
        let mut bad = None;
        self.state
            .scan_prefix(&prefix, &mut |k, v| {
                let w = k.get(prefix.len()..).and_then(|t| {
                    Some(Window {
                        start: keys::unsortable(t.get(..8)?)?,
                        end: keys::unsortable(t.get(8..16)?)?,
                    })
                });
                match w {
                    Some(w) => sessions.push((w, v.to_vec())),
                    None => bad = Some(k.to_vec()),
                }
                true
            })
            .map_err(|e| OperatorError::state(&self.name, e))?;
        if bad.is_some() {
            return Err(OperatorError::State {
                operator: self.name.clone(),
                reason: "a session entry in the state backend is corrupt".into(),
            });
        }
        let Some(mut merged) = self.spec.assigner.assign(rec.timestamp).next() else {
            unreachable!("a session record has a window of its own")
        };
        let mut absorbed = vec![false; sessions.len()];
        loop {
            let mut changed = false;
            for (i, (w, _)) in sessions.iter().enumerate() {
                if !absorbed[i] && w.touches(&merged) {
                    merged = merged.cover(w);
                    absorbed[i] = true;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
        }
        if self.too_late(merged) {
            self.late.handle(rec);
            return Ok(());
        }
        // The joined sessions' accumulators in time order, then the record.
        let mut acc: Option<Vec<u8>> = None;
        for (i, (_, a)) in sessions.iter().enumerate() {
            if absorbed[i] {
                acc = match acc {
                    None => Some(a.clone()),
                    Some(prev) => match self.step(&rec, |f| f.merge(&prev, a))? {
                        Some(m) => Some(m),
                        None => return Ok(()),
                    },
                };
            }
        }
        let Some(acc) = self.step(&rec, |f| f.add(acc.as_deref(), &rec))? else {
            return Ok(());
        };
        for (i, (w, _)) in sessions.iter().enumerate() {
            if absorbed[i] {
                let k = self.acc_key(kg, &key, *w);
                self.delete(&k)?;
                self.unregister(kg, &key, *w)?;
            }
        }
        let k = self.acc_key(kg, &key, merged);
        self.put(&k, &acc)?;
        self.register(kg, &key, merged)?;
        if merged.max_timestamp() <= self.time.watermark() {
            self.emit(&key, merged, &acc, out)?;
        }
        Ok(())
    }

    /// Fires every timer due in `from..=upto`, in time order ([`EventTime`]
    /// starts the scan where the last one ended, so it never walks over the
    /// deleted timers before it).
    fn fire(&mut self, from: i64, upto: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let due = self
            .state
            .take_due_timers(TIMERS_DOMAIN, from, upto)
            .map_err(|e| OperatorError::state(&self.name, e))?;
        let mut fired = Vec::new();
        for t in due {
            let (key, payload) = (t.key(), t.payload());
            let (Some(&kind), Some(start), Some(end)) = (
                payload.first(),
                payload.get(1..9).and_then(keys::unsortable),
                payload.get(9..17).and_then(keys::unsortable),
            ) else {
                continue;
            };
            let w = Window { start, end };
            let k = self.acc_key(t.key_group, key, w);
            if kind == FIRE {
                if let Some(acc) = self.get(&k)? {
                    fired.push((key.to_vec(), w, acc));
                    if fired.len() == FIRED_AT_ONCE {
                        self.emit_all(&fired, out)?;
                        fired.clear();
                    }
                }
                if self.spec.allowed_lateness == 0 {
                    self.delete(&k)?;
                }
            } else {
                self.delete(&k)?;
            }
        }
        self.emit_all(&fired, out)
    }
}

impl Operator for WindowOperator {
    fn name(&self) -> &str {
        &self.name
    }

    fn query_state(&mut self, request: &StateRequest) -> Option<Result<Answer, OperatorError>> {
        let view = |entries: &KeyEntries| {
            let windows: Vec<serde_json::Value> = entries
                .iter()
                .filter_map(|(suffix, acc)| {
                    let start = keys::unsortable(suffix.get(..8)?)?;
                    let end = keys::unsortable(suffix.get(8..16)?)?;
                    Some(serde_json::json!({
                        "start": start,
                        "end": end,
                        "accumulator": self.function.show(acc),
                    }))
                })
                .collect();
            Some(serde_json::json!({ "windows": windows }))
        };
        Some(
            crate::state::answer(&self.state, request, view).map_err(|e| OperatorError::state(&self.name, e)),
        )
    }

    fn plugin_slot(&mut self) -> Option<&mut crate::swap::PluginSlot> {
        self.function.plugin_slot()
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.failure.count_records(input.len());
        let mut out = Vec::new();
        if self.spec.assigner.is_merging() {
            for rec in input.into_records() {
                self.add_session(rec, &mut out)?;
            }
        } else if self.spec.allowed_lateness == 0 {
            // No window past the watermark takes records: none emits here.
            self.add_grouped(input.into_records())?;
        } else {
            for rec in input.into_records() {
                self.add_fixed(rec, &mut out)?;
            }
        }
        Ok(Batch::Records(out))
    }

    fn on_watermark(&mut self, watermark: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        if self.spec.processing_time {
            return Ok(());
        }
        self.advance(watermark, out)
    }

    fn on_processing_time(&mut self, now: i64, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        if !self.spec.processing_time {
            return Ok(());
        }
        self.advance(now, out)
    }

    fn on_end(&mut self, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        self.advance(i64::MAX, out)
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        crate::operators::snapshot_state(&self.name, &mut self.state, dir)
    }
}

/// A window as 16 bytes that sort by start, then end.
fn window_bytes(w: Window) -> [u8; 16] {
    let mut b = [0; 16];
    b[..8].copy_from_slice(&keys::sortable(w.start));
    b[8..].copy_from_slice(&keys::sortable(w.end));
    b
}

/// What a window's timer carries: its kind and the window.
fn timer_payload(kind: u8, w: Window) -> [u8; 17] {
    let mut p = [kind; 17];
    p[1..].copy_from_slice(&window_bytes(w));
    p
}

#[cfg(test)]
mod model_tests;
