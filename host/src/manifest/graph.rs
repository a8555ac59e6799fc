//! The pipeline's graph as the manifest draws it: named sources, operators
//! reading the streams they name (by default the operator before them),
//! and sinks reading the streams they name (by default the last operator).
//!
//! Checked here: every name unique and well formed, every `input` known,
//! every stream read by something. An operator reads only sources and
//! operators written before it, so the graph cannot have a cycle.

use super::spec::{OperatorSpec, SinkSpec, SourceSpec};
use super::{Manifest, ManifestError};
use crate::operators::branch::DEFAULT_OUTPUT;
use crate::operators::config::Shape;
use std::collections::HashSet;
use std::ops::Range;

/// A stream an operator or sink reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    /// The output of source `i` (in the manifest's order).
    Source(usize),
    /// The output of operator `i` (in the manifest's order).
    Operator(usize),
    /// Output `n` of operator `i`, a branch (its branches in order, then
    /// the default).
    Output(usize, usize),
}

impl Stream {
    /// Whether what reads `reads` reads a keyed stream: a single stream,
    /// the output of an operator whose output is keyed (`keyed_outputs`,
    /// by operator). A union is never keyed.
    pub fn reads_keyed(reads: &[Stream], keyed_outputs: &[bool]) -> bool {
        matches!(reads, [Stream::Operator(o) | Stream::Output(o, _)] if keyed_outputs[*o])
    }

    /// The operator writing it, if any.
    pub fn operator(self) -> Option<usize> {
        match self {
            Stream::Source(_) => None,
            Stream::Operator(o) | Stream::Output(o, _) => Some(o),
        }
    }
}

/// The streams of `sources` sources and `operators` operators that none of
/// `reads` (what each operator and sink reads) reads: sources first, each
/// in order. A branch is read when one of its outputs is.
pub fn unread<'a>(
    sources: usize,
    operators: usize,
    reads: impl IntoIterator<Item = &'a Vec<Stream>>,
) -> Vec<Stream> {
    let read: HashSet<Stream> = reads
        .into_iter()
        .flatten()
        .map(|s| match *s {
            Stream::Output(o, _) => Stream::Operator(o),
            s => s,
        })
        .collect();
    let all = (0..sources)
        .map(Stream::Source)
        .chain((0..operators).map(Stream::Operator));
    all.filter(|s| !read.contains(s)).collect()
}

/// The graph of a validated manifest.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Graph {
    /// The streams each operator reads, by operator (several: their union).
    pub operator_inputs: Vec<Vec<Stream>>,
    /// The streams each sink reads, by sink (several: their union).
    pub sink_inputs: Vec<Vec<Stream>>,
}

/// A source or sink as declared: its name, its table, what it is.
#[derive(Debug)]
pub struct Declared<'a, T> {
    /// Its name (`source` or `sink` for the linear form's one).
    pub name: &'a str,
    /// The span of its table in the manifest.
    pub span: Range<usize>,
    /// What it is.
    pub spec: &'a T,
}

impl Manifest {
    /// The sources, in order: `[source]` (named `source`) or `[[sources]]`.
    pub fn sources(&self) -> Vec<Declared<'_, SourceSpec>> {
        let linear = self.spec.source.iter().map(|s| Declared {
            name: "source",
            span: s.span(),
            spec: s.get_ref(),
        });
        let named = self.spec.sources.iter().map(|s| Declared {
            name: &s.get_ref().name,
            span: s.span(),
            spec: &s.get_ref().spec,
        });
        linear.chain(named).collect()
    }

    /// The sinks, in order: `[sink]` (named `sink`) or `[[sinks]]`.
    pub fn sinks(&self) -> Vec<Declared<'_, SinkSpec>> {
        let linear = self.spec.sink.iter().map(|s| Declared {
            name: "sink",
            span: s.span(),
            spec: s.get_ref(),
        });
        let named = self.spec.sinks.iter().map(|s| Declared {
            name: &s.get_ref().name,
            span: s.span(),
            spec: &s.get_ref().spec,
        });
        linear.chain(named).collect()
    }
}

/// Names the side outputs' sinks take in checkpoints.
const RESERVED: [&str; 2] = ["dead-letter", "late-output"];

