//! Taps: copies of the records leaving one point of a running pipeline (a
//! source or an operator) for the clients watching it (`mailer tap`,
//! `GET /api/tap/{point}`).
//!
//! A point nobody taps costs one relaxed atomic load per batch. A client
//! gets its records on a bounded channel: when the channel is full, the
//! records it would have got are dropped and counted for that client, so
//! a slow or gone client never holds back the pipeline.

mod line;

pub use line::{TapLine, record_line};

use crate::batch::Batch;
use crate::record::Record;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// Batches of picked records a client's channel holds before what follows
/// is dropped.
const CLIENT_BATCHES: usize = 64;

/// Taps open at once in a process, at most: each may hold its buffer.
const MAX_TAPS: usize = 16;

/// Why a tap cannot be opened.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    /// No source or operator of the pipeline has this name.
    #[error("no source or operator is named `{point}`; tap one of: {known}")]
    NoPoint {
        /// The name asked for.
        point: String,
        /// The names there are, comma-separated.
        known: String,
    },
    /// The run has ended.
    #[error("the pipeline has stopped")]
    Stopped,
    /// Too many taps are open.
    #[error("{MAX_TAPS} taps are open already: close one first")]
    TooMany,
}

/// The tap points of a pipeline, by name: every source and operator.
#[derive(Default)]
pub struct Taps {
    points: Mutex<BTreeMap<String, Arc<TapPoint>>>,
    stopped: AtomicBool,
}

impl Taps {
    /// The tap point `name` (a source or an operator), made when the run
    /// first asks for it; every worker of an operator shares it.
    pub fn point(&self, name: &str) -> Arc<TapPoint> {
        self.stopped.store(false, Ordering::Relaxed);
        let mut points = self.points.lock().expect("tap points lock");
        points.entry(name.to_owned()).or_default().clone()
    }

    /// Opens a tap on `point` taking one record in `every` (1: all).
    pub fn open(&self, point: &str, every: u64) -> Result<Subscription, TapError> {
        if self.stopped.load(Ordering::Relaxed) {
            return Err(TapError::Stopped);
        }
        let points = self.points.lock().expect("tap points lock");
        let open: usize = points.values().map(|p| p.open.load(Ordering::Relaxed)).sum();
        if open >= MAX_TAPS {
            return Err(TapError::TooMany);
        }
        let Some(tapped) = points.get(point) else {
            let known: Vec<&str> = points.keys().map(String::as_str).collect();
            return Err(TapError::NoPoint {
                point: point.to_owned(),
                known: known.join(", "),
            });
        };
        let (tx, rx) = tokio::sync::mpsc::channel(CLIENT_BATCHES);
        let dropped = Arc::new(AtomicU64::new(0));
        let client = Arc::new(Client {
            every: every.max(1),
            seen: AtomicU64::new(0),
            dropped: dropped.clone(),
            tx,
        });
        let attached = Arc::downgrade(&client);
        tapped.attach(client);
        Ok(Subscription {
            point: tapped.clone(),
            client: attached,
            dropped,
            records: rx,
        })
    }

    /// The run stopped: every open tap ends (its client reads what is
    /// left, then the end) and no new one opens until a run starts.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::Relaxed);
        for point in self.points.lock().expect("tap points lock").values() {
            point.detach_all();
        }
    }
}

/// One source's or operator's output, as its taps see it.
#[derive(Default)]
pub struct TapPoint {
    /// Clients attached: read on every batch, without the lock.
    open: AtomicUsize,
    clients: Mutex<Vec<Arc<Client>>>,
}

impl TapPoint {
    /// Offers the records leaving this point to its clients: nothing but a
    /// relaxed load when there are none.
    #[inline]
    pub fn offer(&self, batch: &Batch) {
        if self.open.load(Ordering::Relaxed) != 0 && !batch.is_empty() {
            self.deliver(batch);
        }
    }

    fn deliver(&self, batch: &Batch) {
        let mut clients = self.clients.lock().expect("tap clients lock");
        clients.retain(|c| c.take(batch));
        self.open.store(clients.len(), Ordering::Relaxed);
    }

    fn attach(&self, client: Arc<Client>) {
        let mut clients = self.clients.lock().expect("tap clients lock");
        clients.push(client);
        self.open.store(clients.len(), Ordering::Relaxed);
    }

    fn detach(&self, client: &Weak<Client>) {
        let mut clients = self.clients.lock().expect("tap clients lock");
        clients.retain(|c| !std::ptr::eq(Arc::as_ptr(c), client.as_ptr()));
        self.open.store(clients.len(), Ordering::Relaxed);
    }

    fn detach_all(&self) {
        let mut clients = self.clients.lock().expect("tap clients lock");
        clients.clear();
        self.open.store(0, Ordering::Relaxed);
    }
}

/// A client's side of a tap point.
struct Client {
    /// One record in `every` is taken, counted over every worker.
    every: u64,
    /// Records that passed the point since the client attached.
    seen: AtomicU64,
    /// Records taken but not delivered: the client did not keep up.
    dropped: Arc<AtomicU64>,
    tx: tokio::sync::mpsc::Sender<Vec<Record>>,
}

