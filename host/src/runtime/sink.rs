//! The sink stage: batches written, flushed at barriers, acknowledged to
//! the checkpoints (and, for a sink that commits with them, committed once
//! the checkpoint is complete).

use super::stage::{StageError, record_count};
use super::{EdgeReceiver, Message, Shutdown};
use crate::checkpoint::{CheckpointEvent, CheckpointStore};
use crate::connectors::Sink;
use crate::failure::SideOutput;
use crate::metrics::StageStats;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// How the sink takes part in checkpoints.
pub struct SinkCheckpoints {
    /// Which sink it is (its name; `dead-letter`, `late-output`).
    pub name: String,
    /// Where it acknowledges barriers.
    pub events: flume::Sender<CheckpointEvent>,
    /// The checkpoints, told which one's output the sink committed.
    pub store: CheckpointStore,
    /// How each checkpoint ended, for a sink that commits with them.
    pub outcomes: Option<flume::Receiver<(u64, bool)>>,
    /// The sink's side outputs (dead letters), told of each barrier.
    pub side_outputs: Vec<SideOutput>,
    /// The run's control (a failing run stops the wait for an outcome).
    pub shutdown: Shutdown,
}

impl SinkCheckpoints {
    /// Acknowledges barrier `id` with the sink's position, after its
    /// [`flush`](Sink::flush); a sink that commits with checkpoints then
    /// waits for the checkpoint's outcome and commits.
    pub(super) fn acknowledge(&self, sink: &mut dyn Sink, id: u64) -> Result<(), StageError> {
        let _ = self.events.send(CheckpointEvent::SinkAcked {
            id,
            sink: self.name.clone(),
            position: sink.position(),
        });
        for side in &self.side_outputs {
            side.barrier(id);
        }
        #[cfg(debug_assertions)]
        super::test_hooks::kill_at(super::test_hooks::Moment::Staged, id);
        if let Some(complete) = self.outcome(id) {
            #[cfg(debug_assertions)]
            if complete {
                super::test_hooks::before_commit(id);
                super::test_hooks::kill_at(super::test_hooks::Moment::Durable, id);
            }
            sink.checkpoint_done(id, complete).map_err(StageError::Sink)?;
            if complete {
                #[cfg(debug_assertions)]
                super::test_hooks::kill_at(super::test_hooks::Moment::Committed, id);
                self.store.set_committed(id);
            }
        }
        Ok(())
    }

    /// Waits for the outcome of checkpoint `id`; `None` when the run stops
    /// first.
    fn outcome(&self, id: u64) -> Option<bool> {
        let outcomes = self.outcomes.as_ref()?;
        loop {
            match outcomes.recv_timeout(Duration::from_millis(50)) {
                Ok((done, ok)) if done == id => return Some(ok),
                Ok(_) => {}
                Err(flume::RecvTimeoutError::Timeout) if !self.shutdown.is_aborted() => {}
                Err(_) => return None,
            }
        }
    }
}

/// Writes every batch of `input` to the sink; flushes at barriers (and
/// acknowledges them to `checkpoints`; a sink that commits with checkpoints
/// then waits for the outcome) and at the end.
pub fn run_sink(
    mut sink: Box<dyn Sink>,
    input: EdgeReceiver,
    stats: Arc<StageStats>,
    checkpoints: Option<SinkCheckpoints>,
) -> Result<(), StageError> {
    while let Some(msg) = input.recv() {
        stats.count_in(record_count(&msg));
        match msg {
            Message::Records(batch) => {
                sink.write(&batch).map_err(StageError::Sink)?;
                stats.records_out.fetch_add(batch.len() as u64, Ordering::Relaxed);
                if input.is_empty() {
                    sink.idle().map_err(StageError::Sink)?;
                }
            }
            Message::Barrier(b) => {
                sink.flush().map_err(StageError::Sink)?;
                if let Some(c) = &checkpoints {
                    c.acknowledge(sink.as_mut(), b.id)?;
                }
            }
            Message::EndOfStream => sink.flush().map_err(StageError::Sink)?,
            Message::Input(..) | Message::Output(..) => {
                unreachable!("the edges into a sink carry untagged records")
            }
            Message::Watermark(_)
            | Message::ProcessingTime(_)
            | Message::Swap(_)
            | Message::Query(_)
            | Message::TablesLoaded => {}
        }
    }
    sink.close().map_err(StageError::Sink)
}
