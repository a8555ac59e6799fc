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
    /// The shutdown of the whole process, when these flags are one run's.
    parent: Option<Arc<Flags>>,
}

impl Flags {
    fn cancelled(&self) -> bool {
        self.cancelled.load(Ordering::Relaxed) || self.parent.as_ref().is_some_and(|p| p.cancelled())
    }

    fn aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed) || self.parent.as_ref().is_some_and(|p| p.aborted())
    }
}

impl Shutdown {
    /// Fresh flags: neither cancelled nor aborted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Flags for one run under these: cancelling or aborting these reaches
    /// the run; the run's own failure, which cancels it, leaves these be
    /// (a restarted run starts uncancelled).
    pub fn for_one_run(&self) -> Self {
        Self {
            inner: Arc::new(Flags {
                parent: Some(self.inner.clone()),
                ..Flags::default()
            }),
        }
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
        self.inner.cancelled()
    }

    /// Whether blocked stages should give up.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_s_flags_follow_the_process_s_but_not_the_other_way() {
        let process = Shutdown::new();
        let run = process.for_one_run();
        run.cancel();
        assert!(run.is_cancelled() && !process.is_cancelled());
        let next = process.for_one_run();
        assert!(!next.is_cancelled());
        process.abort();
        assert!(next.is_cancelled() && next.is_aborted());
    }
}