/// Checks the sources' and sinks' sections: one form of each, names well
/// formed and unique among them.
pub(super) fn check_ends(m: &Manifest) -> Result<(), ManifestError> {
    let at_top = |message: &str| ManifestError::at(&m.file, &m.text, 0, message.to_owned());
    match (&m.spec.source, m.spec.sources.first()) {
        (None, None) => {
            return Err(at_top(
                "the pipeline has no source: add `[source]` (or named `[[sources]]`)",
            ));
        }
        (Some(s), Some(_)) => {
            return Err(m.error_at(&s.span(), "type", "give `[source]` or `[[sources]]`, not both"));
        }
        _ => {}
    }
    match (&m.spec.sink, m.spec.sinks.first()) {
        (None, None) => {
            return Err(at_top(
                "the pipeline has no sink: add `[sink]` (or named `[[sinks]]`)",
            ));
        }
        (Some(s), Some(_)) => {
            return Err(m.error_at(&s.span(), "type", "give `[sink]` or `[[sinks]]`, not both"));
        }
        _ => {}
    }
    let mut seen = HashSet::new();
    for end in m
        .sources()
        .iter()
        .map(|s| (s.name, &s.span))
        .chain(m.sinks().iter().map(|s| (s.name, &s.span)))
    {
        let (name, span) = end;
        check_name(m, name, span)?;
        if !seen.insert(name) {
            return Err(m.error_at(
                span,
                "name",
                format!("the name `{name}` is used twice: give each source and sink a unique `name`"),
            ));
        }
    }
    let exactly_once: Vec<_> = m
        .sinks()
        .into_iter()
        .filter(|s| s.spec.config().commits_with_checkpoints())
        .collect();
    if let [_, second, ..] = exactly_once.as_slice() {
        return Err(m.error_at(
            &second.span,
            "exactly_once",
            "only one sink of a pipeline can write exactly once: its transactions commit with the checkpoints; write the others at least once",
        ));
    }
    Ok(())
}

fn check_name(m: &Manifest, name: &str, span: &Range<usize>) -> Result<(), ManifestError> {
    let well_formed = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    let generated = ["stage-", "keyed-"]
        .iter()
        .any(|p| name.strip_prefix(p).is_some_and(|n| n.parse::<u32>().is_ok()));
    if !well_formed {
        return Err(m.error_at(
            span,
            "name",
            format!("the name `{name}` is invalid: use letters, digits, `-` and `_`"),
        ));
    }
    if generated || RESERVED.contains(&name) {
        return Err(m.error_at(
            span,
            "name",
            format!(
                "the name `{name}` is reserved for the pipeline's own stages and side outputs: choose another"
            ),
        ));
    }
    Ok(())
}

/// What operator `i` reads, from its `input` or `inputs`, resolved against
/// the sources and the operators before it (`earlier`, by name).
pub(super) fn operator_inputs(
    m: &Manifest,
    i: usize,
    op: &OperatorSpec,
    span: &Range<usize>,
    earlier: &[String],
) -> Result<Vec<Stream>, ManifestError> {
    let default = match i {
        0 => None,
        _ => Some(Stream::Operator(i - 1)),
    };
    let (input, inputs) = match op.config().shape() {
        Shape::Stream { input, inputs, .. } | Shape::KeyBy { input, inputs, .. } => (input, inputs),
        Shape::Sides { sides } => {
            // Two inputs told apart: the first side is input 0, the other 1.
            let mut named = Vec::with_capacity(2);
            for (key, name) in sides {
                let Some(name) = name else {
                    return Err(m.error_at(
                        span,
                        "type",
                        format!(
                            "a `{}` reads two keyed streams: give its `{}` and `{}` (`{key}` is missing)",
                            op.kind(),
                            sides[0].0,
                            sides[1].0
                        ),
                    ));
                };
                named.push((key, name));
            }
            let which = "an operator before it";
            return named
                .into_iter()
                .map(|(key, name)| stream_named(m, span, key, name, earlier, which))
                .collect();
        }
    };
    resolve(m, span, input, inputs, default, earlier, "an operator before it")
}

/// The stream named `name` at `key`: the operator of that name among
/// `operators` (`<branch>.<output>` for an output of a branch), else the
/// source.
fn stream_named(
    m: &Manifest,
    span: &Range<usize>,
    key: &str,
    name: &str,
    operators: &[String],
    which_operators: &str,
) -> Result<Stream, ManifestError> {
    if let Some((operator, output)) = name.split_once('.')
        && let Some(i) = operators.iter().position(|o| o == operator)
    {
        let Some(outputs) = branch_outputs(m, i) else {
            return Err(m.error_at(
                span,
                key,
                format!("`{name}`: operator `{operator}` has one output, read as `{operator}`; only a `branch` has named outputs"),
            ));
        };
        return match outputs.iter().position(|o| *o == output) {
            Some(n) => Ok(Stream::Output(i, n)),
            None if output == DEFAULT_OUTPUT => Ok(Stream::Output(i, outputs.len())),
            None => Err(m.error_at(
                span,
                key,
                format!(
                    "branch `{operator}` has no output `{output}`: its outputs are {}",
                    output_list(operator, &outputs)
                ),
            )),
        };
    }
    if let Some(i) = operators.iter().position(|o| o == name) {
        if let Some(outputs) = branch_outputs(m, i) {
            return Err(m.error_at(
                span,
                key,
                format!(
                    "`{name}` is a branch: read one of its outputs, {}",
                    output_list(name, &outputs)
                ),
            ));
        }
        Ok(Stream::Operator(i))
    } else if let Some(i) = m.sources().iter().position(|s| s.name == name) {
        Ok(Stream::Source(i))
    } else {
        Err(m.error_at(
            span,
            key,
            format!("`{name}` is neither a source nor {which_operators}: name one of those"),
        ))
    }
}