impl Client {
    /// Sends the client its share of `batch` when its channel has room
    /// (else counts it dropped); false once the client is gone.
    fn take(&self, batch: &Batch) -> bool {
        let n = batch.len();
        let first = self.seen.fetch_add(n as u64, Ordering::Relaxed);
        // Records first+i with (first + i) % every == 0.
        let start = ((self.every - first % self.every) % self.every) as usize;
        let picked = (start..n).step_by(self.every as usize);
        let count = picked.len() as u64;
        if count == 0 {
            return !self.tx.is_closed();
        }
        // Decoded only when there is room for them.
        let Ok(permit) = self.tx.try_reserve() else {
            self.dropped.fetch_add(count, Ordering::Relaxed);
            return !self.tx.is_closed();
        };
        permit.send(picked.map(|i| batch.record(i)).collect());
        true
    }
}

/// An open tap: the records its client takes, until the client drops it
/// or the run stops (the point holds the only sender, so its channel then
/// ends).
pub struct Subscription {
    point: Arc<TapPoint>,
    client: Weak<Client>,
    dropped: Arc<AtomicU64>,
    records: tokio::sync::mpsc::Receiver<Vec<Record>>,
}

impl Subscription {
    /// The next records taken; `None` once the run stopped and every
    /// record taken was read.
    pub async fn next(&mut self) -> Option<Vec<Record>> {
        self.records.recv().await
    }

    /// Records this client missed so far because it did not keep up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.point.detach(&self.client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(from: i64, n: i64) -> Batch {
        Batch::Records(
            (from..from + n)
                .map(|i| Record::new(None, i.to_string(), i))
                .collect(),
        )
    }

    fn times(records: &[Record]) -> Vec<i64> {
        records.iter().map(|r| r.timestamp).collect()
    }

    #[test]
    fn a_tap_gets_every_record_after_it_opened_and_a_sample_every_nth() {
        let taps = Taps::default();
        let point = taps.point("map");
        point.offer(&batch(0, 5));
        let mut all = taps.open("map", 1).unwrap();
        let mut tenth = taps.open("map", 10).unwrap();
        point.offer(&batch(5, 15));
        point.offer(&batch(20, 15));
        assert_eq!(
            times(&all.records.try_recv().unwrap()),
            (5..20).collect::<Vec<_>>()
        );
        assert_eq!(
            times(&all.records.try_recv().unwrap()),
            (20..35).collect::<Vec<_>>()
        );
        // Records 0, 10, 20, 30 since it opened: 5, 15, 25, 35 -> 5, 15 and 25.
        assert_eq!(times(&tenth.records.try_recv().unwrap()), vec![5, 15]);
        assert_eq!(times(&tenth.records.try_recv().unwrap()), vec![25]);
        assert_eq!(all.dropped() + tenth.dropped(), 0);
    }

    #[test]
    fn a_client_that_does_not_read_loses_records_and_holds_back_nothing() {
        let taps = Taps::default();
        let point = taps.point("map");
        let mut slow = taps.open("map", 1).unwrap();
        for i in 0..CLIENT_BATCHES as i64 + 10 {
            point.offer(&batch(i * 2, 2));
        }
        assert_eq!(slow.dropped(), 20);
        assert_eq!(times(&slow.records.try_recv().unwrap()), vec![0, 1]);
    }

    #[test]
    fn a_gone_client_is_detached_and_a_stop_ends_every_tap() {
        let taps = Taps::default();
        let point = taps.point("source");
        let gone = taps.open("source", 1).unwrap();
        drop(gone);
        assert_eq!(point.open.load(Ordering::Relaxed), 0);
        let mut open = taps.open("source", 1).unwrap();
        point.offer(&batch(0, 1));
        taps.stop();
        assert_eq!(times(&open.records.try_recv().unwrap()), vec![0]);
        assert!(matches!(
            open.records.try_recv(),
            Err(tokio::sync::mpsc::error::TryRecvError::Disconnected)
        ));
        assert!(matches!(taps.open("source", 1), Err(TapError::Stopped)));
    }

    #[test]
    fn taps_are_refused_past_the_most_a_process_keeps_open() {
        let taps = Taps::default();
        taps.point("map");
        let open: Vec<Subscription> = (0..MAX_TAPS).map(|_| taps.open("map", 1).unwrap()).collect();
        assert!(matches!(taps.open("map", 1), Err(TapError::TooMany)));
        drop(open);
        assert!(taps.open("map", 1).is_ok());
    }

    #[test]
    fn an_unknown_point_is_refused_with_the_known_ones() {
        let taps = Taps::default();
        taps.point("source");
        taps.point("count");
        let err = taps.open("cuont", 1).err().unwrap().to_string();
        assert_eq!(
            err,
            "no source or operator is named `cuont`; tap one of: count, source"
        );
    }
}
