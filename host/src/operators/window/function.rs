//! What a window computes: an accumulator per (key, window), grown record by
//! record, merged when session windows join, and turned into output records
//! when the window fires. The accumulator is bytes, kept in the state
//! backend. The built-in aggregates are one implementation; plugins of the
//! `aggregate` and `window` worlds are the others.

use super::aggregate::{Accumulator, AggregateKind, needs_values, number_of};
use super::assigner::Window;
use crate::failure::OperatorError;
use crate::record::Record;
use bytes::Bytes;

/// Why a window function failed.
#[derive(Debug)]
pub enum WindowFnError {
    /// This record (or this window) failed; the operator's failure policy
    /// decides what happens to it.
    Input(String),
    /// The operator cannot go on.
    Fatal(OperatorError),
}

/// The records of one batch that fall into one window of one key, and the
/// window's accumulator before them.
#[derive(Debug)]
pub struct AccumulatorGroup<'a> {
    /// The stored accumulator; `None` for a window's first records.
    pub accumulator: Option<&'a [u8]>,
    /// The records, in arrival order.
    pub records: &'a [&'a Record],
}

/// A window whose result is due: its key, bounds and accumulator.
#[derive(Debug, Clone, Copy)]
pub struct DueWindow<'a> {
    /// The window's key.
    pub key: &'a [u8],
    /// Its bounds.
    pub window: Window,
    /// Its stored accumulator.
    pub accumulator: &'a [u8],
}

