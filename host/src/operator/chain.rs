//! A chain of operators run as direct calls inside one worker: no channel
//! between them.

use super::{Operator, OperatorError, SideOutput};
use crate::batch::Batch;
use crate::checkpoint::{CheckpointEvent, SnapshotMeta, WorkerCheckpoints, file_sizes, pending_dir};
use crate::record::{Message, Record};

/// Operators applied one after another to every message.
pub struct Chain {
    ops: Vec<Box<dyn Operator>>,
    checkpoints: Option<WorkerCheckpoints>,
    /// The worker's channels to the side outputs, told of each barrier.
    side_outputs: Vec<SideOutput>,
}

impl Chain {
    /// A chain of these operators, in order.
    pub fn new(ops: Vec<Box<dyn Operator>>) -> Self {
        Self {
            ops,
            checkpoints: None,
            side_outputs: Vec::new(),
        }
    }

    /// The same chain telling its side outputs of each barrier.
    pub fn with_side_outputs(mut self, side_outputs: Vec<SideOutput>) -> Self {
        self.side_outputs = side_outputs;
        self
    }

    /// The same chain taking its part of each checkpoint as barriers pass.
    pub fn with_checkpoints(mut self, checkpoints: WorkerCheckpoints) -> Self {
        self.checkpoints = Some(checkpoints);
        self
    }

    /// Writes each stateful operator's snapshot for checkpoint `id` and
    /// acknowledges it; a failure fails the checkpoint, not the pipeline.
    fn checkpoint(&mut self, id: u64) {
        let Some(c) = &self.checkpoints else { return };
        let dir = pending_dir(&c.dir, id);
        let mut snapshots = Vec::new();
        let mut failure = None;
        for op in &mut self.ops {
            let path = snapshot_folder(op.name(), c.worker);
            let written = op
                .snapshot(&dir.join(&path))
                .map_err(|e| e.to_string())
                .and_then(|taken| match taken {
                    true => file_sizes(&dir.join(&path)).map(Some).map_err(|e| e.to_string()),
                    false => Ok(None),
                });
            match written {
                Ok(Some(files)) => snapshots.push(SnapshotMeta {
                    operator: op.name().to_owned(),
                    worker: c.worker,
                    parallelism: c.parallelism,
                    backend: c.backend.to_owned(),
                    path,
                    files,
                }),
                Ok(None) => {}
                Err(e) => {
                    failure = Some(format!("operator `{}` worker {}: {e}", op.name(), c.worker));
                    break;
                }
            }
        }
        let event = match failure {
            Some(reason) => CheckpointEvent::Failed { id, reason },
            None => CheckpointEvent::Acked { id, snapshots },
        };
        // A stopped coordinator means the pipeline is stopping.
        let _ = c.events.send(event);
        for side in &self.side_outputs {
            side.barrier(id);
        }
    }

    /// Runs one message through the chain and returns what leaves it, in
    /// order: the records it produced, then the marker itself (if it was one).
    pub fn on_message(&mut self, msg: Message) -> Result<Vec<Message>, OperatorError> {
        let records = match &msg {
            Message::Records(_) => {
                let Message::Records(batch) = msg else {
                    unreachable!("matched above")
                };
                let out = self.run_batch(0, batch)?;
                return Ok(non_empty(out).into_iter().collect());
            }
            Message::Watermark(wm) => {
                let wm = *wm;
                self.each_op(|op, out| op.on_watermark(wm, out))?
            }
            Message::ProcessingTime(now) => {
                let now = *now;
                self.each_op(|op, out| op.on_processing_time(now, out))?
            }
            Message::EndOfStream => self.each_op(|op, out| op.on_end(out))?,
            Message::Barrier(b) => {
                self.checkpoint(b.id);
                Batch::Records(Vec::new())
            }
            Message::Swap(swap) => {
                for op in self.ops.iter_mut().filter(|op| op.name() == swap.operator) {
                    op.swap_plugin(&swap.plugin)?;
                    swap.applied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Batch::Records(Vec::new())
            }
        };
        Ok(non_empty(records).into_iter().chain([msg]).collect())
    }

    /// Runs records through the operators from index `first` on.
    fn run_batch(&mut self, first: usize, mut batch: Batch) -> Result<Batch, OperatorError> {
        for op in &mut self.ops[first..] {
            if batch.is_empty() {
                break;
            }
            batch = op.process(batch)?;
        }
        Ok(batch)
    }

    /// Calls `f` on each operator in order; what an operator emits runs
    /// through the operators after it before the next one is called.
    fn each_op(
        &mut self,
        mut f: impl FnMut(&mut dyn Operator, &mut Vec<Record>) -> Result<(), OperatorError>,
    ) -> Result<Batch, OperatorError> {
        let mut all = Vec::new();
        for i in 0..self.ops.len() {
            let mut emitted = Vec::new();
            f(self.ops[i].as_mut(), &mut emitted)?;
            all.extend(self.run_batch(i + 1, Batch::Records(emitted))?.into_records());
        }
        Ok(Batch::Records(all))
    }
}

/// The folder of an operator worker's snapshot inside a checkpoint: the
/// operator's name made safe for a file name, and the worker.
fn snapshot_folder(operator: &str, worker: usize) -> String {
    let safe: String = operator
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{safe}-w{worker}")
}

fn non_empty(records: Batch) -> Option<Message> {
    (!records.is_empty()).then_some(Message::Records(records))
}
