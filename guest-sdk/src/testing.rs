//! Run a process (or co-process) operator natively, with in-memory keyed state and a fake
//! clock: no engine, no Wasm, plain `cargo test`.
//!
//! ```
//! use mailer_sdk::testing::Harness;
//! use mailer_sdk::{operator, Emit, Record, Result, Timer, Timers, ValueState};
//!
//! /// Counts each key's records and reports the count a minute of event time
//! /// after the key's first record.
//! #[operator(process, on_timer = report)]
//! fn count(rec: Record, seen: &mut ValueState<u64>, timers: &mut Timers, _out: &mut Emit) -> Result<()> {
//!     let n = seen.get()?.unwrap_or(0);
//!     if n == 0 {
//!         timers.register_event_time(rec.timestamp + 60_000);
//!     }
//!     seen.set(&(n + 1))
//! }
//!
//! #[operator(timer)]
//! fn report(timer: Timer, seen: &mut ValueState<u64>, out: &mut Emit) -> Result<()> {
//!     let n = seen.get()?.unwrap_or(0);
//!     seen.clear();
//!     out.emit(timer.key(), n.to_string())
//! }
//!
//! let mut h = Harness::new(count_operator());
//! h.send(Record::new("a").with_key("k").with_timestamp(1_000)).unwrap();
//! h.send(Record::new("b").with_key("k").with_timestamp(2_000)).unwrap();
//! assert!(h.advance_watermark(60_999).unwrap().is_empty());
//! let out = h.advance_watermark(61_000).unwrap();
//! assert_eq!(out[0].value, b"2");
//! assert_eq!(out[0].timestamp, 61_000);
//! ```
//!
//! Time-to-live of state is the host's (set in the manifest); here state
//! lives until cleared.

use crate::timers::{TimeDomain, Timer};
use crate::{CoProcessOperator, Emit, ProcessOperator, Record, Result};

type OnRecord = fn(Record, &mut Emit) -> Result<()>;

/// One process (or co-process) operator and its in-memory state and
/// timers.
pub struct Harness {
    on_record: OnRecord,
    on_right: Option<OnRecord>,
    on_timer: fn(Timer, &mut Emit) -> Result<()>,
    fake: fake::Fake,
}

impl Harness {
    /// A harness with empty state, watermark `i64::MIN` and processing time 0.
    pub fn new(operator: ProcessOperator) -> Self {
        Self {
            on_record: operator.on_record,
            on_right: None,
            on_timer: operator.on_timer,
            fake: fake::Fake::default(),
        }
    }

    /// A harness of a co-process operator: [`Harness::send`] hands a record
    /// to its left input, [`Harness::send_right`] to its right one; both
    /// share each key's state and timers.
    pub fn co_process(operator: CoProcessOperator) -> Self {
        Self {
            on_record: operator.on_left,
            on_right: Some(operator.on_right),
            on_timer: operator.on_timer,
            fake: fake::Fake::default(),
        }
    }

    /// Hands one record to the operator (a co-process operator's left
    /// input); its output, or its error (its state changes then undone, as
    /// the host does).
    pub fn send(&mut self, rec: Record) -> Result<Vec<Record>> {
        self.call(self.on_record, rec)
    }

    /// Hands one record to a co-process operator's right input.
    ///
    /// # Panics
    /// When the harness runs a process operator (it has one input).
    pub fn send_right(&mut self, rec: Record) -> Result<Vec<Record>> {
        let f = self
            .on_right
            .expect("a process operator has one input: make the harness with Harness::co_process");
        self.call(f, rec)
    }

    fn call(&mut self, f: OnRecord, rec: Record) -> Result<Vec<Record>> {
        let key = rec.key.clone();
        let mut out = Emit::at(rec.timestamp);
        self.fake.call(key, || f(rec, &mut out))?;
        Ok(out.into_records())
    }

    /// Moves the watermark to `to` and fires the event-time timers due, in
    /// time order; their output.
    pub fn advance_watermark(&mut self, to: i64) -> Result<Vec<Record>> {
        self.fake.watermark = self.fake.watermark.max(to);
        self.fire(TimeDomain::EventTime, to)
    }

    /// Moves the processing-time clock to `to` and fires the processing-time
    /// timers due, in time order; their output.
    pub fn advance_processing_time(&mut self, to: i64) -> Result<Vec<Record>> {
        self.fake.now = self.fake.now.max(to);
        self.fire(TimeDomain::ProcessingTime, to)
    }

    /// The pending timers of `key`, in time order.
    pub fn timers(&self, key: &[u8]) -> Vec<(TimeDomain, i64)> {
        self.fake
            .timers
            .iter()
            .filter(|(_, _, k)| k.as_deref().unwrap_or_default() == key)
            .map(|(d, at, _)| (*d, *at))
            .collect()
    }