/// The results of `due` one window at a time (what
/// [`WindowFunction::emit_all`] does unless a function does better).
pub fn emit_each<F: WindowFunction + ?Sized>(
    function: &mut F,
    due: &[DueWindow<'_>],
    out: &mut Vec<Record>,
) -> Result<Vec<Result<(), String>>, OperatorError> {
    due.iter()
        .map(|d| match function.emit(d.key, d.window, d.accumulator, out) {
            Ok(()) => Ok(Ok(())),
            Err(WindowFnError::Input(reason)) => Ok(Err(reason)),
            Err(WindowFnError::Fatal(e)) => Err(e),
        })
        .collect()
}

/// A window's computation.
pub trait WindowFunction: Send {
    /// The accumulator `acc` (`None` for a window's first record) with `rec`
    /// added.
    fn add(&mut self, acc: Option<&[u8]>, rec: &Record) -> Result<Vec<u8>, WindowFnError>;

    /// Two accumulators as one: `a`'s records first.
    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, WindowFnError>;

    /// An accumulator as a state query shows it: its bytes as text (or
    /// hex) unless the function knows better.
    fn show(&self, acc: &[u8]) -> serde_json::Value {
        crate::state::bytes_json(acc)
    }

    /// Each group's accumulator (`None` for a window's first records) with
    /// the group's records added in order: per group the new accumulator,
    /// or why one of its records failed (the operator then adds that group's
    /// records one at a time, so the failure lands on its record).
    fn add_groups(
        &mut self,
        groups: &[AccumulatorGroup<'_>],
    ) -> Result<Vec<Result<Vec<u8>, String>>, OperatorError> {
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let mut acc: Option<Vec<u8>> = g.accumulator.map(<[u8]>::to_vec);
            let mut failed = None;
            for rec in g.records {
                match self.add(acc.as_deref(), rec) {
                    Ok(next) => acc = Some(next),
                    Err(WindowFnError::Fatal(e)) => return Err(e),
                    Err(WindowFnError::Input(reason)) => {
                        failed = Some(reason);
                        break;
                    }
                }
            }
            out.push(match (failed, acc) {
                (Some(reason), _) => Err(reason),
                (None, Some(acc)) => Ok(acc),
                (None, None) => Err("a group without records".to_owned()),
            });
        }
        Ok(out)
    }

    /// The output of window `w` of `key`, whose accumulator is `acc`.
    fn emit(&mut self, key: &[u8], w: Window, acc: &[u8], out: &mut Vec<Record>)
    -> Result<(), WindowFnError>;

    /// The outputs of the windows that fire together, in order, appended
    /// to `out`: per window `Ok`, or why it failed (and emitted nothing).
    fn emit_all(
        &mut self,
        due: &[DueWindow<'_>],
        out: &mut Vec<Record>,
    ) -> Result<Vec<Result<(), String>>, OperatorError> {
        emit_each(self, due, out)
    }

    /// The plugin versions the function runs (a swap keeps the stored
    /// accumulators); `None`: built-in aggregates, no plugin.
    fn plugin_slot(&mut self) -> Option<&mut crate::swap::PluginSlot> {
        None
    }
}

/// A stored accumulator that does not decode.
pub fn corrupt(operator: &str) -> WindowFnError {
    WindowFnError::Fatal(OperatorError::State {
        operator: operator.to_owned(),
        reason: "a window accumulator in the state backend is corrupt".into(),
    })
}

/// The built-in aggregates (count, sum, min, max, avg) of a number taken
/// from each record; the result is a JSON object with the key and the
/// window's bounds.
pub struct BuiltinAggregates {
    operator: String,
    aggregates: Vec<AggregateKind>,
    field: Option<String>,
}

impl BuiltinAggregates {
    /// `aggregates` of the JSON `field` (dotted path; the value itself as
    /// decimal text when absent) for operator `operator`.
    pub fn new(operator: &str, aggregates: Vec<AggregateKind>, field: Option<String>) -> Self {
        Self {
            operator: operator.to_owned(),
            aggregates,
            field,
        }
    }

    fn decode(&self, b: &[u8]) -> Result<Accumulator, WindowFnError> {
        Accumulator::decode(b).ok_or_else(|| corrupt(&self.operator))
    }
}

impl WindowFunction for BuiltinAggregates {
    fn show(&self, acc: &[u8]) -> serde_json::Value {
        match Accumulator::decode(acc) {
            Some(acc) => acc.to_json(&self.aggregates),
            None => crate::state::bytes_json(acc),
        }
    }

    fn add(&mut self, acc: Option<&[u8]>, rec: &Record) -> Result<Vec<u8>, WindowFnError> {
        let v = if needs_values(&self.aggregates) {
            Some(number_of(rec, self.field.as_deref()).map_err(WindowFnError::Input)?)
        } else {
            None
        };
        let mut acc = acc.map(|b| self.decode(b)).transpose()?.unwrap_or_default();
        acc.add(v);
        Ok(acc.encode())
    }

    fn add_groups(
        &mut self,
        groups: &[AccumulatorGroup<'_>],
    ) -> Result<Vec<Result<Vec<u8>, String>>, OperatorError> {
        // Each group's accumulator is decoded and encoded once.
        let values = needs_values(&self.aggregates);
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let mut acc = match g.accumulator.map(|b| self.decode(b)).transpose() {
                Ok(acc) => acc.unwrap_or_default(),
                Err(WindowFnError::Fatal(e)) => return Err(e),
                Err(WindowFnError::Input(reason)) => {
                    out.push(Err(reason));
                    continue;
                }
            };
            let added = g.records.iter().try_for_each(|rec| {
                let v = values
                    .then(|| number_of(rec, self.field.as_deref()))
                    .transpose()?;
                acc.add(v);
                Ok::<_, String>(())
            });
            out.push(added.map(|()| acc.encode()));
        }
        Ok(out)
    }

    fn merge(&mut self, a: &[u8], b: &[u8]) -> Result<Vec<u8>, WindowFnError> {
        let mut a = self.decode(a)?;
        a.merge(&self.decode(b)?);
        Ok(a.encode())
    }

    fn emit(
        &mut self,
        key: &[u8],
        w: Window,
        acc: &[u8],
        out: &mut Vec<Record>,
    ) -> Result<(), WindowFnError> {
        let acc = self.decode(acc)?;
        let mut json = String::with_capacity(96);
        json.push_str("{\"key\":");
        json.push_str(&serde_json::Value::from(String::from_utf8_lossy(key)).to_string());
        json.push_str(&format!(",\"start\":{},\"end\":{},", w.start, w.end));
        acc.write_json(&self.aggregates, &mut json);
        json.push('}');
        out.push(Record::new(
            Some(Bytes::copy_from_slice(key)),
            json,
            w.max_timestamp(),
        ));
        Ok(())
    }
}
