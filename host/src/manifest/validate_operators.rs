//! Checks of the operator list as a pipeline: what each operator reads,
//! which of its streams are keyed and over how many workers, and unique
//! names. Each operator's own settings (and whether its streams are keyed
//! as it needs) are its kind's to check
//! ([`crate::operators::config::OperatorConfig::check`]).

use super::{Manifest, ManifestError, Stream};
use crate::operators::config::{CheckContext, Shape, SideRead};
use std::collections::HashSet;

pub(super) fn check_operators(m: &mut Manifest) -> Result<(), ManifestError> {
    let count = m.spec.operators.len();
    let mut names = Vec::with_capacity(count);
    let mut seen = HashSet::new();
    // Whether each operator's output is keyed: a `key_by`'s is, and so is
    // that of an operator reading one keyed stream (a union's is not).
    let mut keyed_outputs: Vec<bool> = Vec::with_capacity(count);
    // The keyed workers of each keyed output (a `key_by`'s parallelism).
    let mut keyed_workers: Vec<Option<usize>> = Vec::with_capacity(count);
    let mut inputs = Vec::with_capacity(count);
    for (i, op) in m.spec.operators.iter().enumerate() {
        let span = op.span();
        let config = op.get_ref().config();
        let reads = super::graph::operator_inputs(m, i, op.get_ref(), &span, &names)?;
        let workers_of = |s: &Stream| match s {
            Stream::Operator(o) | Stream::Output(o, _) => keyed_workers[*o],
            Stream::Source(_) => None,
        };
        let shape = config.shape();
        let (keyed, workers) = match shape {
            Shape::KeyBy { parallelism, .. } => {
                (Stream::reads_keyed(&reads, &keyed_outputs), Some(parallelism))
            }
            Shape::Sides { .. } => (
                Stream::reads_keyed(&reads[..1], &keyed_outputs),
                workers_of(&reads[0]),
            ),
            Shape::Stream { .. } => {
                let keyed = Stream::reads_keyed(&reads, &keyed_outputs);
                (keyed, keyed.then(|| workers_of(&reads[0])).flatten())
            }
        };
        // The graph resolved both sides' streams, so both are named.
        let sides = match &shape {
            Shape::Sides { sides } => Some([0, 1].map(|i| SideRead {
                key: sides[i].0,
                stream: sides[i].1.map_or("", String::as_str),
                workers: workers_of(&reads[i]),
            })),
            _ => None,
        };
        let cx = CheckContext {
            kind: op.get_ref().kind(),
            dir: &m.dir,
            dead_letter: m.spec.dead_letter.is_some(),
            late_output: m.spec.late_output.is_some(),
            max_parallelism: m.spec.pipeline.get_ref().max_parallelism as usize,
            keyed,
            sides,
        };
        config.check(&cx).map_err(|p| m.problem_at(&span, p))?;
        if matches!(shape, Shape::KeyBy { .. }) && i + 1 == count {
            return Err(m.error_at(
                &span,
                "type",
                "`key_by` is the last operator: put the keyed operators (e.g. a `reduce`) after it",
            ));
        }
        keyed_outputs.push(workers.is_some());
        keyed_workers.push(workers);
        inputs.push(reads);
        // An explicit name must be unique; a default one gets the operator's
        // position when taken.
        let name = match config.name() {
            Some(n) => n.to_owned(),
            None => {
                let default = config.default_name();
                match seen.contains(&default) {
                    true => format!("{default}-{i}"),
                    false => default,
                }
            }
        };
        if !seen.insert(name.clone()) {
            return Err(m.error_at(
                &span,
                "name",
                format!("operator name `{name}` is used twice: give each operator a unique `name`"),
            ));
        }
        names.push(name);
    }
    m.operator_names = names;
    m.graph = super::graph::finish(m, inputs)?;
    Ok(())
}
