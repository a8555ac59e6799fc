//! Two-phase shutdown (contract C3): `cancel` stops the source and lets the
//! rest drain through cascading closes; `abort` makes every blocked send and
//! receive give up, used only past the shutdown timeout or after a failure.
//! Savepoints and plugin swaps go through [`Control`](super::Control).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shared shutdown flags of one pipeline run.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    cancelled: AtomicBool,
    aborted: AtomicBool,
}

impl Shutdown {
    /// Fresh flags: neither cancelled nor aborted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Phase one: the source stops producing; downstream drains.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
    }

    /// Phase two: blocked stages give up now.
    pub fn abort(&self) {
        self.cancel();
        self.inner.aborted.store(true, Ordering::SeqCst);
    }

    /// Whether the source should stop.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::Relaxed)
    }

    /// Whether blocked stages should give up.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::Relaxed)
    }
}
