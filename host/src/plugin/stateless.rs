//! Map, filter and flat-map operators backed by a plugin.

use super::outcome::{Outcome, RecordOutcome, encode_records};
use super::{CallMode, PluginError, PluginInstance};
use crate::operator::{FailureHandler, Operator, OperatorError};
use crate::record::Record;

/// A stateless operator whose logic is a plugin of the map, filter or
/// flat-map world.
pub struct WasmStateless {
    name: String,
    instance: PluginInstance,
    mode: CallMode,
    failure: FailureHandler,
}

impl WasmStateless {
    /// The operator `name` calling `instance` in `mode`.
    pub fn new(name: &str, instance: PluginInstance, mode: CallMode, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            instance,
            mode,
            failure,
        }
    }

    fn fatal(&self, e: PluginError) -> OperatorError {
        OperatorError::Plugin {
            operator: self.name.clone(),
            reason: e.to_string(),
        }
    }

    fn one(&mut self, rec: &Record) -> Result<RecordOutcome, OperatorError> {
        let res = match self.mode {
            CallMode::Record => self.instance.one_outcome(rec, None),
            CallMode::Batch => self
                .instance
                .batch_outcomes(&encode_records(std::slice::from_ref(rec)), 1)
                .map(|r| r.and_then(|mut o| o.next().expect("one outcome"))),
        };
        res.map_err(|e| self.fatal(e))
    }

    fn apply(&self, rec: Record, outcome: RecordOutcome, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        match outcome {
            Ok(Outcome::Record(r)) => out.push(r),
            Ok(Outcome::Keep(keep)) => {
                if keep {
                    out.push(rec);
                }
            }
            Ok(Outcome::Records(rs)) => out.extend(rs),
            Ok(Outcome::Accumulator(_)) => unreachable!("decoded by a stateless world"),
            Err(reason) => self.failure.fail(rec, &reason)?,
        }
        Ok(())
    }
}

impl Operator for WasmStateless {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> Result<(), OperatorError> {
        if self.mode == CallMode::Batch {
            let encoded = encode_records(&input);
            match self.instance.batch_outcomes(&encoded, input.len()) {
                Err(e) => return Err(self.fatal(e)),
                Ok(Ok(outcomes)) => {
                    for (rec, outcome) in input.into_iter().zip(outcomes) {
                        self.apply(rec, outcome, out)?;
                    }
                    return Ok(());
                }
                Ok(Err(reason)) => {
                    tracing::warn!(operator = %self.name, %reason, records = input.len(),
                        "batch call failed; retrying its records one by one");
                }
            }
        }
        for rec in input {
            let outcome = self.one(&rec)?;
            self.apply(rec, outcome, out)?;
        }
        Ok(())
    }
}
