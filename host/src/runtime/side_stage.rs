//! The stage of a side output (dead letters, late records): one channel
//! per thread that writes to it, barriers aligned across them before the
//! side output's sink makes its output durable and acknowledges the
//! checkpoint (see [`crate::failure::SideOutput`]).

use super::sink::SinkCheckpoints;
use super::stage::StageError;
use crate::batch::Batch;
use crate::connectors::Sink;
use crate::failure::{SideMessage, SideOutput};
use crate::metrics::StageStats;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// A side output's sink and the channels of the threads that write to it.
pub struct SideStage {
    /// `dead-letter` or `late-output`.
    pub name: &'static str,
    sink: Box<dyn Sink>,
    inputs: Vec<flume::Receiver<SideMessage>>,
    capacity: usize,
}

impl SideStage {
    /// The stage of the opened `sink`, whose channels hold up to `capacity`
    /// records each.
    pub fn new(name: &'static str, sink: Box<dyn Sink>, capacity: usize) -> Self {
        Self {
            name,
            sink,
            inputs: Vec::new(),
            capacity,
        }
    }

    /// The sink, to resume it.
    pub fn sink_mut(&mut self) -> &mut dyn Sink {
        self.sink.as_mut()
    }

    /// A channel for one more writing thread.
    pub fn channel(&mut self) -> SideOutput {
        let (tx, rx) = SideOutput::channel(self.capacity);
        self.inputs.push(rx);
        tx
    }

    /// Writes what arrives, in batches of up to `batch_size`, until every
    /// writer let go of its channel; with `checkpoints`, acknowledges each
    /// barrier once every open channel delivered it.
    pub fn run(
        mut self,
        batch_size: usize,
        stats: &Arc<StageStats>,
        checkpoints: Option<SinkCheckpoints>,
    ) -> Result<(), StageError> {
        let n = self.inputs.len();
        let mut open = vec![true; n];
        // The barrier each channel delivered and waits behind.
        let mut waiting: Vec<Option<u64>> = vec![None; n];
        loop {
            if let Some(id) = aligned(&open, &waiting) {
                self.sink.flush().map_err(StageError::Sink)?;
                if let Some(c) = &checkpoints {
                    c.acknowledge(self.sink.as_mut(), id)?;
                }
                waiting.fill(None);
                continue;
            }
            if !open.contains(&true) {
                break;
            }
            let mut selector = flume::Selector::new();
            for (i, rx) in self.inputs.iter().enumerate() {
                if open[i] && waiting[i].is_none() {
                    selector = selector.recv(rx, move |m| (i, m));
                }
            }
            let (i, msg) = selector.wait();
            let first = match msg {
                Err(_) => {
                    open[i] = false;
                    continue;
                }
                Ok(SideMessage::Barrier(id)) => {
                    waiting[i] = Some(id);
                    continue;
                }
                Ok(SideMessage::Record(r)) => r,
            };
            let mut records = vec![first];
            while records.len() < batch_size {
                match self.inputs[i].try_recv() {
                    Ok(SideMessage::Record(r)) => records.push(r),
                    Ok(SideMessage::Barrier(id)) => {
                        waiting[i] = Some(id);
                        break;
                    }
                    // Empty or closed: the next round sees which.
                    Err(_) => break,
                }
            }
            let batch = Batch::Records(records);
            self.sink.write(&batch).map_err(StageError::Sink)?;
            self.sink.idle().map_err(StageError::Sink)?;
            stats.records_out.fetch_add(batch.len() as u64, Ordering::Relaxed);
        }
        self.sink.close().map_err(StageError::Sink)
    }
}

/// The barrier every open channel delivered, if they all did (a closed
/// channel's writer is done and holds nothing back).
fn aligned(open: &[bool], waiting: &[Option<u64>]) -> Option<u64> {
    let mut id = None;
    for (open, waiting) in open.iter().zip(waiting) {
        match waiting {
            Some(b) => id = Some(*b),
            None if *open => return None,
            None => {}
        }
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_barrier_is_aligned_once_every_open_channel_delivered_it() {
        assert_eq!(aligned(&[true, true], &[Some(3), None]), None);
        assert_eq!(aligned(&[true, true], &[Some(3), Some(3)]), Some(3));
        assert_eq!(aligned(&[true, false], &[Some(3), None]), Some(3));
        assert_eq!(aligned(&[false, false], &[None, None]), None);
    }
}
