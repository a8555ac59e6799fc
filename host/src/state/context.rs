//! The named states and timers of a keyed process function, scoped by the
//! host to one key at a time: what a process plugin reaches through its
//! imports, kept in the operator's [`KeyedState`].
//!
//! A call sees its own writes at once, but they reach the backend only when
//! the call succeeds ([`KeyedContext::commit`]); a trap, a missed deadline
//! or a failed record discards them ([`KeyedContext::abort`]), so a record
//! retried alone never counts twice.
//!
//! ```text
//! entry := keyed(key_group, op, key) name_len:u8 name kind:u8 sub…
//! kind  := 0 value | 1 list (sub: none for the length, seq:u64 per item) | 2 map (sub: map key)
//! ```
//! A state with a time-to-live stores `expires_at:i64` before each value.

mod migration;

pub use migration::{MigrationCursor, StaleValue, StateVersions};

use super::{Answer, KeyEntries, KeyedState, StateError, StateRequest, TimeDomain, bytes_json};
use crate::clock::Clock;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

const VALUE: u8 = 0;
const LIST: u8 = 1;
const MAP: u8 = 2;

/// The entries of a map state: (key, value) pairs in key order.
pub type MapEntries = Vec<(Vec<u8>, Vec<u8>)>;

/// Why a state call failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyedError {
    /// The backend failed: the operator stops.
    #[error(transparent)]
    Backend(#[from] StateError),
    /// The function called state outside a record or timer, or with a bad
    /// argument: the call fails.
    #[error("{0}")]
    Refused(String),
}

/// What one entry of a call's writes (or of a scan) costs the host beyond
/// its key's and value's bytes: the two vectors, their allocations and the
/// map's node, rounded up. Counted so that many tiny entries cannot hold
/// several times the call's limit in host memory.
const ENTRY_OVERHEAD: usize = 96;

/// The host memory one entry of `key` and `value` bytes is counted as.
fn entry_cost(key: usize, value: usize) -> usize {
    key.saturating_add(value).saturating_add(ENTRY_OVERHEAD)
}

/// A call's changes at one moment (see [`KeyedContext::pending_changes`]).
#[derive(Debug, Clone)]
pub struct PendingChanges {
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    bytes: usize,
    earliest: [Option<i64>; 2],
    mark_on_write: Option<u32>,
}

/// One keyed process operator's state, timers and the key in scope.
pub struct KeyedContext {
    state: KeyedState,
    ttl: HashMap<String, i64>,
    clock: Clock,
    scope: Option<(u16, Vec<u8>)>,
    now: i64,
    watermark: i64,
    pending: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    /// Bytes written into `pending` since the last commit or abort, and the
    /// most it may hold: the writes of one call are host memory until the
    /// call succeeds.
    pending_bytes: usize,
    call_limit: usize,
    earliest_timer: [Option<i64>; 2],
    pending_earliest: [Option<i64>; 2],
    backend_error: Option<StateError>,
    /// The state version to mark the key in scope with if the call writes
    /// its state (a key migrated with nothing stored).
    mark_on_write: Option<u32>,
}

impl KeyedContext {
    /// The named states and timers kept in `state`, with a time-to-live in
    /// ms per state name in `ttl`, reading processing time from `clock`.
    pub fn new(state: KeyedState, ttl: HashMap<String, i64>, clock: Clock) -> Self {
        Self {
            state,
            ttl,
            clock,
            scope: None,
            now: 0,
            watermark: i64::MIN,
            pending: BTreeMap::new(),
            pending_bytes: 0,
            call_limit: usize::MAX,
            earliest_timer: [None; 2],
            pending_earliest: [None; 2],
            backend_error: None,
            mark_on_write: None,
        }
    }

    /// The same context refusing a call's state writes past `bytes` in all
    /// (keys and values; so one value is at most `bytes` too), and a read of
    /// a list or map state larger than `bytes`: the call fails, its writes
    /// are discarded.
    pub fn with_call_limit(mut self, bytes: usize) -> Self {
        self.call_limit = bytes;
        self
    }

    /// Scopes the next calls to `key`, at the current processing time.
    pub fn enter(&mut self, key: &[u8]) {
        self.scope = Some((self.state.key_group(key), key.to_vec()));
        self.now = (self.clock)();
        self.mark_on_write = None;
    }

    /// Sets the event-time watermark the plugin sees.
    pub fn set_watermark(&mut self, watermark: i64) {
        self.watermark = watermark;
    }

