//! Where a join's results go: straight out as JSON documents of both sides
//! (output.rs), or, with a plugin of the `join` world, through the plugin,
//! which gets each pair as two records and returns what to emit.
//!
//! With a plugin, the pairs an operator call makes wait in the emitter
//! and go to the plugin in one batch call at its end ([`JoinEmitter::flush`]).
//! A pair the plugin fails on goes to the operator's failure policy as its
//! JSON document (what the join would emit without a plugin). A failed
//! batch call is retried pair by pair, so the failure lands on its pair.

use super::output::{Side, joined, unmatched, with_row};
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::wasm::fatal;
use crate::plugin::{CallMode, Outcome, Raw};
use crate::record::Record;
use crate::swap::PluginSlot;
use bytes::Bytes;
use mailer_wire::Writer;

/// A join's output: JSON documents, or a `join`-world plugin's records.
pub struct JoinEmitter {
    plugin: Option<JoinPlugin>,
    pending: Vec<Pair>,
}

/// A join plugin of one worker.
pub struct JoinPlugin {
    /// The operator, for logs and errors.
    pub name: String,
    /// The plugin's versions.
    pub slot: PluginSlot,
    /// How calls cross into it.
    pub mode: CallMode,
    /// Where the pairs it fails on go.
    pub failure: FailureHandler,
}

/// One result of a join, before it is emitted.
struct Pair {
    left: Option<Record>,
    right: Option<Record>,
    /// Whether the right side is a table row (the JSON document then has
    /// `stream` and `table`).
    row: bool,
}

impl Pair {
    /// What the join emits for it without a plugin.
    fn document(&self) -> Record {
        fn side(r: &Record) -> (&[u8], i64) {
            (&r.value[..], r.timestamp)
        }
        match (&self.left, &self.right) {
            (Some(l), right) if self.row => with_row(
                &l.key,
                &l.value,
                l.timestamp,
                right.as_ref().map(|r| &r.value[..]),
            ),
            (Some(l), Some(r)) => joined(&l.key, side(l), side(r)),
            (Some(l), None) => unmatched(Side::Left, &l.key, &l.value, l.timestamp),
            (None, Some(r)) => unmatched(Side::Right, &r.key, &r.value, r.timestamp),
            (None, None) => unreachable!("a pair has a side"),
        }
    }

    fn encode(&self, w: &mut Writer) {
        for side in [&self.left, &self.right] {
            match side {
                None => w.u8(0),
                Some(r) => {
                    w.u8(1);
                    w.record(
                        r.key.as_deref(),
                        &r.value,
                        r.timestamp,
                        r.headers.iter().map(|(n, v)| (n.as_str(), &v[..])),
                    );
                }
            }
        }
    }
}

fn record(key: &Option<Bytes>, value: &[u8], time: i64) -> Record {
    Record::new(key.clone(), Bytes::copy_from_slice(value), time)
}

impl JoinEmitter {
    /// Emits JSON documents.
    pub fn json() -> Self {
        Self {
            plugin: None,
            pending: Vec::new(),
        }
    }

    /// Emits what `plugin` makes of each pair (JSON documents when `None`).
    pub fn new(plugin: Option<JoinPlugin>) -> Self {
        Self {
            plugin,
            pending: Vec::new(),
        }
    }

    /// The join plugin's versions, when it runs one.
    pub fn plugin_slot(&mut self) -> Option<&mut PluginSlot> {
        self.plugin.as_mut().map(|p| &mut p.slot)
    }

    fn push(&mut self, pair: Pair, out: &mut Vec<Record>) {
        match self.plugin {
            None => out.push(pair.document()),
            Some(_) => self.pending.push(pair),
        }
    }

    /// Two records of `key` that joined: `left` and `right` (value, time).
    pub fn pair(
        &mut self,
        key: &Option<Bytes>,
        left: (&[u8], i64),
        right: (&[u8], i64),
        out: &mut Vec<Record>,
    ) {
        if self.plugin.is_none() {
            return out.push(joined(key, left, right));
        }
        let pair = Pair {
            left: Some(record(key, left.0, left.1)),
            right: Some(record(key, right.0, right.1)),
            row: false,
        };
        self.pending.push(pair);
    }

    /// A record of `side` that never joined.
    pub fn alone(&mut self, side: Side, key: &Option<Bytes>, value: &[u8], time: i64, out: &mut Vec<Record>) {
        if self.plugin.is_none() {
            return out.push(unmatched(side, key, value, time));
        }
        let (left, right) = side.order(Some(record(key, value, time)), None);
        self.push(
            Pair {
                left,
                right,
                row: false,
            },
            out,
        );
    }

    /// A stream record (`value` under `key` at `time`) with the table row
    /// of `row_key` (`None`: there is none).
    pub fn row(
        &mut self,
        key: &Option<Bytes>,
        value: &[u8],
        time: i64,
        row_key: &[u8],
        row: Option<&[u8]>,
        out: &mut Vec<Record>,
    ) {
        if self.plugin.is_none() {
            return out.push(with_row(key, value, time, row));
        }
        let row = row.map(|r| record(&Some(Bytes::copy_from_slice(row_key)), r, time));
        self.push(
            Pair {
                left: Some(record(key, value, time)),
                right: row,
                row: true,
            },
            out,
        );
    }

    /// Emits the pairs waiting for the plugin into `out`.
    pub fn flush(&mut self, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        let Some(p) = &mut self.plugin else {
            return Ok(());
        };
        if self.pending.is_empty() {
            return Ok(());
        }
        let pairs = std::mem::take(&mut self.pending);
        if p.mode == CallMode::Batch {
            let mut w = Writer::batch(pairs.len());
            pairs.iter().for_each(|pair| pair.encode(&mut w));
            let called = p
                .slot
                .instance()
                .batch_outcomes(&w.finish(), pairs.len())
                .map_err(|e| fatal(&p.name, e))?;
            match called {
                Ok(outcomes) => {
                    let mut spans = Vec::new();
                    for (pair, raw) in pairs.iter().zip(outcomes.items()) {
                        match *raw {
                            Raw::Records { first, count } => {
                                spans.extend_from_slice(outcomes.nested(first, count))
                            }
                            Raw::Failed(m) => p.failure.fail(pair.document(), &outcomes.message(m))?,
                            _ => unreachable!("parsed as the join world's output"),
                        }
                    }
                    out.extend(Batch::Encoded(outcomes.encoded(spans)).into_records());
                    return Ok(());
                }
                Err(reason) => {
                    tracing::warn!(operator = %p.name, %reason, pairs = pairs.len(),
                        "call failed; retrying its pairs one by one");
                }
            }
        }
        for pair in pairs {
            let outcome = match p.mode {
                CallMode::Record => p
                    .slot
                    .instance()
                    .one_pair_outcome(pair.left.as_ref(), pair.right.as_ref()),
                CallMode::Batch => {
                    let mut w = Writer::batch(1);
                    pair.encode(&mut w);
                    p.slot
                        .instance()
                        .batch_outcomes(&w.finish(), 1)
                        .map(|r| r.and_then(|o| o.owned(0)))
                }
            }
            .map_err(|e| fatal(&p.name, e))?;
            match outcome {
                Ok(Outcome::Records(records)) => out.extend(records),
                Ok(_) => unreachable!("decoded by the join world"),
                Err(reason) => p.failure.fail(pair.document(), &reason)?,
            }
        }
        Ok(())
    }
}
