//! `branch`: one stream into several. Each branch has a predicate (a
//! condition on a JSON field, a `filter`-world plugin, or a closure of the
//! builder); a record goes to the first branch whose predicate holds, or
//! to the default output when none does. Predicates are tried in order on
//! the records the branches before them did not take, so each record is
//! tested at most once per predicate and lands in exactly one output (or,
//! when a predicate fails on it, with the operator's failure policy). A
//! branch ends its stage: the stage's outlet hands each output's records to
//! the readers of that output only, so what one reader filters never holds
//! a record back from another.

use super::Operator;
use super::builtin::{Condition, json_of};
use super::factory::{InstantiateError, OperatorIdentity};
use super::wasm::WasmPredicate;
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::plugin::{CallMode, LoadedPlugin, PluginLimits};
use crate::record::Record;
use std::sync::Arc;

mod table;
pub use table::{BranchOperatorSpec, BranchSpec};

/// The name of the output taking what no branch takes.
pub const DEFAULT_OUTPUT: &str = "default";

/// Tests records for one branch.
pub trait Predicate: Send {
    /// For each record of `batch`, whether it holds; `None` for a record
    /// the test failed on, which was handed to `failure`.
    fn test(&mut self, batch: &Batch, failure: &FailureHandler) -> Result<Vec<Option<bool>>, OperatorError>;
}

impl Predicate for Condition {
    fn test(&mut self, batch: &Batch, failure: &FailureHandler) -> Result<Vec<Option<bool>>, OperatorError> {
        let mut verdicts = Vec::with_capacity(batch.len());
        batch.try_for_each(|rec| {
            verdicts.push(match json_of(rec) {
                Ok(doc) => Some(self.holds(&doc)),
                Err(reason) => {
                    failure.fail(rec.clone(), &reason)?;
                    None
                }
            });
            Ok(())
        })?;
        Ok(verdicts)
    }
}

/// A closure of the builder as a predicate.
pub type RecordPredicate = Arc<dyn Fn(&Record) -> bool + Send + Sync>;

struct Native(RecordPredicate);

impl Predicate for Native {
    fn test(&mut self, batch: &Batch, _: &FailureHandler) -> Result<Vec<Option<bool>>, OperatorError> {
        let mut verdicts = Vec::with_capacity(batch.len());
        batch.try_for_each(|rec| {
            verdicts.push(Some((self.0)(rec)));
            Ok::<_, OperatorError>(())
        })?;
        Ok(verdicts)
    }
}

/// What one branch tests, as planned.
#[derive(Clone)]
pub enum PredicateNode {
    /// A JSON field compared with a constant.
    Field(Condition),
    /// A plugin of the `filter` world: the records it keeps.
    Plugin {
        /// The compiled plugin.
        plugin: Arc<LoadedPlugin>,
        /// Limits of each instance.
        limits: PluginLimits,
        /// How calls cross into it.
        mode: CallMode,
    },
    /// A closure of the builder.
    Native(RecordPredicate),
}

/// A branch of a pipeline: its outputs' names and their predicates.
pub struct BranchNode {
    /// Each branch's name and predicate, in order; the default output
    /// comes after them.
    pub branches: Vec<(String, PredicateNode)>,
}

impl BranchNode {
    /// The name of output `n`: a branch's, or the default.
    pub fn output_name(&self, n: usize) -> &str {
        self.branches.get(n).map_or(DEFAULT_OUTPUT, |(name, _)| name)
    }

    /// The number of output `name`, if it has one.
    pub fn output_of(&self, name: &str) -> Option<usize> {
        match name {
            DEFAULT_OUTPUT => Some(self.branches.len()),
            _ => self.branches.iter().position(|(n, _)| n == name),
        }
    }

    /// A new instance for one worker.
    pub fn instantiate(
        &self,
        node: &OperatorIdentity<'_>,
        failure: FailureHandler,
    ) -> Result<Box<dyn Operator>, InstantiateError> {
        let mut predicates: Vec<Box<dyn Predicate>> = Vec::with_capacity(self.branches.len());
        for (_, p) in &self.branches {
            predicates.push(match p {
                PredicateNode::Field(c) => Box::new(c.clone()),
                PredicateNode::Plugin { plugin, limits, mode } => Box::new(WasmPredicate::new(
                    node.name,
                    node.plugin_instance(plugin, *limits)?,
                    *mode,
                )),
                PredicateNode::Native(f) => Box::new(Native(f.clone())),
            });
        }
        Ok(Box::new(Branch::new(node.name, predicates, failure)))
    }
}

/// One worker's branch.
pub struct Branch {
    name: String,
    predicates: Vec<Box<dyn Predicate>>,
    failure: FailureHandler,
}

impl Branch {
    /// The branch `name` trying `predicates` in order; records a
    /// predicate fails on go to `failure`.
    pub fn new(name: &str, predicates: Vec<Box<dyn Predicate>>, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            predicates,
            failure,
        }
    }
}

impl Operator for Branch {
    fn name(&self) -> &str {
        &self.name
    }

    fn outputs(&self) -> usize {
        self.predicates.len() + 1
    }

    /// Every output's records, one after another (a branch's stage sends
    /// them apart through [`Operator::split`]).
    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let parts = self.split(input)?;
        Ok(Batch::Records(
            parts.into_iter().flat_map(Batch::into_records).collect(),
        ))
    }

    fn split(&mut self, input: Batch) -> Result<Vec<Batch>, OperatorError> {
        self.failure.count_records(input.len());
        let default = self.predicates.len();
        // Each record's output; the default until a branch takes it.
        let mut output: Vec<Option<usize>> = vec![Some(default); input.len()];
        // The records no branch has taken yet (all at first).
        let mut open: Vec<usize> = (0..input.len()).collect();
        for (n, predicate) in self.predicates.iter_mut().enumerate() {
            if open.is_empty() {
                break;
            }
            let verdicts = match open.len() == input.len() {
                true => predicate.test(&input, &self.failure)?,
                false => {
                    let mut keep = vec![false; input.len()];
                    open.iter().for_each(|&i| keep[i] = true);
                    predicate.test(&input.clone().select(&keep), &self.failure)?
                }
            };
            let mut still_open = Vec::with_capacity(open.len());
            for (&i, verdict) in open.iter().zip(verdicts) {
                match verdict {
                    Some(true) => output[i] = Some(n),
                    Some(false) => still_open.push(i),
                    None => output[i] = None,
                }
            }
            open = still_open;
        }
        Ok(input.partition(default + 1, &output))
    }
}

#[cfg(test)]
mod tests;
