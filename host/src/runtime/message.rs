//! The edge protocol: what travels between stages — batches of records and
//! the in-band markers (watermarks, barriers, swaps, end of stream) that
//! keep their order with the records (contracts C1–C3 in
//! docs/architecture.md).

use crate::batch::Batch;
use crate::record::Record;
use std::sync::Arc;

/// A checkpoint barrier: a consistent cut of the stream with this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Barrier {
    /// Monotonic checkpoint id.
    pub id: u64,
}

/// What travels on an edge: a batch of records or an in-band marker.
///
/// Markers are broadcast to every worker of a parallel stage and re-aligned at
/// its exit (contract C1): each leaves the stage once, after all workers
/// delivered it, and no record overtakes a pending barrier.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// Records in stream order.
    Records(Batch),
    /// Records of input `n` of a stage whose first operator tells its
    /// inputs apart (a join: 0 left, 1 right), in that input's order.
    Input(usize, Batch),
    /// Records of output `n` of a stage whose last operator has several (a
    /// branch: one per branch, then the default); the stage's outlet hands
    /// them to the readers of that output as [`Message::Records`].
    Output(usize, Batch),
    /// No record with an event time below this (ms) will follow.
    Watermark(i64),
    /// The wall clock (ms) as the source saw it: processing-time timers up to
    /// it fire. Sent periodically when an operator works on processing time.
    ProcessingTime(i64),
    /// A checkpoint barrier.
    Barrier(Barrier),
    /// A plugin swap.
    Swap(Arc<crate::swap::SwapPoint>),
    /// A state query: each worker of its operator answers as it passes.
    Query(Arc<crate::state::StateQuery>),
    /// The sources feeding global tables caught up with what their inputs
    /// held when the run started (they are read first, alone): aligned like
    /// a barrier, it keeps every record after it behind every table change
    /// before it, so a join sees its global table loaded.
    TablesLoaded,
    /// The input is complete (a bounded source ended). Unlike a plain close
    /// of the edge (a drain after cancel), this lets event time run to its end.
    EndOfStream,
}

impl Message {
    /// A message carrying these decoded records.
    pub fn records(records: Vec<Record>) -> Self {
        Message::Records(Batch::Records(records))
    }

    /// The records it carries, if it is not a marker.
    pub fn batch(&self) -> Option<&Batch> {
        match self {
            Message::Records(b) | Message::Input(_, b) | Message::Output(_, b) => Some(b),
            _ => None,
        }
    }

    /// Whether this message is a marker that must be aligned across workers.
    pub fn is_aligned_marker(&self) -> bool {
        matches!(
            self,
            Message::Barrier(_)
                | Message::Swap(_)
                | Message::Query(_)
                | Message::TablesLoaded
                | Message::EndOfStream
        )
    }
}
