//! The host's keyed state and timers as the SDK reaches them: the WIT
//! imports inside a plugin, the in-memory stand-in of [`crate::testing`] on
//! the host target.

#[cfg(target_arch = "wasm32")]
mod imports {
    use crate::timers::TimeDomain;
    use crate::wit::process::mailer::plugin::{state, timers};

    pub fn get(name: &str) -> Option<Vec<u8>> {
        state::get(name)
    }
    pub fn set(name: &str, value: &[u8]) {
        state::set(name, value)
    }
    pub fn clear(name: &str) {
        state::clear(name)
    }
    pub fn list_get(name: &str) -> Vec<Vec<u8>> {
        state::list_get(name)
    }
    pub fn list_append(name: &str, item: &[u8]) {
        state::list_append(name, item)
    }
    pub fn map_get(name: &str, key: &[u8]) -> Option<Vec<u8>> {
        state::map_get(name, key)
    }
    pub fn map_set(name: &str, key: &[u8], value: &[u8]) {
        state::map_set(name, key, value)
    }
    pub fn map_remove(name: &str, key: &[u8]) {
        state::map_remove(name, key)
    }
    pub fn map_entries(name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        state::map_entries(name)
    }

    fn wit(d: TimeDomain) -> timers::TimeDomain {
        match d {
            TimeDomain::EventTime => timers::TimeDomain::EventTime,
            TimeDomain::ProcessingTime => timers::TimeDomain::ProcessingTime,
        }
    }
    pub fn register(d: TimeDomain, at: i64) {
        timers::register(wit(d), at)
    }
    pub fn delete(d: TimeDomain, at: i64) {
        timers::delete(wit(d), at)
    }
    pub fn watermark() -> i64 {
        timers::watermark()
    }
    pub fn now() -> i64 {
        timers::now()
    }
}

#[cfg(target_arch = "wasm32")]
pub(crate) use imports::*;

#[cfg(not(target_arch = "wasm32"))]
pub(crate) use crate::testing::fake::*;
