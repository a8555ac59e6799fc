//! Bounded edges between stages. A full edge blocks its sender: that is the
//! backpressure, which reaches back to the source. Nothing is dropped.

use super::Message;
use crate::metrics::EdgeStats;
use crate::runtime::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a blocked send or receive checks for an abort.
const ABORT_POLL: Duration = Duration::from_millis(50);

/// The writing end. Dropping it closes the edge (contract C2: the writer
/// owns the close).
#[derive(Debug)]
pub struct EdgeSender {
    tx: flume::Sender<Message>,
    stats: Arc<EdgeStats>,
    shutdown: Shutdown,
}

/// The reading end.
#[derive(Debug)]
pub struct EdgeReceiver {
    rx: flume::Receiver<Message>,
    stats: Arc<EdgeStats>,
    shutdown: Shutdown,
}

/// The receiver is gone or the run was aborted: stop producing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the downstream stage stopped")]
pub struct Closed;

/// A bounded edge holding at most `capacity` messages.
pub fn edge(name: String, capacity: usize, shutdown: &Shutdown) -> (EdgeSender, EdgeReceiver) {
    let capacity = capacity.max(1);
    let (tx, rx) = flume::bounded(capacity);
    let stats = Arc::new(EdgeStats {
        name,
        capacity,
        blocked_nanos: AtomicU64::new(0),
        records: AtomicU64::new(0),
        records_received: AtomicU64::new(0),
        sent: AtomicU64::new(0),
        received: AtomicU64::new(0),
    });
    (
        EdgeSender {
            tx,
            stats: stats.clone(),
            shutdown: shutdown.clone(),
        },
        EdgeReceiver {
            rx,
            stats,
            shutdown: shutdown.clone(),
        },
    )
}

impl EdgeSender {
    /// Sends, blocking while the edge is full.
    pub fn send(&self, msg: Message) -> Result<(), Closed> {
        if let Some(r) = msg.batch() {
            self.stats.records.fetch_add(r.len() as u64, Ordering::Relaxed);
        }
        self.stats.sent.fetch_add(1, Ordering::Relaxed);
        let msg = match self.tx.try_send(msg) {
            Ok(()) => return Ok(()),
            Err(flume::TrySendError::Disconnected(_)) => return Err(Closed),
            Err(flume::TrySendError::Full(m)) => m,
        };
        let started = Instant::now();
        let mut msg = msg;
        let result = loop {
            if self.shutdown.is_aborted() {
                break Err(Closed);
            }
            match self.tx.send_timeout(msg, ABORT_POLL) {
                Ok(()) => break Ok(()),
                Err(flume::SendTimeoutError::Timeout(m)) => msg = m,
                Err(flume::SendTimeoutError::Disconnected(_)) => break Err(Closed),
            }
        };
        let blocked = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stats.blocked_nanos.fetch_add(blocked, Ordering::Relaxed);
        result
    }

    /// Messages waiting in the edge now.
    pub fn len(&self) -> usize {
        self.tx.len()
    }

    /// Whether the edge holds no message now.
    pub fn is_empty(&self) -> bool {
        self.tx.is_empty()
    }

    /// The edge's shared observations.
    pub fn stats(&self) -> &Arc<EdgeStats> {
        &self.stats
    }
}

impl EdgeReceiver {
    /// The next message; `None` once the edge is closed and empty, or the run
    /// was aborted.
    pub fn recv(&self) -> Option<Message> {
        loop {
            if self.shutdown.is_aborted() {
                return None;
            }
            match self.rx.recv_timeout(ABORT_POLL) {
                Ok(m) => {
                    self.took(&m);
                    return Some(m);
                }
                Err(flume::RecvTimeoutError::Timeout) => {}
                Err(flume::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    /// Whether no message is waiting now.
    pub fn is_empty(&self) -> bool {
        self.rx.is_empty()
    }

    /// The underlying channel, for select-style merging (which counts
    /// what it takes with [`took`](Self::took)).
    pub(crate) fn channel(&self) -> &flume::Receiver<Message> {
        &self.rx
    }

    /// `msg` was taken out of the edge (through [`channel`](Self::channel)
    /// or [`recv`](Self::recv)).
    pub(crate) fn took(&self, msg: &Message) {
        self.stats.received.fetch_add(1, Ordering::Relaxed);
        if let Some(r) = msg.batch() {
            self.stats
                .records_received
                .fetch_add(r.len() as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    #[test]
    fn full_edge_blocks_until_the_reader_takes_a_message() {
        let shutdown = Shutdown::new();
        let (tx, rx) = edge("a -> b".into(), 1, &shutdown);
        tx.send(Message::Watermark(1)).unwrap();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let first = rx.recv();
            let second = rx.recv();
            (first, second, rx.recv())
        });
        tx.send(Message::records(vec![Record::default()])).unwrap();
        assert!(tx.stats().blocked_nanos.load(Ordering::Relaxed) > 0);
        drop(tx);
        let (a, b, c) = reader.join().unwrap();
        assert_eq!(a, Some(Message::Watermark(1)));
        assert_eq!(b, Some(Message::records(vec![Record::default()])));
        assert_eq!(c, None, "closed after the writer dropped its end");
    }

    #[test]
    fn counts_the_messages_waiting() {
        let shutdown = Shutdown::new();
        let (tx, rx) = edge("a -> b".into(), 4, &shutdown);
        tx.send(Message::records(vec![Record::default(); 3])).unwrap();
        tx.send(Message::Watermark(2)).unwrap();
        assert_eq!((tx.stats().queued(), tx.stats().queued_records()), (2, 3));
        rx.recv().unwrap();
        assert_eq!((tx.stats().queued(), tx.stats().queued_records()), (1, 0));
    }

    #[test]
    fn abort_releases_a_blocked_sender() {
        let shutdown = Shutdown::new();
        let (tx, _rx) = edge("a -> b".into(), 1, &shutdown);
        tx.send(Message::Watermark(1)).unwrap();
        let s = shutdown.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            s.abort();
        });
        assert_eq!(tx.send(Message::Watermark(2)), Err(Closed));
    }
}
