//! What a manifest table's own checks find wrong (a connector's, an
//! operator's), and at which field: the manifest turns it into an error
//! located at the field's line.

/// Where a [`ConfigProblem`] is: a field of the table itself (a connector's, an
/// operator's), or of the `[checkpoint]` section a connector depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemAt {
    /// This field of the table.
    Field(&'static str),
    /// This field of `[checkpoint]`.
    Checkpoint(&'static str),
}

/// What is wrong with a table, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    /// The field at fault.
    pub at: ProblemAt,
    /// What is wrong and what to do.
    pub message: String,
}

impl ConfigProblem {
    /// A problem of field `field` of the table.
    pub fn field(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            at: ProblemAt::Field(field),
            message: message.into(),
        }
    }
}