    /// The current watermark.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// The processing time of the call in scope.
    pub fn now(&self) -> i64 {
        self.now
    }

    /// Writes the call's changes to the backend and leaves the key's scope.
    pub fn commit(&mut self) -> Result<(), StateError> {
        if let Some((mark, version)) = self.take_mark_on_write() {
            self.pending.insert(mark, Some(version));
        }
        self.scope = None;
        self.pending_bytes = 0;
        for (committed, pending) in self.earliest_timer.iter_mut().zip(&mut self.pending_earliest) {
            *committed = min_of(*committed, pending.take());
        }
        for (k, v) in std::mem::take(&mut self.pending) {
            match v {
                Some(v) => self.state.put(&k, &v)?,
                None => self.state.delete(&k)?,
            }
        }
        Ok(())
    }

    /// Writes the committed state into `dir` (between calls, nothing is
    /// pending).
    pub fn snapshot(&mut self, dir: &std::path::Path) -> Result<(), StateError> {
        debug_assert!(self.pending.is_empty(), "a snapshot between calls");
        self.state.snapshot(dir)
    }

    /// The call's changes so far, to go back to with
    /// [`undo_to`](Self::undo_to) (a shadow's calls, which keep none).
    pub fn pending_changes(&self) -> PendingChanges {
        PendingChanges {
            pending: self.pending.clone(),
            bytes: self.pending_bytes,
            earliest: self.pending_earliest,
            mark_on_write: self.mark_on_write,
        }
    }

    /// Goes back to the call's changes as `to` was taken.
    pub fn undo_to(&mut self, to: PendingChanges) {
        self.pending = to.pending;
        self.pending_bytes = to.bytes;
        self.pending_earliest = to.earliest;
        self.mark_on_write = to.mark_on_write;
    }

    /// Discards the call's changes and leaves the key's scope.
    pub fn abort(&mut self) {
        self.scope = None;
        self.mark_on_write = None;
        self.pending.clear();
        self.pending_bytes = 0;
        self.pending_earliest = [None; 2];
    }

    /// A backend failure during the last call, which trapped it.
    pub fn take_backend_error(&mut self) -> Option<StateError> {
        self.backend_error.take()
    }

    /// What the failed call is told; a backend failure is also kept for
    /// the operator ([`take_backend_error`](Self::take_backend_error)).
    pub fn fail(&mut self, e: KeyedError) -> String {
        let message = e.to_string();
        if let KeyedError::Backend(e) = e {
            self.backend_error = Some(e);
        }
        message
    }

    fn scope(&self) -> Result<&(u16, Vec<u8>), KeyedError> {
        self.scope.as_ref().ok_or_else(|| {
            KeyedError::Refused(
                "state and timers are only available while handling a record or a timer".into(),
            )
        })
    }

    fn prefix(&self, name: &str, kind: u8) -> Result<Vec<u8>, KeyedError> {
        let len = u8::try_from(name.len())
            .map_err(|_| KeyedError::Refused(format!("state name `{name:.40}…` is longer than 255 bytes")))?;
        let (kg, key) = self.scope()?;
        let mut k = self.state.entry(*kg, key, &[]);
        k.push(len);
        k.extend_from_slice(name.as_bytes());
        k.push(kind);
        Ok(k)
    }

    fn read_raw(&self, k: &[u8]) -> Result<Option<Vec<u8>>, KeyedError> {
        match self.pending.get(k) {
            Some(v) => Ok(v.clone()),
            None => Ok(self.state.get(k)?),
        }
    }

    /// Every entry under `prefix`, the call's changes applied; with
    /// `values` false, the keys only (values left empty). A state whose
    /// entries take more than the call's limit is refused, not read: the
    /// plugin could not take it into its memory anyway.
    fn scan_raw(&self, prefix: &[u8], values: bool) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, KeyedError> {
        let mut found = BTreeMap::new();
        let mut bytes = 0usize;
        self.state.scan_prefix(prefix, &mut |k, v| {
            if self.pending.contains_key(k) {
                return true; // the call's own write stands for it
            }
            let v = if values { v.to_vec() } else { Vec::new() };
            bytes = bytes.saturating_add(entry_cost(k.len(), v.len()));
            found.insert(k.to_vec(), v);
            bytes <= self.call_limit
        })?;
        if bytes > self.call_limit {
            return Err(KeyedError::Refused(format!(
                "the state holds more than {} MiB (the operator's `memory_limit_mb`): too much for one call",
                self.call_limit >> 20
            )));
        }
        for (k, v) in self
            .pending
            .range(prefix.to_vec()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            match v {
                Some(v) => found.insert(k.clone(), v.clone()),
                None => found.remove(k),
            };
        }
        Ok(found)
    }

