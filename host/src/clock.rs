//! The wall clock, in one leaf module every layer may use.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A clock in ms since the Unix epoch (tests put in their own).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The wall clock, ms since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Milliseconds of a duration, at least 1 (a window size, a time-to-live).
pub fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}
