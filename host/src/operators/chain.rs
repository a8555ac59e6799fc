//! A chain of operators run as direct calls inside one worker: no channel
//! between them.

use super::Operator;
use crate::batch::Batch;
use crate::checkpoint::{CheckpointEvent, SnapshotMeta, WorkerCheckpoints, file_sizes, pending_dir};
use crate::failure::{OperatorError, SideOutput};
use crate::record::Record;
use crate::state::StateQuery;
use crate::swap::SwapPoint;
use crate::tap::{TapPoint, Taps};
use std::sync::Arc;

/// What leaves a chain: one stream, or, when a `branch` ends it, a batch
/// per output of the branch.
#[derive(Debug)]
pub enum Produced {
    /// The records of the one stream.
    Stream(Batch),
    /// The records of each output, in output order.
    Outputs(Vec<Batch>),
}

/// Operators applied one after another to every message.
pub struct Chain {
    ops: Vec<Box<dyn Operator>>,
    /// Whether the last operator has several outputs (a branch).
    splits: bool,
    checkpoints: Option<WorkerCheckpoints>,
    /// The worker's channels to the side outputs, told of each barrier.
    side_outputs: Vec<SideOutput>,
    /// Each operator's tap point (none: the chain is not tapped).
    taps: Vec<Arc<TapPoint>>,
}

impl Chain {
    /// A chain of these operators, in order.
    pub fn new(ops: Vec<Box<dyn Operator>>) -> Self {
        Self {
            splits: ops.last().is_some_and(|op| op.outputs() > 1),
            ops,
            checkpoints: None,
            side_outputs: Vec::new(),
            taps: Vec::new(),
        }
    }

    /// The same chain offering each operator's output to its taps.
    pub fn with_taps(mut self, taps: &Taps) -> Self {
        self.taps = self.ops.iter().map(|op| taps.point(op.name())).collect();
        self
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
    pub fn on_barrier(&mut self, id: u64) {
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
                    digests: Default::default(),
                    state_versions: op.plugin_slot().and_then(|slot| slot.state_versions()),
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

    /// Runs a batch through the operators; returns what leaves the last.
    pub fn on_records(&mut self, batch: Batch) -> Result<Produced, OperatorError> {
        self.run_batch(0, batch)
    }

    /// Runs a batch of input `input` of the chain's first operator (one of
    /// two inputs) through the operators.
    pub fn on_input(&mut self, input: usize, batch: Batch) -> Result<Produced, OperatorError> {
        let Some(first) = self.ops.first_mut() else {
            return Ok(Produced::Stream(batch));
        };
        let out = first.process_input(input, batch)?;
        self.tap(0, &out);
        self.run_batch(1, out)
    }

    /// Tells each operator that event time reached `wm`; returns what they
    /// emit (each operator's output run through the operators after it).
    pub fn on_watermark(&mut self, wm: i64) -> Result<Produced, OperatorError> {
        self.each_op(|op, out| op.on_watermark(wm, out))
    }

    /// Tells each operator that the wall clock reached `now`.
    pub fn on_processing_time(&mut self, now: i64) -> Result<Produced, OperatorError> {
        self.each_op(|op, out| op.on_processing_time(now, out))
    }

    /// Tells each operator that the input is complete.
    pub fn on_end(&mut self) -> Result<Produced, OperatorError> {
        self.each_op(|op, out| op.on_end(out))
    }

    /// Applies `swap` to the plugin slots of the operators it names
    /// (switching them to its plugin, or starting it as their shadow or
    /// canary); returns how many there were.
    pub fn on_swap(&mut self, swap: &SwapPoint) -> Result<usize, OperatorError> {
        let mut swapped = 0;
        for op in self.ops.iter_mut().filter(|op| op.name() == swap.operator) {
            let operator = op.name().to_owned();
            let slot = op.plugin_slot().ok_or_else(|| OperatorError::Swap {
                operator,
                reason: format!(
                    "it runs no plugin to replace with {}",
                    swap.plugin.path().display()
                ),
            })?;
            slot.apply(swap)?;
            swapped += 1;
        }
        Ok(swapped)
    }

    /// Answers `query` from the state of the operators it names.
    pub fn on_query(&mut self, query: &StateQuery) {
        for op in self.ops.iter_mut().filter(|op| op.name() == query.operator) {
            let answer = op.query_state(&query.request);
            query.answer(answer.map(|a| a.map_err(|e| e.to_string())));
        }
    }

    /// Runs records through the operators from index `first` on; a branch
    /// ending the chain splits them by output.
    fn run_batch(&mut self, first: usize, mut batch: Batch) -> Result<Produced, OperatorError> {
        let end = self.ops.len() - usize::from(self.splits);
        for i in first.min(end)..end {
            if batch.is_empty() {
                break;
            }
            batch = self.ops[i].process(batch)?;
            self.tap(i, &batch);
        }
        match self.ops.last_mut() {
            Some(branch) if self.splits && first <= end && !batch.is_empty() => {
                if let Some(tap) = self.taps.last() {
                    tap.offer(&batch);
                }
                Ok(Produced::Outputs(branch.split(batch)?))
            }
            _ => Ok(Produced::Stream(batch)),
        }
    }

    /// Offers what operator `i` produced to its taps.
    #[inline]
    fn tap(&self, i: usize, batch: &Batch) {
        if let Some(tap) = self.taps.get(i) {
            tap.offer(batch);
        }
    }

    /// Calls `f` on each operator in order; what an operator emits runs
    /// through the operators after it before the next one is called.
    fn each_op(
        &mut self,
        mut f: impl FnMut(&mut dyn Operator, &mut Vec<Record>) -> Result<(), OperatorError>,
    ) -> Result<Produced, OperatorError> {
        let outputs = self.ops.last().map_or(1, |op| op.outputs());
        let mut all: Vec<Vec<Record>> = (0..outputs).map(|_| Vec::new()).collect();
        for i in 0..self.ops.len() {
            let mut emitted = Vec::new();
            f(self.ops[i].as_mut(), &mut emitted)?;
            let emitted = Batch::Records(emitted);
            self.tap(i, &emitted);
            match self.run_batch(i + 1, emitted)? {
                Produced::Stream(b) => all[0].extend(b.into_records()),
                Produced::Outputs(parts) => {
                    for (all, part) in all.iter_mut().zip(parts) {
                        all.extend(part.into_records());
                    }
                }
            }
        }
        let mut batches: Vec<Batch> = all.into_iter().map(Batch::Records).collect();
        Ok(match self.splits {
            true => Produced::Outputs(batches),
            false => Produced::Stream(batches.pop().expect("one output")),
        })
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
