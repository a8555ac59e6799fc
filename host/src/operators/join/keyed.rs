//! What each of the joins of two keyed streams holds on a worker (the
//! interval join, the stream-table join): its spec, its keyed state, its
//! event time, its late records' way out and its emitter.

use super::emit::JoinEmitter;
use crate::failure::OperatorError;
use crate::operators::{EventTime, LateRecords};
use crate::state::KeyedState;

/// One keyed worker's join computing `S`.
pub struct KeyedJoin<S> {
    pub(super) name: String,
    pub(super) spec: S,
    pub(super) state: KeyedState,
    pub(super) time: EventTime,
    pub(super) late: LateRecords,
    pub(super) emit: JoinEmitter,
}

impl<S> KeyedJoin<S> {
    /// The join `name` of `spec`, keeping its records (and a table's rows)
    /// in `state`, its late records going to `late`.
    pub fn new(name: &str, spec: S, state: KeyedState, late: LateRecords) -> Self {
        Self {
            name: name.to_owned(),
            spec,
            state,
            time: EventTime::default(),
            late,
            emit: JoinEmitter::json(),
        }
    }

    /// The same join emitting through `emit`.
    pub fn with_emitter(self, emit: JoinEmitter) -> Self {
        Self { emit, ..self }
    }

    /// The error of a state failure `e`.
    pub(super) fn failed(&self, e: impl std::fmt::Display) -> OperatorError {
        OperatorError::state(&self.name, e)
    }
}
