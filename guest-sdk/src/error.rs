//! The error a plugin returns for a record it cannot handle.

use std::fmt;

/// Why an operator failed on one record. The host hands the record to the
/// operator's failure policy (`fail`, `skip` or `dead-letter`) with this
/// message, so say what was wrong with the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    message: String,
}

/// The result of an operator function.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Any standard error converts, so `?` works on parse errors and the like.
impl<E: std::error::Error> From<E> for Error {
    fn from(e: E) -> Self {
        Self::new(e.to_string())
    }
}
