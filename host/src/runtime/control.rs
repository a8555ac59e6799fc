//! The control channel of a run: savepoints, plugin swaps and state queries
//! asked of the running pipeline, which the source stage turns into markers. Separate
//! from [`Shutdown`], which only stops it.

use super::Shutdown;
use crate::checkpoint::{RunControl, SavepointRequest};
use crate::state::StateQuery;
use crate::swap::{SwapPoint, SwapQueue};
use std::sync::{Arc, Mutex};

/// What a running pipeline is asked to do besides stopping.
#[derive(Debug, Clone, Default)]
pub struct Control {
    inner: Arc<Requests>,
}

#[derive(Debug, Default)]
struct Requests {
    savepoint: Mutex<Option<SavepointRequest>>,
    swaps: SwapQueue,
    queries: Mutex<Vec<Arc<StateQuery>>>,
    /// Whether the sources stopped taking queries (their input ended).
    queries_closed: std::sync::atomic::AtomicBool,
}

impl Control {
    /// A channel with nothing asked yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the sources for a savepoint before their next batches.
    pub fn request_savepoint(&self, request: SavepointRequest) {
        *self.inner.savepoint.lock().expect("savepoint lock") = Some(request);
    }

    /// The pending savepoint request, taken.
    pub fn take_savepoint_request(&self) -> Option<SavepointRequest> {
        self.inner.savepoint.lock().expect("savepoint lock").take()
    }

    /// Where the swaps ask the sources to put swap points before their
    /// next batches.
    pub fn swap_queue(&self) -> SwapQueue {
        self.inner.swaps.clone()
    }

    /// Asks the sources to put `swap` in the stream before their next
    /// batches (what the swaps do through [`Control::swap_queue`]).
    pub fn request_swap(&self, swap: Arc<SwapPoint>) {
        self.inner.swaps.push(swap);
    }

    /// The pending swaps, taken, in the order they were asked for.
    pub fn take_swaps(&self) -> Vec<Arc<SwapPoint>> {
        self.inner.swaps.take()
    }

    /// Asks the sources to put a state query before their next batches;
    /// false when they no longer take any (their input ended).
    pub fn request_query(&self, query: Arc<StateQuery>) -> bool {
        let mut queries = self.inner.queries.lock().expect("query lock");
        if self
            .inner
            .queries_closed
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return false;
        }
        queries.push(query);
        true
    }

    /// The sources take no more queries: those asked are dropped, the
    /// ones to come refused.
    pub fn close_queries(&self) {
        let mut queries = self.inner.queries.lock().expect("query lock");
        self.inner
            .queries_closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        queries.clear();
    }

    /// The pending state queries, taken.
    pub fn take_queries(&self) -> Vec<Arc<StateQuery>> {
        std::mem::take(&mut *self.inner.queries.lock().expect("query lock"))
    }
}

/// What the checkpoint coordinator may ask of a run: to stop it (after a
/// stop-with-savepoint) or to take another savepoint (one that failed).
#[derive(Debug, Clone)]
pub struct RunHandles {
    /// Stops the run.
    pub shutdown: Shutdown,
    /// Asks it for savepoints.
    pub control: Control,
}

impl RunControl for RunHandles {
    fn stop(&self) {
        self.shutdown.cancel();
    }

    fn request_savepoint(&self, request: SavepointRequest) {
        self.control.request_savepoint(request);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::StateRequest;

    #[test]
    fn queries_are_refused_once_the_sources_stopped_taking_them() {
        let control = Control::new();
        let query = || Arc::new(StateQuery::new("counts", StateRequest::Key(b"k".to_vec())));
        assert!(control.request_query(query()));
        control.close_queries();
        assert!(control.take_queries().is_empty(), "the pending one is dropped");
        assert!(!control.request_query(query()));
    }
}