    /// The value state `name` of `key`, as JSON text.
    pub fn value(&self, key: &[u8], name: &str) -> Option<String> {
        self.fake
            .values
            .get(&(key.to_vec(), name.to_owned()))
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The list state `name` of `key`: each item as JSON text, in order
    /// (empty when the key has none).
    pub fn list(&self, key: &[u8], name: &str) -> Vec<String> {
        self.fake
            .lists
            .get(&(key.to_vec(), name.to_owned()))
            .map(|items| {
                items
                    .iter()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The map state `name` of `key`: each entry's key and value as JSON
    /// text, in the order the host keeps them (empty when the key has none).
    pub fn map(&self, key: &[u8], name: &str) -> Vec<(String, String)> {
        let text = |b: &Vec<u8>| String::from_utf8_lossy(b).into_owned();
        self.fake
            .maps
            .get(&(key.to_vec(), name.to_owned()))
            .map(|entries| entries.iter().map(|(k, v)| (text(k), text(v))).collect())
            .unwrap_or_default()
    }

    fn fire(&mut self, domain: TimeDomain, upto: i64) -> Result<Vec<Record>> {
        let due: Vec<_> = self
            .fake
            .timers
            .iter()
            .filter(|(d, at, _)| *d == domain && *at <= upto)
            .cloned()
            .collect();
        let mut out = Vec::new();
        for t in due {
            self.fake.timers.remove(&t);
            let (domain, at, key) = t;
            let mut emit = Emit::at(at);
            let f = self.on_timer;
            let timer = Timer {
                key: key.clone(),
                domain,
                at,
            };
            self.fake.call(key, || f(timer, &mut emit))?;
            out.extend(emit.into_records());
        }
        Ok(out)
    }
}

/// The in-memory stand-in for the host's state and timers.
pub(crate) mod fake {
    use super::*;
    use std::cell::RefCell;
    use std::collections::{BTreeMap, BTreeSet};

    type Scoped = (Vec<u8>, String);

    #[derive(Debug, Clone)]
    pub(crate) struct Fake {
        pub(super) values: BTreeMap<Scoped, Vec<u8>>,
        pub(super) lists: BTreeMap<Scoped, Vec<Vec<u8>>>,
        pub(super) maps: BTreeMap<Scoped, BTreeMap<Vec<u8>, Vec<u8>>>,
        pub(super) timers: BTreeSet<(TimeDomain, i64, Option<Vec<u8>>)>,
        key: Option<Vec<u8>>,
        pub(super) watermark: i64,
        pub(super) now: i64,
    }

    impl Default for Fake {
        fn default() -> Self {
            Self {
                values: BTreeMap::new(),
                lists: BTreeMap::new(),
                maps: BTreeMap::new(),
                timers: BTreeSet::new(),
                key: None,
                watermark: i64::MIN,
                now: 0,
            }
        }
    }

    thread_local! {
        static IN_CALL: RefCell<Option<Fake>> = const { RefCell::new(None) };
    }

    impl Fake {
        /// Runs `f` with this state in scope for `key`; undoes its changes
        /// when it fails.
        pub(super) fn call(&mut self, key: Option<Vec<u8>>, f: impl FnOnce() -> Result<()>) -> Result<()> {
            let mut scoped = self.clone();
            scoped.key = key;
            IN_CALL.with_borrow_mut(|c| *c = Some(scoped));
            let result = f();
            let after = IN_CALL.with_borrow_mut(Option::take).expect("state in scope");
            if result.is_ok() {
                *self = Fake { key: None, ..after };
            }
            result
        }
    }

    fn with<T>(f: impl FnOnce(&mut Fake, Scoped) -> T, name: &str) -> T {
        IN_CALL.with_borrow_mut(|c| {
            let fake = c.as_mut().unwrap_or_else(|| {
                panic!("keyed state and timers exist only while a process operator runs: in tests, run it with mailer_sdk::testing::Harness")
            });
            let scoped = (fake.key.clone().unwrap_or_default(), name.to_owned());
            f(fake, scoped)
        })
    }

    pub(crate) fn get(name: &str) -> Option<Vec<u8>> {
        with(|f, s| f.values.get(&s).cloned(), name)
    }
    pub(crate) fn set(name: &str, value: &[u8]) {
        with(|f, s| f.values.insert(s, value.to_vec()), name);
    }
    pub(crate) fn clear(name: &str) {
        with(
            |f, s| {
                f.values.remove(&s);
                f.lists.remove(&s);
                f.maps.remove(&s);
            },
            name,
        )
    }
    pub(crate) fn list_get(name: &str) -> Vec<Vec<u8>> {
        with(|f, s| f.lists.get(&s).cloned().unwrap_or_default(), name)
    }
    pub(crate) fn list_append(name: &str, item: &[u8]) {
        with(|f, s| f.lists.entry(s).or_default().push(item.to_vec()), name)
    }
    pub(crate) fn map_get(name: &str, key: &[u8]) -> Option<Vec<u8>> {
        with(|f, s| f.maps.get(&s)?.get(key).cloned(), name)
    }
    pub(crate) fn map_set(name: &str, key: &[u8], value: &[u8]) {
        with(
            |f, s| f.maps.entry(s).or_default().insert(key.to_vec(), value.to_vec()),
            name,
        );
    }
    pub(crate) fn map_remove(name: &str, key: &[u8]) {
        with(|f, s| f.maps.get_mut(&s).map(|m| m.remove(key)), name);
    }
    pub(crate) fn map_entries(name: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        with(
            |f, s| {
                f.maps
                    .get(&s)
                    .map(|m| m.clone().into_iter().collect())
                    .unwrap_or_default()
            },
            name,
        )
    }
    pub(crate) fn register(d: TimeDomain, at: i64) {
        with(|f, _| f.timers.insert((d, at, f.key.clone())), "");
    }
    pub(crate) fn delete(d: TimeDomain, at: i64) {
        with(|f, _| f.timers.remove(&(d, at, f.key.clone())), "");
    }
    pub(crate) fn watermark() -> i64 {
        with(|f, _| f.watermark, "")
    }
    pub(crate) fn now() -> i64 {
        with(|f, _| f.now, "")
    }
}
