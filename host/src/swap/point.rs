//! Swap points: where in the stream an operator starts running a new
//! plugin version, and what that version does from there on — replace the
//! operator's version, run beside it, or take a share of its key groups.

use crate::plugin::LoadedPlugin;
use std::sync::{Arc, Mutex};

/// What a swap point's plugin does.
#[derive(Debug, Clone)]
pub enum SwapKind {
    /// It replaces the current version.
    Replace,
    /// It replaces the current version and, its state version being
    /// higher, migrates every key's state in the background (a few keys
    /// after each batch) rather than each key when next handled.
    Upgrade,
    /// It runs beside the current version, its outputs compared into these
    /// stats and thrown away.
    Shadow(Arc<super::ShadowStats>),
    /// It handles the key groups of these stats' share, the current
    /// version the rest.
    Canary(Arc<super::CanaryStats>),
}

impl SwapKind {
    /// Whether its plugin is a trial beside the operator's version (a
    /// shadow, a canary), not the operator's next version.
    pub fn is_trial(&self) -> bool {
        matches!(self, SwapKind::Shadow(_) | SwapKind::Canary(_))
    }

    /// Its name in logs.
    pub fn name(&self) -> &'static str {
        match self {
            SwapKind::Replace => "swap",
            SwapKind::Upgrade => "swap, migrating every key",
            SwapKind::Shadow(_) => "shadow",
            SwapKind::Canary(_) => "canary",
        }
    }
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
    pub kind: SwapKind,
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
            kind: SwapKind::Replace,
        }
    }

    /// The same point doing `kind`.
    pub fn with_kind(self, kind: SwapKind) -> Self {
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

/// The swap points asked for and not yet put in the stream: the swaps push
/// them, the sources (or the cluster engine) take them before their next
/// batches. Clones share one queue.
#[derive(Debug, Clone, Default)]
pub struct SwapQueue {
    points: Arc<Mutex<Vec<Arc<SwapPoint>>>>,
}

impl SwapQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for `point` to be put in the stream.
    pub fn push(&self, point: Arc<SwapPoint>) {
        self.points.lock().expect("swap queue lock").push(point);
    }

    /// The points asked for, taken, in the order they were asked for.
    pub fn take(&self) -> Vec<Arc<SwapPoint>> {
        std::mem::take(&mut *self.points.lock().expect("swap queue lock"))
    }
}
