//! `field_filter`: keeps the records whose JSON field compares true.

use super::json_of;
use crate::batch::Batch;
use crate::config_problem::ConfigProblem;
use crate::failure::FailurePolicy;
use crate::failure::{FailureHandler, OperatorError};
use crate::json::field;
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, one_stream_table};
use crate::operators::{NativeFactory, NodeKind, Operator, OperatorNode, Step};
use serde::Deserialize;
use serde_json::Value;
use std::cmp::Ordering;
use std::sync::Arc;

/// The `field_filter` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldFilterSpec {
    /// The operator's name; `field_filter` when absent.
    pub name: Option<String>,
    /// The JSON field (dotted path) to compare.
    pub field: String,
    /// `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `exists` or `regex`.
    pub op: Compare,
    /// The constant to compare with (a pattern for `regex`; none for
    /// `exists`).
    pub value: Option<toml::Value>,
    /// What to do with a record whose value is not JSON.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

impl OperatorConfig for FieldFilterSpec {
    one_stream_table!("field_filter");

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        cx.check_policy(self.on_error)?;
        Condition::of_table(&self.field, self.op, self.value.as_ref()).map(|_| ())
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let value = self.value.as_ref().map_or(Value::Null, crate::json::from_toml);
        let factory = field_filter_factory(cx.name, &self.field, self.op, value);
        Ok(Step::Operator {
            node: OperatorNode::new(cx.name, NodeKind::Native(factory), self.on_error),
            parallelism: 1,
        })
    }

    fn passes_values_on(&self) -> bool {
        true
    }
}

/// How a field is compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compare {
    /// Equal to the value.
    Eq,
    /// Not equal to the value (a missing field is not equal).
    Ne,
    /// Less than.
    Lt,
    /// Less than or equal.
    Le,
    /// Greater than.
    Gt,
    /// Greater than or equal.
    Ge,
    /// The field is present (any value, `null` included).
    Exists,
    /// The field is a string matching the regular expression.
    Regex,
}

/// One JSON field compared with a constant: a `field_filter`'s test, and
/// a `branch`'s.
#[derive(Debug, Clone)]
pub struct Condition {
    field: String,
    compare: Compare,
    value: Value,
    regex: Option<regex::Regex>,
}

/// Keeps records by comparing one JSON field with a constant.
pub struct FieldFilter {
    name: String,
    condition: Condition,
    failure: FailureHandler,
}

/// Numbers compare as numbers, strings as strings, booleans as booleans;
/// anything else (or mixed kinds) only by equality.
fn order(a: &Value, b: &Value) -> Option<Ordering> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64()?.partial_cmp(&y.as_f64()?),
        (Value::String(x), Value::String(y)) => Some(x.cmp(y)),
        (Value::Bool(x), Value::Bool(y)) => Some(x.cmp(y)),
        _ => (a == b).then_some(Ordering::Equal),
    }
}

/// Makes the filter of operator `name`; `value` was checked by
/// [`FieldFilter::new`] when the pipeline was built.
pub fn field_filter_factory(name: &str, field: &str, compare: Compare, value: Value) -> NativeFactory {
    let (name, field) = (name.to_owned(), field.to_owned());
    Arc::new(move |_, failure| {
        let filter = FieldFilter::new(&name, &field, compare, value.clone(), failure)
            .expect("checked when the pipeline was built");
        Ok(Box::new(filter))
    })
}

impl Condition {
    /// The condition a table writes as `field`, `op` and `value` (no
    /// value for `exists`; a valid pattern for `regex`).
    pub fn of_table(field: &str, op: Compare, value: Option<&toml::Value>) -> Result<Self, ConfigProblem> {
        let value = match (value, op) {
            (None, Compare::Exists) => Value::Null,
            (None, op) => {
                return Err(ConfigProblem::field(
                    "op",
                    format!("`op = \"{op:?}\"` needs a `value` to compare with").to_lowercase(),
                ));
            }
            (Some(v), _) => crate::json::from_toml(v),
        };
        Self::new(field, op, value).map_err(|e| ConfigProblem::field("value", e))
    }