    fn write(&mut self, k: Vec<u8>, v: Option<Vec<u8>>) -> Result<(), KeyedError> {
        let size = entry_cost(k.len(), v.as_ref().map_or(0, Vec::len));
        if self.pending_bytes.saturating_add(size) > self.call_limit {
            return Err(KeyedError::Refused(format!(
                "the call wrote more than {} MiB of state (the operator's `memory_limit_mb`): its writes are discarded",
                self.call_limit >> 20
            )));
        }
        self.pending_bytes += size;
        self.pending.insert(k, v);
        Ok(())
    }

    /// A stored value as the plugin sees it: `None` once expired.
    fn unwrap_ttl(&self, name: &str, stored: Vec<u8>) -> Option<Vec<u8>> {
        if !self.ttl.contains_key(name) {
            return Some(stored);
        }
        let expires = i64::from_be_bytes(stored.get(..8)?.try_into().ok()?);
        (expires > self.now).then(|| stored[8..].to_vec())
    }

    fn wrap_ttl(&self, name: &str, value: Vec<u8>) -> Vec<u8> {
        match self.ttl.get(name) {
            None => value,
            Some(ttl) => {
                let mut v = self.now.saturating_add(*ttl).to_be_bytes().to_vec();
                v.extend_from_slice(&value);
                v
            }
        }
    }

    /// What `request` finds in the named states: each key's as `{name:
    /// value}`, a list state as an array, a map state as an object (keys
    /// that are not UTF-8 as hex); values past their time-to-live (as of
    /// the last record or timer) left out.
    pub fn query(&self, request: &StateRequest) -> Result<Answer, StateError> {
        super::answer(&self.state, request, |entries| Some(self.view(entries)))
    }

    fn view(&self, entries: &KeyEntries) -> Value {
        let mut states = serde_json::Map::new();
        for (suffix, stored) in entries {
            let Some((name, kind, sub)) = parse_suffix(suffix) else {
                continue;
            };
            let Some(value) = self.unwrap_ttl(name, stored.clone()) else {
                continue;
            };
            let value = bytes_json(&value);
            match kind {
                VALUE => {
                    states.insert(name.to_owned(), value);
                }
                // The list's length entry has no sequence number.
                LIST if !sub.is_empty() => {
                    let list = states.entry(name).or_insert_with(|| Value::Array(Vec::new()));
                    if let Value::Array(items) = list {
                        items.push(value);
                    }
                }
                MAP => {
                    let map = states
                        .entry(name)
                        .or_insert_with(|| Value::Object(Default::default()));
                    if let Value::Object(entries) = map {
                        let key = String::from_utf8(sub.to_vec()).unwrap_or_else(|_| hex::encode(sub));
                        entries.insert(key, value);
                    }
                }
                _ => {}
            }
        }
        Value::Object(states)
    }

    /// Value state `name`.
    pub fn get(&self, name: &str) -> Result<Option<Vec<u8>>, KeyedError> {
        let stored = self.read_raw(&self.prefix(name, VALUE)?)?;
        Ok(stored.and_then(|v| self.unwrap_ttl(name, v)))
    }

    /// Sets value state `name`.
    pub fn set(&mut self, name: &str, value: Vec<u8>) -> Result<(), KeyedError> {
        let k = self.prefix(name, VALUE)?;
        let v = self.wrap_ttl(name, value);
        self.write(k, Some(v))?;
        Ok(())
    }

    /// Empties state `name`, whatever its kind.
    pub fn clear(&mut self, name: &str) -> Result<(), KeyedError> {
        let mut all = self.prefix(name, VALUE)?;
        all.pop();
        for k in self.scan_raw(&all, false)?.into_keys() {
            self.write(k, None)?;
        }
        Ok(())
    }

    /// The live items of list state `name`, oldest first.
    pub fn list_get(&self, name: &str) -> Result<Vec<Vec<u8>>, KeyedError> {
        let prefix = self.prefix(name, LIST)?;
        let entries = self.scan_raw(&prefix, true)?;
        Ok(entries
            .into_iter()
            .filter(|(k, _)| k.len() > prefix.len())
            .filter_map(|(_, v)| self.unwrap_ttl(name, v))
            .collect())
    }

