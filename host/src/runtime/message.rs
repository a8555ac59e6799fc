//! The edge protocol: what travels between stages — batches of records and
//! the in-band markers (watermarks, barriers, swaps, end of stream) that
//! keep their order with the records (contracts C1–C3 in
//! docs/architecture.md).

use crate::batch::Batch;
use crate::plugin::LoadedPlugin;
use crate::record::Record;
use std::sync::Arc;

/// A checkpoint barrier: a consistent cut of the stream with this id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Barrier {
    /// Monotonic checkpoint id.
    pub id: u64,
}

/// A plugin swap: from this point of the stream on, operator `operator`
/// runs `plugin` — in place of its current version, beside it (a shadow),
/// or for a share of its key groups (a canary); records before it saw the
/// previous version. Its state is the host's and stays as it is.
pub struct SwapPoint {
    /// Increases with each swap of a run.
    pub id: u64,
    /// The operator's name.
    pub operator: String,
    /// The new version, compiled and checked against the operator's world.
    pub plugin: Arc<LoadedPlugin>,
    /// The operator's workers that switched so far.
    pub applied: std::sync::atomic::AtomicUsize,
    /// The operator's workers.
    pub workers: usize,
    /// What the plugin does from this point on.
    pub kind: crate::operators::SwapKind,
}

impl SwapPoint {
    /// Swap `id`: `operator`, on `workers` workers, runs `plugin` (as
    /// `kind` says) from this point on.
    pub fn new(id: u64, operator: &str, plugin: Arc<LoadedPlugin>, workers: usize) -> Self {
        Self {
            id,
            operator: operator.to_owned(),
            plugin,
            applied: Default::default(),
            workers,
            kind: crate::operators::SwapKind::Replace,
        }
    }

    /// The same point doing `kind`.
    pub fn with_kind(self, kind: crate::operators::SwapKind) -> Self {
        Self { kind, ..self }
    }

    /// `instances` more of the operator's instances switched; the first
    /// time every worker has, the swap is logged as applied.
    pub fn switched(&self, instances: usize) {
        let before = self
            .applied
            .fetch_add(instances, std::sync::atomic::Ordering::Relaxed);
        if before < self.workers && before + instances >= self.workers {
            let (operator, swap, digest, workers) =
                (&self.operator, self.id, self.plugin.digest(), self.workers);
            use crate::operators::SwapKind;
            match self.kind {
                SwapKind::Shadow(_) => {
                    tracing::info!(%operator, swap, %digest, workers, "plugin shadow running on every worker")
                }
                SwapKind::Canary(_) => {
                    tracing::info!(%operator, swap, %digest, workers, "plugin canary running on every worker")
                }
                SwapKind::Replace | SwapKind::Upgrade => {
                    tracing::info!(%operator, swap, %digest, workers, "plugin swap applied on every worker")
                }
            }
        }
    }
}

impl std::fmt::Debug for SwapPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwapPoint")
            .field("id", &self.id)
            .field("operator", &self.operator)
            .field("digest", &self.plugin.digest())
            .finish()
    }
}

impl PartialEq for SwapPoint {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.operator == other.operator
            && self.plugin.digest() == other.plugin.digest()
    }
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
    Swap(Arc<SwapPoint>),
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
