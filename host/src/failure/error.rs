//! Why an operator stopped the pipeline.

/// Why an operator stopped the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// A record failed under the `fail` policy.
    #[error("operator `{operator}` failed on record {record}: {reason}")]
    RecordFailed {
        /// The operator's name.
        operator: String,
        /// A short, printable view of the record.
        record: String,
        /// What went wrong.
        reason: String,
    },
    /// The dead-letter sink stopped, so a failing record had nowhere to go.
    #[error("operator `{operator}` could not dead-letter a record: the dead-letter sink stopped")]
    DeadLetterClosed {
        /// The operator's name.
        operator: String,
    },
    /// The state backend failed.
    #[error("operator `{operator}`: state: {reason}")]
    State {
        /// The operator's name.
        operator: String,
        /// What went wrong.
        reason: String,
    },
    /// A swap point could not be applied.
    #[error("operator `{operator}` could not swap its plugin: {reason}")]
    Swap {
        /// The operator's name.
        operator: String,
        /// What went wrong.
        reason: String,
    },
    /// The plugin could not be instantiated again after a trap.
    #[error("operator `{operator}`: {reason}")]
    Plugin {
        /// The operator's name.
        operator: String,
        /// What went wrong.
        reason: String,
    },
}

impl OperatorError {
    /// The state backend of operator `operator` failed.
    pub fn state(operator: &str, e: impl std::fmt::Display) -> Self {
        OperatorError::State {
            operator: operator.to_owned(),
            reason: e.to_string(),
        }
    }
}