/// The names of operator `i`'s branches, when it is a branch.
fn branch_outputs(m: &Manifest, i: usize) -> Option<Vec<&str>> {
    m.spec.operators[i].get_ref().config().outputs()
}

/// A branch's outputs as the names to read them by.
fn output_list(branch: &str, outputs: &[&str]) -> String {
    let all: Vec<String> = outputs
        .iter()
        .chain(&[DEFAULT_OUTPUT])
        .map(|o| format!("`{branch}.{o}`"))
        .collect();
    all.join(", ")
}

/// Resolves a table's `input` / `inputs` (or takes `default`, else the one
/// source).
fn resolve(
    m: &Manifest,
    span: &Range<usize>,
    input: Option<&String>,
    inputs: Option<&Vec<String>>,
    default: Option<Stream>,
    operators: &[String],
    which_operators: &str,
) -> Result<Vec<Stream>, ManifestError> {
    let sources = m.sources();
    let names: Vec<&String> = match (input, inputs) {
        (Some(_), Some(_)) => return Err(m.error_at(span, "inputs", "give `input` or `inputs`, not both")),
        (Some(one), None) => vec![one],
        (None, Some(many)) if many.is_empty() => {
            return Err(m.error_at(span, "inputs", "`inputs` is empty: name the streams to read"));
        }
        (None, Some(many)) => many.iter().collect(),
        (None, None) => {
            return match (default, sources.as_slice()) {
                (Some(d), _) => match d.operator().and_then(|b| Some((b, branch_outputs(m, b)?))) {
                    Some((b, outputs)) => Err(m.error_at(
                        span,
                        "type",
                        format!(
                            "the operator before it is the branch `{}`: name the output this reads in `input`, one of {}",
                            operators[b],
                            output_list(&operators[b], &outputs)
                        ),
                    )),
                    None => Ok(vec![d]),
                },
                (None, [_]) => Ok(vec![Stream::Source(0)]),
                (None, _) => Err(m.error_at(
                    span,
                    "type",
                    "with several sources, say which this reads: `input = \"<source>\"`, or `inputs = [...]` for their union",
                )),
            };
        }
    };
    let mut streams = Vec::with_capacity(names.len());
    let key = if inputs.is_some() { "inputs" } else { "input" };
    for name in names {
        let stream = stream_named(m, span, key, name, operators, which_operators)?;
        if streams.contains(&stream) {
            return Err(m.error_at(span, "inputs", format!("`{name}` is named twice in `inputs`")));
        }
        streams.push(stream);
    }
    Ok(streams)
}

/// The whole graph, once every operator's inputs are known: the sinks'
/// inputs resolved, names unique across sources, operators and sinks, and
/// every stream read.
pub(super) fn finish(m: &Manifest, operator_inputs: Vec<Vec<Stream>>) -> Result<Graph, ManifestError> {
    let sources = m.sources();
    for s in &sources {
        if let Some(i) = m.operator_names.iter().position(|o| o == s.name) {
            let span = m.spec.operators[i].span();
            return Err(m.error_at(
                &span,
                "name",
                format!(
                    "operator name `{}` is a source's name too: give each a unique `name`",
                    s.name
                ),
            ));
        }
    }
    let last = m.operator_names.len().checked_sub(1).map(Stream::Operator);
    let mut sink_inputs = Vec::new();
    for (i, sink) in m.sinks().iter().enumerate() {
        if m.operator_names.iter().any(|o| o == sink.name) {
            return Err(m.error_at(
                &sink.span,
                "name",
                format!(
                    "sink name `{}` is an operator's name too: give each a unique `name`",
                    sink.name
                ),
            ));
        }
        let (input, inputs) = match m.spec.sinks.get(i) {
            Some(named) if m.spec.sink.is_none() => {
                (named.get_ref().input.as_ref(), named.get_ref().inputs.as_ref())
            }
            _ => (None, None),
        };
        sink_inputs.push(resolve(
            m,
            &sink.span,
            input,
            inputs,
            last,
            &m.operator_names,
            "an operator",
        )?);
    }
    let reads = operator_inputs.iter().chain(&sink_inputs);
    match unread(sources.len(), m.operator_names.len(), reads).first() {
        Some(Stream::Source(i)) => {
            let s = &sources[*i];
            return Err(m.error_at(
                &s.span,
                "name",
                format!(
                    "nothing reads source `{}`: name it in an operator's or a sink's `input`",
                    s.name
                ),
            ));
        }
        Some(Stream::Operator(i) | Stream::Output(i, _)) => {
            let (span, name) = (m.spec.operators[*i].span(), &m.operator_names[*i]);
            return Err(m.error_at(&span, "name", format!("nothing reads the output of operator `{name}`: name it in a later operator's or a sink's `input`")));
        }
        None => {}
    }
    Ok(Graph {
        operator_inputs,
        sink_inputs,
    })
}
