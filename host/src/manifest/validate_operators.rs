//! Checks of the operator list as a pipeline: what each operator reads,
//! whether its streams are keyed as it needs, and unique names. Each
//! operator's own settings are its kind's to check
//! ([`crate::operators::config::OperatorConfig::check`]).

use super::{Manifest, ManifestError, Stream};
use crate::operators::config::{CheckContext, Shape};
use std::collections::HashSet;
use std::ops::Range;

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
        let first_keyed = Stream::reads_keyed(&reads[..1], &keyed_outputs);
        let (keyed, workers) = match config.shape() {
            Shape::KeyBy { parallelism, .. } => {
                (Stream::reads_keyed(&reads, &keyed_outputs), Some(parallelism))
            }
            Shape::Sides { sides, keyed } => {
                if keyed {
                    let workers = [workers_of(&reads[0]), workers_of(&reads[1])];
                    check_sides(m, &span, op.get_ref().kind(), sides, workers)?;
                }
                (first_keyed, workers_of(&reads[0]))
            }
            Shape::Stream { .. } => {
                let keyed = Stream::reads_keyed(&reads, &keyed_outputs);
                (keyed, keyed.then(|| workers_of(&reads[0])).flatten())
            }
        };
        let cx = CheckContext {
            dir: &m.dir,
            dead_letter: m.spec.dead_letter.is_some(),
            late_output: m.spec.late_output.is_some(),
            max_parallelism: m.spec.pipeline.get_ref().max_parallelism as usize,
            keyed,
        };
        config.check(&cx).map_err(|p| m.problem_at(&span, p))?;
        if matches!(config.shape(), Shape::KeyBy { .. }) && i + 1 == count {
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

/// An operator of two keyed streams (`what`; `sides`: key and stream, by
/// side) reads streams keyed over the same workers (`workers`, by side).
fn check_sides(
    m: &Manifest,
    span: &Range<usize>,
    what: &str,
    sides: [(&'static str, Option<&String>); 2],
    workers: [Option<usize>; 2],
) -> Result<(), ManifestError> {
    for ((key, name), side) in sides.into_iter().zip(workers) {
        if side.is_none() {
            let name = name.map_or("", String::as_str);
            return Err(m.error_at(
                span,
                key,
                format!("`{what}` needs keyed streams: `{name}` is not keyed; read a `key_by`'s output"),
            ));
        }
    }
    if let [Some(l), Some(r)] = workers
        && l != r
    {
        return Err(m.error_at(
            span,
            sides[1].0,
            format!("the two sides of `{what}` are keyed over {l} and {r} workers: give their `key_by`s the same parallelism"),
        ));
    }
    Ok(())
}