    /// `field` `compare`d with `value` (a pattern string for `regex`).
    pub fn new(field: &str, compare: Compare, value: Value) -> Result<Self, String> {
        let regex = match (compare, &value) {
            (Compare::Regex, Value::String(p)) => {
                Some(regex::Regex::new(p).map_err(|e| format!("invalid regex `{p}`: {e}"))?)
            }
            (Compare::Regex, other) => return Err(format!("a regex must be a string, not {other}")),
            _ => None,
        };
        Ok(Self {
            field: field.to_owned(),
            compare,
            value,
            regex,
        })
    }

    /// Whether `doc` meets the condition (a missing field never does).
    pub fn holds(&self, doc: &Value) -> bool {
        let Some(v) = field(doc, &self.field) else {
            return false;
        };
        match self.compare {
            Compare::Exists => true,
            Compare::Regex => v
                .as_str()
                .zip(self.regex.as_ref())
                .is_some_and(|(s, re)| re.is_match(s)),
            Compare::Eq => order(v, &self.value) == Some(Ordering::Equal),
            Compare::Ne => order(v, &self.value) != Some(Ordering::Equal),
            Compare::Lt => order(v, &self.value) == Some(Ordering::Less),
            Compare::Le => matches!(order(v, &self.value), Some(Ordering::Less | Ordering::Equal)),
            Compare::Gt => order(v, &self.value) == Some(Ordering::Greater),
            Compare::Ge => matches!(order(v, &self.value), Some(Ordering::Greater | Ordering::Equal)),
        }
    }
}

/// As a manifest writes it: `amount gt 100`, `id exists`.
impl std::fmt::Display for Condition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let op = format!("{:?}", self.compare).to_lowercase();
        match self.compare {
            Compare::Exists => write!(f, "{} {op}", self.field),
            _ => write!(f, "{} {op} {}", self.field, self.value),
        }
    }
}

impl FieldFilter {
    /// A filter keeping records whose `field` `compare`s true with `value`
    /// (a pattern string for `regex`); records that are not JSON go to
    /// `failure`.
    pub fn new(
        name: &str,
        field: &str,
        compare: Compare,
        value: Value,
        failure: FailureHandler,
    ) -> Result<Self, String> {
        Ok(Self {
            name: name.to_owned(),
            condition: Condition::new(field, compare, value)?,
            failure,
        })
    }
}

impl Operator for FieldFilter {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        for rec in input.into_records() {
            match json_of(&rec) {
                Ok(doc) => {
                    if self.condition.holds(&doc) {
                        out.push(rec);
                    }
                }
                Err(reason) => self.failure.fail(rec, &reason)?,
            }
        }
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailurePolicy;
    use crate::record::Record;
    use serde_json::json;

    fn kept(compare: Compare, value: Value, docs: &[&str]) -> Vec<String> {
        let failure = FailureHandler::new("f", FailurePolicy::Skip, None, Default::default());
        let mut f = FieldFilter::new("f", "a.b", compare, value, failure).unwrap();
        let input = docs.iter().map(|d| Record::new(None, d.to_string(), 0)).collect();
        f.process(Batch::Records(input))
            .unwrap()
            .into_records()
            .iter()
            .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn comparisons_follow_the_value_kinds() {
        let docs = [
            r#"{"a":{"b":1}}"#,
            r#"{"a":{"b":5}}"#,
            r#"{"a":{"b":"x"}}"#,
            r#"{"a":{}}"#,
            "not json",
        ];
        assert_eq!(kept(Compare::Gt, json!(2), &docs), [docs[1]]);
        assert_eq!(kept(Compare::Le, json!(1.0), &docs), [docs[0]]);
        assert_eq!(kept(Compare::Eq, json!("x"), &docs), [docs[2]]);
        assert_eq!(kept(Compare::Ne, json!(1), &docs), [docs[1], docs[2]]);
        assert_eq!(
            kept(Compare::Exists, Value::Null, &docs),
            [docs[0], docs[1], docs[2]]
        );
        assert_eq!(kept(Compare::Regex, json!("^x$"), &docs), [docs[2]]);
    }

    #[test]
    fn a_bad_regex_is_refused() {
        let failure = FailureHandler::new("f", FailurePolicy::Skip, None, Default::default());
        let err = FieldFilter::new("f", "a", Compare::Regex, json!("("), failure)
            .err()
            .unwrap();
        assert!(err.contains("invalid regex `(`"), "{err}");
    }
}
