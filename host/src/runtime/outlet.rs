//! Fan-out: one stream feeding several readers (operators or sinks).
//!
//! Every reader gets every message, in the stream's order, each on its own
//! bounded edge. A message goes to all readers before the next one goes to
//! any, so a full reader blocks the sender: the slowest reader holds back
//! the stream — the others wait, nothing is dropped, and memory stays within
//! the edges. No thread is needed, and a diamond (a fan-out whose readers
//! meet again at a union) cannot deadlock: a barrier reaches every reader
//! before any record after it.
//!
//! After a `branch` each reader reads one of its outputs: a batch of an
//! output goes only to that output's readers, markers to all.

use super::{Closed, EdgeSender, Message};

/// The sending end of a stream with one or more readers.
#[derive(Debug)]
pub struct Outlet {
    readers: Vec<EdgeSender>,
    /// For a stage ending in a `branch`: the output each reader reads
    /// (none: all of them); empty otherwise.
    outputs: Vec<Option<usize>>,
}

impl Outlet {
    /// A stream feeding `readers` (at least one).
    pub fn new(readers: Vec<EdgeSender>) -> Self {
        assert!(!readers.is_empty(), "a stream feeds at least one reader");
        Self {
            readers,
            outputs: Vec::new(),
        }
    }

    /// The streams of a stage whose last operator has several outputs (a
    /// branch), each reader reading the output it names (none: every
    /// output). Records of an output nobody reads are dropped there.
    pub fn split(readers: Vec<(EdgeSender, Option<usize>)>) -> Self {
        let (readers, outputs) = readers.into_iter().unzip();
        Self {
            outputs,
            ..Self::new(readers)
        }
    }

    /// Sends `msg` to every reader (a branch's output only to the readers of
    /// that output, as records), blocking while one is full; fails once any
    /// reader is gone (the run is failing).
    pub fn send(&self, msg: Message) -> Result<(), Closed> {
        match msg {
            // A stage's own outlet routes its outputs; inside the stage
            // (worker to merge) they pass as they are.
            Message::Output(n, batch) if !self.outputs.is_empty() => self.send_output(n, batch),
            msg => self.send_all(msg),
        }
    }

    fn send_all(&self, msg: Message) -> Result<(), Closed> {
        let (last, others) = self.readers.split_last().expect("at least one reader");
        for reader in others {
            reader.send(msg.clone())?;
        }
        last.send(msg)
    }

    fn send_output(&self, n: usize, batch: crate::batch::Batch) -> Result<(), Closed> {
        let mut readers = self
            .readers
            .iter()
            .zip(&self.outputs)
            .filter(|(_, output)| output.is_none_or(|o| o == n))
            .map(|(reader, _)| reader)
            .peekable();
        while let Some(reader) = readers.next() {
            match readers.peek() {
                Some(_) => reader.send(Message::Records(batch.clone()))?,
                None => return reader.send(Message::Records(batch)),
            }
        }
        Ok(())
    }

    /// Whether every reader's edge is empty now.
    pub fn is_empty(&self) -> bool {
        self.readers.iter().all(EdgeSender::is_empty)
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