    /// Appends to list state `name`.
    pub fn list_append(&mut self, name: &str, item: Vec<u8>) -> Result<(), KeyedError> {
        let prefix = self.prefix(name, LIST)?;
        let next = self
            .read_raw(&prefix)?
            .and_then(|n| Some(u64::from_be_bytes(n.get(..8)?.try_into().ok()?)))
            .unwrap_or(0);
        let mut k = prefix.clone();
        k.extend_from_slice(&next.to_be_bytes());
        let v = self.wrap_ttl(name, item);
        self.write(k, Some(v))?;
        self.write(prefix, Some((next + 1).to_be_bytes().to_vec()))?;
        Ok(())
    }

    fn map_key(&self, name: &str, key: &[u8]) -> Result<Vec<u8>, KeyedError> {
        let mut k = self.prefix(name, MAP)?;
        k.extend_from_slice(key);
        Ok(k)
    }

    /// The value at `key` of map state `name`.
    pub fn map_get(&self, name: &str, key: &[u8]) -> Result<Option<Vec<u8>>, KeyedError> {
        let stored = self.read_raw(&self.map_key(name, key)?)?;
        Ok(stored.and_then(|v| self.unwrap_ttl(name, v)))
    }

    /// Sets `key` of map state `name`.
    pub fn map_set(&mut self, name: &str, key: &[u8], value: Vec<u8>) -> Result<(), KeyedError> {
        let k = self.map_key(name, key)?;
        let v = self.wrap_ttl(name, value);
        self.write(k, Some(v))?;
        Ok(())
    }

    /// Removes `key` from map state `name`.
    pub fn map_remove(&mut self, name: &str, key: &[u8]) -> Result<(), KeyedError> {
        let k = self.map_key(name, key)?;
        self.write(k, None)?;
        Ok(())
    }

    /// The live entries of map state `name`, in key order.
    pub fn map_entries(&self, name: &str) -> Result<MapEntries, KeyedError> {
        let prefix = self.prefix(name, MAP)?;
        let entries = self.scan_raw(&prefix, true)?;
        Ok(entries
            .into_iter()
            .filter_map(|(k, v)| Some((k[prefix.len()..].to_vec(), self.unwrap_ttl(name, v)?)))
            .collect())
    }

    fn timer_key(&self, domain: TimeDomain, at: i64) -> Result<Vec<u8>, KeyedError> {
        let (kg, key) = self.scope()?;
        Ok(self.state.timer(domain, at, *kg, key, &[]))
    }

    /// Registers a timer of the key in scope.
    pub fn register_timer(&mut self, domain: TimeDomain, at: i64) -> Result<(), KeyedError> {
        let k = self.timer_key(domain, at)?;
        self.write(k, Some(Vec::new()))?;
        let earliest = &mut self.pending_earliest[domain.index()];
        *earliest = min_of(*earliest, Some(at));
        Ok(())
    }

    /// Deletes a timer of the key in scope.
    pub fn delete_timer(&mut self, domain: TimeDomain, at: i64) -> Result<(), KeyedError> {
        let k = self.timer_key(domain, at)?;
        self.write(k, None)?;
        Ok(())
    }

    /// The earliest timer of `domain` committed since the last call to this,
    /// if any.
    pub fn take_earliest_timer(&mut self, domain: TimeDomain) -> Option<i64> {
        self.earliest_timer[domain.index()].take()
    }

    /// Removes and returns the timers of `domain` in `from..=upto`, in time
    /// order: `(time, key)`.
    pub fn take_due_timers(
        &mut self,
        domain: TimeDomain,
        from: i64,
        upto: i64,
    ) -> Result<Vec<(i64, Vec<u8>)>, StateError> {
        let due = self.state.take_due_timers(domain, from, upto)?;
        Ok(due.into_iter().map(|t| (t.time, t.key().to_vec())).collect())
    }
}

/// The state name, kind and the rest of an entry's suffix (`name_len name
/// kind sub…`).
fn parse_suffix(suffix: &[u8]) -> Option<(&str, u8, &[u8])> {
    let len = *suffix.first()? as usize;
    let name = std::str::from_utf8(suffix.get(1..1 + len)?).ok()?;
    let kind = *suffix.get(1 + len)?;
    Some((name, kind, &suffix[2 + len..]))
}

