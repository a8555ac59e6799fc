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
mod canary;
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
mod shadow;
mod step;
mod swap_kind;
pub mod wasm;
pub mod window;

pub use canary::{CanaryState, CanaryStats, CanaryView};
pub use chain::{Chain, Produced};
pub use event_time::EventTime;
pub use factory::{InstanceContext, InstantiateError, NativeFactory, OperatorIdentity, StateOpener};
pub use late::{LatePolicy, LateRecords, LateSpec};
pub use node::{NodeKind, OperatorNode};
pub use registry::OperatorSpec;
pub use shadow::{MISMATCHES_KEPT, Mismatch, ShadowState, ShadowStats, ShadowView};
pub use step::Step;
pub use swap_kind::SwapKind;

use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::plugin::LoadedPlugin;
use crate::record::Record;
use std::sync::Arc;

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

    /// A swap point passed: run `plugin` (of the operator's world) from now
    /// on, keeping the state. Operators without a plugin are never asked.
    fn swap_plugin(&mut self, plugin: &Arc<LoadedPlugin>) -> Result<(), OperatorError> {
        Err(OperatorError::Swap {
            operator: self.name().to_owned(),
            reason: format!("it runs no plugin to replace with {}", plugin.path().display()),
        })
    }

    /// A shadow point passed: run `plugin` (of the operator's world) beside
    /// the current version on the records `stats` picks, comparing their
    /// outputs into `stats`, until it ends. Only map, filter and flat-map
    /// operators shadow (the swaps refuse the others before any point).
    fn shadow_plugin(
        &mut self,
        plugin: &Arc<LoadedPlugin>,
        stats: &Arc<ShadowStats>,
    ) -> Result<(), OperatorError> {
        let _ = stats;
        Err(OperatorError::Swap {
            operator: self.name().to_owned(),
            reason: format!("it cannot run {} as a shadow", plugin.path().display()),
        })
    }

    /// A canary point passed: hand the records of the key groups `stats`
    /// takes to `plugin` (of the operator's world), the current version
    /// keeping the rest, until the canary is promoted (a swap point) or
    /// rolled back. Map, filter, flat-map, process and co-process
    /// operators run canaries (the swaps refuse the others).
    fn canary_plugin(
        &mut self,
        plugin: &Arc<LoadedPlugin>,
        stats: &Arc<CanaryStats>,
    ) -> Result<(), OperatorError> {
        let _ = stats;
        Err(OperatorError::Swap {
            operator: self.name().to_owned(),
            reason: format!("it cannot run {} as a canary", plugin.path().display()),
        })
    }

    /// A state query passed: what this worker's keyed state holds for
    /// `request`, shown as JSON (`None`: it keeps no keyed state).
    fn query_state(
        &mut self,
        _request: &crate::state::StateRequest,
    ) -> Option<Result<crate::state::Answer, OperatorError>> {
        None
    }

    /// After a swap to a plugin of a higher state version: migrate every
    /// key's state in the background, not only each key when next handled.
    /// Operators without plugin-shaped state ignore it.
    fn migrate_every_key(&mut self) {}

    /// The state versions of a keyed operator running a plugin, as its
    /// snapshots record them (`None`: no plugin-shaped state).
    fn state_versions(&self) -> Option<crate::state::StateVersions> {
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
