//! `aggregate`: running count, sum, min, max and avg per key, one updated
//! result per record (like a reduce); the accumulators live in the state
//! backend.

use crate::batch::Batch;
use crate::config_problem::ConfigProblem;
use crate::failure::FailurePolicy;
use crate::failure::{FailureHandler, OperatorError};
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, one_stream_table};
use crate::operators::window::{Accumulator, AggregateKind, needs_values, number_of};
use crate::operators::{NativeFactory, NodeKind, Operator, OperatorNode, Step};
use crate::record::Record;
use crate::state::{Answer, KeyEntries, KeyedState, StateRequest, answer, bytes_json};
use serde::Deserialize;
use std::sync::Arc;

/// The `aggregate` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSpec {
    /// The operator's name; `aggregate` when absent.
    pub name: Option<String>,
    /// Any of `count`, `sum`, `min`, `max`, `avg`.
    #[serde(default = "count")]
    pub aggregates: Vec<AggregateKind>,
    /// The JSON field (dotted path) of the number; the value itself as
    /// decimal text when absent.
    pub field: Option<String>,
    /// What to do with a record that has no number.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

fn count() -> Vec<AggregateKind> {
    vec![AggregateKind::Count]
}

impl OperatorConfig for AggregateSpec {
    one_stream_table!("aggregate");

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        cx.needs_keyed()?;
        check_aggregates(&self.aggregates)?;
        cx.check_policy(self.on_error)
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let factory = aggregate_factory(cx.name, self.aggregates.clone(), self.field.clone());
        Ok(Step::Operator {
            node: OperatorNode::new(cx.name, NodeKind::Native(factory), self.on_error),
            parallelism: 1,
        })
    }

    fn keeps_state(&self) -> bool {
        true
    }
}

/// The aggregates a table names: at least one.
pub fn check_aggregates(aggregates: &[AggregateKind]) -> Result<(), ConfigProblem> {
    if aggregates.is_empty() {
        return Err(ConfigProblem::field(
            "aggregates",
            "`aggregates` is empty: name at least one of count, sum, min, max, avg",
        ));
    }
    Ok(())
}

/// Running aggregates per key.
pub struct RunningAggregate {
    name: String,
    aggregates: Vec<AggregateKind>,
    field: Option<String>,
    state: KeyedState,
    failure: FailureHandler,
}

/// Makes the running `aggregates` of each key over the JSON `field` of the
/// values (the value itself when absent), for operator `name`.
pub fn aggregate_factory(name: &str, aggregates: Vec<AggregateKind>, field: Option<String>) -> NativeFactory {
    let name = name.to_owned();
    Arc::new(move |ctx, failure| {
        let state = ctx.open_state(&name)?;
        Ok(Box::new(RunningAggregate::new(
            &name,
            aggregates.clone(),
            field.clone(),
            state,
            failure,
        )))
    })
}

impl RunningAggregate {
    /// The operator `name` computing `aggregates` of `field` (the value
    /// itself when absent), keeping accumulators in `state`.
    pub fn new(
        name: &str,
        aggregates: Vec<AggregateKind>,
        field: Option<String>,
        state: KeyedState,
        failure: FailureHandler,
    ) -> Self {
        Self {
            name: name.to_owned(),
            aggregates,
            field,
            state,
            failure,
        }
    }
}

impl Operator for RunningAggregate {
    fn name(&self) -> &str {
        &self.name
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        crate::operators::snapshot_state(&self.name, &mut self.state, dir)
    }

    fn query_state(&mut self, request: &StateRequest) -> Option<Result<Answer, OperatorError>> {
        let view = |entries: &KeyEntries| {
            Some(match Accumulator::decode(&entries[0].1) {
                Some(acc) => acc.to_json(&self.aggregates),
                None => bytes_json(&entries[0].1),
            })
        };
        Some(answer(&self.state, request, view).map_err(|e| OperatorError::state(&self.name, e)))
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        let needs = needs_values(&self.aggregates);
        for rec in input.into_records() {
            let v = if needs {
                match number_of(&rec, self.field.as_deref()) {
                    Ok(n) => Some(n),
                    Err(reason) => {
                        self.failure.fail(rec, &reason)?;
                        continue;
                    }
                }
            } else {
                None
            };
            let k = self.state.key_entry(rec.key_bytes());
            let stored = self
                .state
                .get(&k)
                .map_err(|e| OperatorError::state(&self.name, e))?;
            let mut acc = stored.and_then(|b| Accumulator::decode(&b)).unwrap_or_default();
            acc.add(v);
            self.state
                .put(&k, &acc.encode())
                .map_err(|e| OperatorError::state(&self.name, e))?;
            let mut json = String::from("{\"key\":");
            json.push_str(&serde_json::Value::from(String::from_utf8_lossy(rec.key_bytes())).to_string());
            json.push(',');
            acc.write_json(&self.aggregates, &mut json);
            json.push('}');
            out.push(Record::new(rec.key, json, rec.timestamp));
        }
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailurePolicy;
    use crate::state::MemoryBackend;
    use bytes::Bytes;

    #[test]
    fn running_aggregates_per_key() {
        let failure = FailureHandler::new("a", FailurePolicy::Skip, None, Default::default());
        let mut a = RunningAggregate::new(
            "a",
            vec![AggregateKind::Count, AggregateKind::Sum, AggregateKind::Max],
            Some("n".into()),
            KeyedState::new(Box::new(MemoryBackend::default()), 1, 128),
            failure,
        );
        let rec =
            |k: &'static str, v: &str| Record::new(Some(Bytes::from_static(k.as_bytes())), v.to_owned(), 0);
        let input = vec![
            rec("x", r#"{"n":3}"#),
            rec("y", r#"{"n":1}"#),
            rec("x", r#"{"n":-1}"#),
            rec("x", "{}"),
        ];
        let out = a.process(Batch::Records(input)).unwrap().into_records();
        let values: Vec<String> = out
            .iter()
            .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
            .collect();
        assert_eq!(
            values,
            [
                r#"{"key":"x","count":1,"sum":3,"max":3}"#,
                r#"{"key":"y","count":1,"sum":1,"max":1}"#,
                r#"{"key":"x","count":2,"sum":2,"max":3}"#,
            ]
        );
    }
}
