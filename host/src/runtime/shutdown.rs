//! Two-phase shutdown (contract C3): `cancel` stops the source and lets the
//! rest drain through cascading closes; `abort` makes every blocked send and
//! receive give up, used only past the shutdown timeout or after a failure.
//! The same handle carries requests for savepoints and plugin swaps to the
//! source.

use super::SwapPoint;
use crate::checkpoint::{RunControl, SavepointRequest};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Shared shutdown flags of one pipeline run.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    inner: Arc<Flags>,
}

#[derive(Debug, Default)]
struct Flags {
    cancelled: AtomicBool,
    aborted: AtomicBool,
    savepoint: Mutex<Option<SavepointRequest>>,
    swaps: Mutex<Vec<Arc<SwapPoint>>>,
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

    /// Asks the source for a savepoint at its next batch.
    pub fn request_savepoint(&self, request: SavepointRequest) {
        *self.inner.savepoint.lock().expect("savepoint lock") = Some(request);
    }

    /// The pending savepoint request, taken.
    pub fn take_savepoint_request(&self) -> Option<SavepointRequest> {
        self.inner.savepoint.lock().expect("savepoint lock").take()
    }

    /// Asks the source to put a swap point after its next batch.
    pub fn request_swap(&self, swap: Arc<SwapPoint>) {
        self.inner.swaps.lock().expect("swap lock").push(swap);
    }

    /// The pending swaps, taken, in the order they were asked for.
    pub fn take_swaps(&self) -> Vec<Arc<SwapPoint>> {
        std::mem::take(&mut *self.inner.swaps.lock().expect("swap lock"))
    }

    /// Whether blocked stages should give up.
    pub fn is_aborted(&self) -> bool {
        self.inner.aborted.load(Ordering::Relaxed)
    }
}

/// The coordinator's requests reach the source through the same flags.
impl RunControl for Shutdown {
    fn stop(&self) {
        self.cancel();
    }

    fn request_savepoint(&self, request: SavepointRequest) {
        Shutdown::request_savepoint(self, request);
    }
}
