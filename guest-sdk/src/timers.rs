//! Timers of the current key, and what a timer callback is told.

use crate::host;
use crate::keyed::Named;

/// Which clock a timer follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TimeDomain {
    /// Event time: the timer fires when the watermark passes it.
    EventTime,
    /// Processing time: the timer fires when the wall clock passes it.
    ProcessingTime,
}

/// A due timer, as the `#[operator(timer)]` function receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timer {
    /// The key it was registered for.
    pub key: Option<Vec<u8>>,
    /// Its clock.
    pub domain: TimeDomain,
    /// Its time, ms.
    pub at: i64,
}

impl Timer {
    /// The key as bytes, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }
}

/// The current key's timers. Registering the same time twice gives one
/// timer; each fires once; a deleted one never fires.
#[derive(Debug, Default)]
pub struct Timers {
    _private: (),
}

impl Named for Timers {
    fn named(_: &'static str) -> Self {
        Self::default()
    }
}

impl Timers {
    /// Fires once the watermark reaches `at` (ms).
    pub fn register_event_time(&mut self, at: i64) {
        host::register(TimeDomain::EventTime, at);
    }

    /// Cancels the event-time timer at `at`.
    pub fn delete_event_time(&mut self, at: i64) {
        host::delete(TimeDomain::EventTime, at);
    }

    /// Fires once the wall clock reaches `at` (ms since the Unix epoch).
    pub fn register_processing_time(&mut self, at: i64) {
        host::register(TimeDomain::ProcessingTime, at);
    }

    /// Cancels the processing-time timer at `at`.
    pub fn delete_processing_time(&mut self, at: i64) {
        host::delete(TimeDomain::ProcessingTime, at);
    }

    /// The current event-time watermark (`i64::MIN` before the first).
    pub fn watermark(&self) -> i64 {
        host::watermark()
    }

    /// The current processing time, ms since the Unix epoch.
    pub fn now(&self) -> i64 {
        host::now()
    }
}
