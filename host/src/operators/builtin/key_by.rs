//! The `key_by` table: repartitions a stream by key over its workers,
//! keyed by the record's key or by a JSON field of its value.

use super::key_from_field_factory;
use crate::config_problem::ConfigProblem;
use crate::failure::FailurePolicy;
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, Shape};
use crate::operators::{NodeKind, OperatorNode, Step};
use serde::Deserialize;

/// The `key_by` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBySpec {
    /// The number of keyed workers (default 1).
    #[serde(default = "one")]
    pub parallelism: usize,
    /// Key by this JSON field (dotted path) of the value; by the record's
    /// key when absent.
    pub field: Option<String>,
    /// What to do with a record without the field (with `field`).
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
    /// The operator's name (what others name as their `input`); `key_by`
    /// when absent.
    pub name: Option<String>,
}

const fn one() -> usize {
    1
}

impl OperatorConfig for KeyBySpec {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn default_name(&self) -> String {
        "key_by".into()
    }

    fn shape(&self) -> Shape<'_> {
        Shape::KeyBy {
            input: self.input.as_ref(),
            inputs: self.inputs.as_ref(),
            parallelism: self.parallelism,
        }
    }

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        cx.check_policy(self.on_error)?;
        cx.check_workers("key_by parallelism", self.parallelism)
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let key = self.field.as_ref().map(|f| {
            let factory = key_from_field_factory(cx.name, f);
            OperatorNode::new(cx.name, NodeKind::Native(factory), self.on_error)
        });
        Ok(Step::KeyBy {
            key,
            parallelism: self.parallelism,
        })
    }

    fn passes_values_on(&self) -> bool {
        true
    }
}
