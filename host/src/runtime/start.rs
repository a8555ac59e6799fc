//! What a run starts from besides its plan, as the launch decided it: the
//! checkpoint store opened, the checkpoint it resumes, and the operators
//! resuming with a plugin swapped in before that checkpoint.

use crate::checkpoint::{CheckpointStore, Restore};
use std::collections::BTreeMap;

/// Where a run starts; the default: from nothing, its checkpoint store (if
/// it takes checkpoints) opened by the run.
#[derive(Default)]
pub struct RunStart {
    /// The checkpoint store the plan's settings describe, opened.
    pub store: Option<CheckpointStore>,
    /// The checkpoint to resume from, if any.
    pub restore: Option<Restore>,
    /// Operators resuming with a swapped-in plugin: the digest of the
    /// manifest's plugin each replaces (checkpoints record it).
    pub swapped_from: BTreeMap<String, String>,
}
