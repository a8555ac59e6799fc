//! Operators: what a stage runs on each batch and the chain a stage runs
//! them in (what happens to a record an operator fails on is
//! [`crate::failure`]'s); one folder per
//! family: [`builtin`] (no plugin), [`wasm`] (plugins of the map, filter,
//! flat-map, reduce and process worlds), [`window`], [`join`] (two
//! inputs), [`branch`] (several outputs) and [`sample`].
//!
//! Each operator kind owns its manifest table ([`config::OperatorConfig`]):
//! its settings, their checks, and the [`Step`] it builds; the
//! [`OperatorSpec`] registry lists the kinds by their `type`.

pub mod branch;
pub mod builtin;
mod chain;
pub mod config;
mod event_time;
mod factory;
pub mod join;
mod late;
mod node;
pub mod plugin_table;
mod registry;
pub mod sample;
mod step;
pub mod wasm;
pub mod window;

pub use chain::{Chain, Produced};
pub use event_time::EventTime;
pub use factory::{InstanceContext, InstantiateError, NativeFactory, OperatorIdentity, StateOpener};
pub use late::{LatePolicy, LateRecords, LateSpec};
pub use node::{NodeKind, OperatorNode};
pub use registry::OperatorSpec;
pub use step::Step;

use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::record::Record;

/// One operator instance, owned by one worker of a stage.
pub trait Operator: Send {
    /// The operator's name in the manifest (for logs and errors).
    fn name(&self) -> &str;

    /// Handles a batch in stream order and returns its output.
    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError>;

    /// Handles a batch of its input number `input`: an operator of two
    /// inputs (a join: 0 left, 1 right) tells them apart; one of a single
    /// input (or of a union) takes every batch the same way.
    fn process_input(&mut self, input: usize, batch: Batch) -> Result<Batch, OperatorError> {
        let _ = input;
        self.process(batch)
    }

    /// How many streams it writes: one, or (a `branch`) one per branch and
    /// the default. An operator of several outputs ends its stage, and its
    /// records leave through [`Operator::split`].
    fn outputs(&self) -> usize {
        1
    }

    /// Handles a batch and returns its output split into one batch per
    /// output, in output order ([`Operator::outputs`]).
    fn split(&mut self, input: Batch) -> Result<Vec<Batch>, OperatorError> {
        Ok(vec![self.process(input)?])
    }

    /// Event time advanced to `watermark` (ms); may emit records.
    fn on_watermark(&mut self, _watermark: i64, _out: &mut Vec<Record>) -> Result<(), OperatorError> {
        Ok(())
    }

    /// Processing time advanced to `now` (ms); may emit records.
    fn on_processing_time(&mut self, _now: i64, _out: &mut Vec<Record>) -> Result<(), OperatorError> {
        Ok(())
    }

    /// The input is complete; emit what is still held back.
    fn on_end(&mut self, _out: &mut Vec<Record>) -> Result<(), OperatorError> {
        Ok(())
    }

    /// The plugin versions this worker runs, for a swap point naming the
    /// operator to reach them (`None`: it runs no plugin, and a swap point
    /// naming it fails the run, though the swaps refuse one first).
    fn plugin_slot(&mut self) -> Option<&mut crate::swap::PluginSlot> {
        None
    }

    /// A state query passed: what this worker's keyed state holds for
    /// `request`, shown as JSON (`None`: it keeps no keyed state).
    fn query_state(
        &mut self,
        _request: &crate::state::StateRequest,
    ) -> Option<Result<crate::state::Answer, OperatorError>> {
        None
    }

    /// A checkpoint barrier passed: write the operator's state into `dir`
    /// (a folder that does not exist yet) and say whether it has any.
    /// Stateless operators write nothing.
    fn snapshot(&mut self, _dir: &std::path::Path) -> Result<bool, OperatorError> {
        Ok(false)
    }
}

/// What a keyed operator's [`Operator::snapshot`] does: writes its `state`
/// into `dir` (it has state, even when empty).
pub fn snapshot_state(
    operator: &str,
    state: &mut crate::state::KeyedState,
    dir: &std::path::Path,
) -> Result<bool, OperatorError> {
    state
        .snapshot(dir)
        .map_err(|e| OperatorError::state(operator, e))?;
    Ok(true)
}
