//! The call pattern every plugin operator shares: one call for the whole
//! batch; when that call fails (a trap, a missed deadline, a malformed
//! output), one call per record, so the failure lands on the record that
//! caused it and the others go through.

use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::plugin::{CallMode, PluginError};
use crate::record::Record;

/// What a plugin operator provides to [`process`].
pub(super) trait PluginCalls {
    /// The operator's name, for logs and errors.
    fn operator_name(&self) -> &str;

    /// How the operator crosses into its plugin.
    fn call_mode(&self) -> CallMode;

    /// One call for the whole batch: its output, or why the call failed and
    /// the input back.
    fn whole(&mut self, input: Batch) -> Result<Result<Batch, (String, Batch)>, OperatorError>;

    /// One call for one record, its output pushed to `out`; a failure goes to
    /// the operator's policy.
    fn single(&mut self, rec: Record, out: &mut Vec<Record>) -> Result<(), OperatorError>;
}

/// Runs a batch through a plugin operator.
pub(super) fn process(op: &mut impl PluginCalls, input: Batch) -> Result<Batch, OperatorError> {
    let input = match op.call_mode() {
        CallMode::Record => input,
        CallMode::Batch => match op.whole(input)? {
            Ok(output) => return Ok(output),
            Err((reason, input)) => {
                tracing::warn!(operator = %op.operator_name(), %reason, records = input.len(),
                    "batch call failed; retrying its records one by one");
                input
            }
        },
    };
    let mut out = Vec::with_capacity(input.len());
    for rec in input.into_records() {
        op.single(rec, &mut out)?;
    }
    Ok(Batch::Records(out))
}

/// A plugin that cannot even be instantiated stops the operator.
pub fn fatal(operator: &str, e: PluginError) -> OperatorError {
    OperatorError::Plugin {
        operator: operator.to_owned(),
        reason: e.to_string(),
    }
}
