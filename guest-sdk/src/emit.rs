//! Output of a process operator, and the operator as the SDK runs it.

use crate::timers::Timer;
use crate::{Error, Record, Result};

/// Records one call may emit at most.
const MAX_EMITTED: usize = 1_000_000;

/// Where a process operator's records go. A record emitted with
/// [`Emit::emit`] carries the event time of the record or timer being
/// handled.
#[derive(Debug, Default)]
pub struct Emit {
    timestamp: i64,
    out: Vec<Record>,
}

impl Emit {
    /// An empty output at event time `timestamp`.
    pub fn at(timestamp: i64) -> Self {
        Self {
            timestamp,
            out: Vec::new(),
        }
    }

    /// Emits `value` under `key`.
    pub fn emit(&mut self, key: Option<&[u8]>, value: impl Into<Vec<u8>>) -> Result<()> {
        let rec = Record {
            key: key.map(<[u8]>::to_vec),
            value: value.into(),
            timestamp: self.timestamp,
            headers: Vec::new(),
        };
        self.record(rec)
    }

    /// Emits a whole record as it is.
    pub fn record(&mut self, rec: Record) -> Result<()> {
        if self.out.len() >= MAX_EMITTED {
            return Err(Error::new(format!(
                "one call emitted more than {MAX_EMITTED} records"
            )));
        }
        self.out.push(rec);
        Ok(())
    }

    /// What was emitted, in order.
    pub fn into_records(self) -> Vec<Record> {
        self.out
    }
}

/// A process operator as `#[operator(process)]` makes it: its record
/// function and its timer function, each with its state handles bound.
/// [`crate::testing::Harness`] runs one natively.
#[derive(Debug, Clone, Copy)]
pub struct ProcessOperator {
    /// Handles one record.
    pub on_record: fn(Record, &mut Emit) -> Result<()>,
    /// Handles one due timer.
    pub on_timer: fn(Timer, &mut Emit) -> Result<()>,
}

/// A co-process operator as `#[operator(co_process, right = g)]` makes
/// it: its functions for each input's records and for timers, each with
/// its state handles bound. [`crate::testing::Harness::co_process`] runs one
/// natively.
#[derive(Debug, Clone, Copy)]
pub struct CoProcessOperator {
    /// Handles one record of the left input.
    pub on_left: fn(Record, &mut Emit) -> Result<()>,
    /// Handles one record of the right input.
    pub on_right: fn(Record, &mut Emit) -> Result<()>,
    /// Handles one due timer.
    pub on_timer: fn(Timer, &mut Emit) -> Result<()>,
}

/// The timer function of a process operator that has none.
pub fn no_timer(_: Timer, _: &mut Emit) -> Result<()> {
    Ok(())
}
