//! Fan-out: one stream feeding several branches (operators or sinks).
//!
//! Every branch gets every message, in the stream's order, each on its own
//! bounded edge. A message goes to all branches before the next one goes to
//! any, so a full branch blocks the sender: the slowest branch holds back
//! the stream — the others wait, nothing is dropped, and memory stays within
//! the edges. No thread is needed, and a diamond (a fan-out whose branches
//! meet again at a union) cannot deadlock: a barrier reaches every branch
//! before any record after it.

use super::{Closed, EdgeSender, Message};

/// The sending end of a stream with one or more branches.
#[derive(Debug)]
pub struct Outlet {
    branches: Vec<EdgeSender>,
}

impl Outlet {
    /// A stream feeding `branches` (at least one).
    pub fn new(branches: Vec<EdgeSender>) -> Self {
        assert!(!branches.is_empty(), "a stream feeds at least one branch");
        Self { branches }
    }

    /// Sends `msg` to every branch, blocking while one is full; fails once
    /// any branch is gone (the run is failing).
    pub fn send(&self, msg: Message) -> Result<(), Closed> {
        let (last, others) = self.branches.split_last().expect("at least one branch");
        for branch in others {
            branch.send(msg.clone())?;
        }
        last.send(msg)
    }

    /// Whether every branch's edge is empty now.
    pub fn is_empty(&self) -> bool {
        self.branches.iter().all(EdgeSender::is_empty)
    }
}

impl From<EdgeSender> for Outlet {
    fn from(edge: EdgeSender) -> Self {
        Self::new(vec![edge])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;
    use crate::runtime::{Barrier, Shutdown, edge};
    use std::time::Duration;

    fn records(n: i64) -> Message {
        Message::records(vec![Record::new(None, n.to_string(), n)])
    }

    /// One branch is stalled: the other gets what fits its edge and then
    /// waits with the sender; once the stalled branch reads, both get every
    /// message, in order.
    #[test]
    fn a_stalled_branch_holds_back_the_others_and_nothing_is_lost() {
        let shutdown = Shutdown::new();
        let (fast_tx, fast_rx) = edge("fast".into(), 2, &shutdown);
        let (slow_tx, slow_rx) = edge("slow".into(), 2, &shutdown);
        let outlet = Outlet::new(vec![fast_tx, slow_tx]);
        let messages: Vec<Message> = (0..20)
            .map(records)
            .chain([Message::Barrier(Barrier { id: 1 }), Message::EndOfStream])
            .collect();
        let sent = messages.clone();
        let sender = std::thread::spawn(move || {
            for m in sent {
                outlet.send(m).unwrap();
            }
        });
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let fast = std::thread::spawn({
            let seen = seen.clone();
            move || {
                std::iter::from_fn(|| fast_rx.recv())
                    .inspect(|_| {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    })
                    .collect::<Vec<_>>()
            }
        });
        std::thread::sleep(Duration::from_millis(200));
        // The slow branch has read nothing: its edge holds two messages and
        // the sender is stuck on the third, which the fast branch got.
        assert!(!sender.is_finished());
        assert!(seen.load(std::sync::atomic::Ordering::SeqCst) <= 3);
        let slow: Vec<Message> = std::iter::from_fn(|| slow_rx.recv()).collect();
        sender.join().unwrap();
        assert_eq!(slow, messages);
        assert_eq!(fast.join().unwrap(), messages);
    }

    #[test]
    fn a_gone_branch_fails_the_send() {
        let shutdown = Shutdown::new();
        let (a_tx, _a_rx) = edge("a".into(), 4, &shutdown);
        let (b_tx, b_rx) = edge("b".into(), 4, &shutdown);
        drop(b_rx);
        let outlet = Outlet::new(vec![a_tx, b_tx]);
        assert_eq!(outlet.send(records(1)), Err(Closed));
    }
}
