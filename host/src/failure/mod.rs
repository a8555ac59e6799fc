//! What happens to a record that fails: the failure policy an operator
//! (or a connector reading or writing records) follows — skip, fail the
//! pipeline, or dead-letter it — the counts of failures, the side outputs
//! dead letters and late records travel on, and [`OperatorError`], why a
//! stage stopped. A leaf below operators and connectors: both import it.

mod error;
mod handler;
mod side_output;

pub use error::OperatorError;
pub use handler::{FailureHandler, FailurePolicy, FailureStats, OPERATOR_HEADER, REASON_HEADER, preview};
pub use side_output::{SideMessage, SideOutput};