fn min_of(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryBackend;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    fn context(ttl: &[(&str, i64)]) -> (KeyedContext, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(1_000));
        let clock = now.clone();
        let ttl = ttl.iter().map(|(n, t)| ((*n).to_owned(), *t)).collect();
        let ctx = KeyedContext::new(
            KeyedState::new(Box::new(MemoryBackend::default()), 3, 128),
            ttl,
            Arc::new(move || clock.load(Ordering::Relaxed)),
        );
        (ctx, now)
    }

    #[test]
    fn each_key_sees_only_its_own_state() {
        let (mut ctx, _) = context(&[]);
        ctx.enter(b"a");
        ctx.set("n", b"1".to_vec()).unwrap();
        ctx.list_append("l", b"x".to_vec()).unwrap();
        ctx.map_set("m", b"k", b"v".to_vec()).unwrap();
        ctx.commit().unwrap();
        ctx.enter(b"b");
        assert_eq!(ctx.get("n").unwrap(), None);
        assert!(ctx.list_get("l").unwrap().is_empty());
        assert!(ctx.map_entries("m").unwrap().is_empty());
        ctx.abort();
        ctx.enter(b"a");
        assert_eq!(ctx.get("n").unwrap(), Some(b"1".to_vec()));
        assert_eq!(ctx.list_get("l").unwrap(), vec![b"x".to_vec()]);
        assert_eq!(ctx.map_get("m", b"k").unwrap(), Some(b"v".to_vec()));
    }

    #[test]
    fn a_query_shows_every_kind_of_state_and_leaves_out_expired_values() {
        let (mut ctx, now) = context(&[("seen", 100)]);
        ctx.enter(b"a");
        ctx.set("n", b"1".to_vec()).unwrap();
        ctx.set("seen", b"yes".to_vec()).unwrap();
        ctx.list_append("l", b"x".to_vec()).unwrap();
        ctx.list_append("l", b"y".to_vec()).unwrap();
        ctx.map_set("m", b"k", b"v".to_vec()).unwrap();
        ctx.commit().unwrap();
        let shown = |ctx: &KeyedContext| ctx.query(&StateRequest::Key(b"a".to_vec())).unwrap();
        assert_eq!(
            shown(&ctx),
            vec![(
                b"a".to_vec(),
                serde_json::json!({"n": "1", "seen": "yes", "l": ["x", "y"], "m": {"k": "v"}})
            )]
        );
        now.store(2_000, Ordering::Relaxed);
        ctx.enter(b"b");
        ctx.commit().unwrap();
        assert_eq!(shown(&ctx)[0].1["seen"], Value::Null, "expired");
        assert!(ctx.query(&StateRequest::Key(b"b".to_vec())).unwrap().is_empty());
    }

    #[test]
    fn names_that_look_like_other_entries_do_not_alias() {
        let (mut ctx, _) = context(&[]);
        ctx.enter(b"a");
        ctx.set("n", b"value".to_vec()).unwrap();
        // A map key that spells a list entry of the same name stays a map entry.
        ctx.map_set("n", &[1, 0, 0, 0, 0, 0, 0, 0, 0], b"map".to_vec())
            .unwrap();
        assert_eq!(ctx.list_get("n").unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(ctx.get("n").unwrap(), Some(b"value".to_vec()));
        assert_eq!(ctx.get("n\u{0}").unwrap(), None);
    }

    #[test]
    fn lists_keep_order_and_clear_empties_every_kind() {
        let (mut ctx, _) = context(&[]);
        ctx.enter(b"k");
        for item in ["a", "b", "c"] {
            ctx.list_append("l", item.into()).unwrap();
        }
        ctx.commit().unwrap();
        ctx.enter(b"k");
        assert_eq!(
            ctx.list_get("l").unwrap(),
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
        );
        ctx.clear("l").unwrap();
        assert!(ctx.list_get("l").unwrap().is_empty());
        ctx.list_append("l", b"d".to_vec()).unwrap();
        assert_eq!(ctx.list_get("l").unwrap(), vec![b"d".to_vec()]);
    }

    #[test]
    fn an_aborted_call_leaves_no_trace() {
        let (mut ctx, _) = context(&[]);
        ctx.enter(b"k");
        ctx.set("n", b"1".to_vec()).unwrap();
        ctx.register_timer(TimeDomain::EventTime, 5).unwrap();
        ctx.abort();
        ctx.enter(b"k");
        assert_eq!(ctx.get("n").unwrap(), None);
        ctx.abort();
        assert!(
            ctx.take_due_timers(TimeDomain::EventTime, i64::MIN, i64::MAX)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn values_expire_after_their_ttl() {
        let (mut ctx, now) = context(&[("short", 100)]);
        ctx.enter(b"k");
        ctx.set("short", b"s".to_vec()).unwrap();
        ctx.set("long", b"l".to_vec()).unwrap();
        ctx.commit().unwrap();
        now.store(1_099, Ordering::Relaxed);
        ctx.enter(b"k");
        assert_eq!(ctx.get("short").unwrap(), Some(b"s".to_vec()));
        now.store(1_100, Ordering::Relaxed);
        ctx.enter(b"k");
        assert_eq!(ctx.get("short").unwrap(), None);
        assert_eq!(ctx.get("long").unwrap(), Some(b"l".to_vec()));
    }

    #[test]
    fn timers_come_due_in_time_order_once_and_deleted_ones_never() {
        let (mut ctx, _) = context(&[]);
        for (key, at) in [(&b"b"[..], 30), (b"a", 10), (b"a", 20), (b"a", 10), (b"c", 25)] {
            ctx.enter(key);
            ctx.register_timer(TimeDomain::EventTime, at).unwrap();
            ctx.commit().unwrap();
        }
        ctx.enter(b"c");
        ctx.delete_timer(TimeDomain::EventTime, 25).unwrap();
        ctx.register_timer(TimeDomain::ProcessingTime, 15).unwrap();
        ctx.commit().unwrap();
        let due = ctx.take_due_timers(TimeDomain::EventTime, i64::MIN, 20).unwrap();
        assert_eq!(due, vec![(10, b"a".to_vec()), (20, b"a".to_vec())]);
        let rest = ctx
            .take_due_timers(TimeDomain::EventTime, i64::MIN, i64::MAX)
            .unwrap();
        assert_eq!(rest, vec![(30, b"b".to_vec())]);
        let processing = ctx
            .take_due_timers(TimeDomain::ProcessingTime, i64::MIN, 15)
            .unwrap();
        assert_eq!(processing, vec![(15, b"c".to_vec())]);
    }

    #[test]
    fn state_outside_a_call_is_refused() {
        let (mut ctx, _) = context(&[]);
        assert!(matches!(ctx.get("n"), Err(KeyedError::Refused(_))));
        assert!(matches!(
            ctx.set(&"x".repeat(256), vec![]),
            Err(KeyedError::Refused(_))
        ));
    }
    #[test]
    fn a_call_writes_and_reads_at_most_its_limit() {
        let (ctx, _) = context(&[]);
        let mut ctx = ctx.with_call_limit(4096);
        ctx.enter(b"k");
        assert!(
            matches!(ctx.set("big", vec![0; 5000]), Err(KeyedError::Refused(_))),
            "one value past the limit"
        );
        ctx.abort();
        // Three calls append 1.5 KiB each: the list grows past what one call may read.
        for _ in 0..3 {
            ctx.enter(b"k");
            ctx.list_append("l", vec![7; 1500]).unwrap();
            ctx.commit().unwrap();
        }
        ctx.enter(b"k");
        let err = ctx.list_get("l").unwrap_err();
        assert!(err.to_string().contains("too much for one call"), "{err}");
        ctx.clear("l").unwrap();
        assert!(
            ctx.list_get("l").unwrap().is_empty(),
            "its keys are few enough to clear"
        );
        ctx.commit().unwrap();
        ctx.enter(b"k");
        ctx.list_append("m", vec![1; 1000]).unwrap();
        ctx.list_append("m", vec![2; 1000]).unwrap();
        assert_eq!(ctx.list_get("m").unwrap().len(), 2, "below the limit, reads work");
    }

    #[test]
    fn many_tiny_writes_count_what_they_cost_the_host() {
        // 64 KiB of limit: 2000 one-byte values in a map state are 2000
        // entries of the host's, several times their keys' and values'
        // bytes (~40 each).
        let (ctx, _) = context(&[]);
        let mut ctx = ctx.with_call_limit(64 << 10);
        ctx.enter(b"k");
        let written = (0..2000u32).take_while(|i| ctx.map_set("m", &i.to_be_bytes(), vec![1]).is_ok());
        let n = written.count();
        assert!(n < 1000, "refused well before 2000 entries: {n}");
        assert!(n > 300, "yet not at once: {n}");
        ctx.abort();
    }
}
