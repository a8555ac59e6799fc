//! What a manifest may have wrong without being invalid: a `state_ttl`
//! entry naming a state the plugin never uses, a `project` or `rename`
//! field no record has. Both would do nothing, silently; `mailer validate`
//! prints these warnings and `mailer run` logs them before it starts.

use super::OperatorStage;
use crate::connectors::FileFormat;
use crate::manifest::{Manifest, SourceSpec, Stream};
use crate::operators::NodeKind;
use std::io::BufRead;

/// Records of a file source read to check the fields a `project` or
/// `rename` reading it names.
const SAMPLE_RECORDS: usize = 100;

/// The warnings about `m`, planned as `stages`.
pub(super) fn warnings(m: &Manifest, stages: &[OperatorStage]) -> Vec<String> {
    let mut warnings = unknown_state_ttl(stages);
    warnings.extend(unmatched_fields(m));
    warnings
}

/// A `state_ttl` entry naming a state the plugin does not declare (a
/// plugin declaring none, like a Python or JavaScript one, is not checked).
fn unknown_state_ttl(stages: &[OperatorStage]) -> Vec<String> {
    let mut warnings = Vec::new();
    for op in stages.iter().flat_map(|s| &s.operators) {
        let NodeKind::Plugin(node) = &op.kind else {
            continue;
        };
        let Some(declared) = node.plugin.states() else {
            continue;
        };
        let mut names: Vec<&String> = node.state_ttl.keys().filter(|n| !declared.contains(*n)).collect();
        names.sort();
        for name in names {
            let known = declared.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>();
            warnings.push(format!(
                "operator `{}`: `state_ttl` names `{name}`, a state its plugin never uses (it uses {}): the entry does nothing; a typo?",
                op.name,
                known.join(", ")
            ));
        }
    }
    warnings
}

/// The fields of each `project` or `rename` reading a JSON-lines file
/// source (directly, or through filters and `key_by`s) that none of the
/// file's first records has.
fn unmatched_fields(m: &Manifest) -> Vec<String> {
    let ops = &m.spec.operators;
    let mut warnings = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        let fields = op.get_ref().config().expected_fields();
        if fields.is_empty() {
            continue;
        }
        let kind = op.get_ref().kind();
        let Some(path) = file_read_by(m, i) else {
            continue;
        };
        let Some(sample) = sample(&path) else {
            continue;
        };
        for f in fields {
            if !sample.iter().any(|doc| crate::json::field(doc, f).is_some()) {
                warnings.push(format!(
                    "operator `{}`: none of the first {} records of {} has the field `{f}`: `{kind}` skips a field it cannot find; a typo?",
                    m.operator_names[i],
                    sample.len(),
                    path.display()
                ));
            }
        }
    }
    warnings
}

/// The JSON-lines file whose records operator `i` reads unchanged: from
/// its one input, through operators that pass values on as they are.
fn file_read_by(m: &Manifest, mut i: usize) -> Option<std::path::PathBuf> {
    loop {
        match m.graph.operator_inputs[i][..] {
            [Stream::Source(s)] => {
                let sources = m.sources();
                let SourceSpec::File(file) = sources[s].spec else {
                    return None;
                };
                return (file.format == FileFormat::JsonLines).then(|| m.path(&file.path));
            }
            [Stream::Operator(j)] if m.spec.operators[j].get_ref().config().passes_values_on() => i = j,
            _ => return None,
        }
    }
}

/// The JSON documents of the first records of `path`; none when it cannot
/// be read.
fn sample(path: &std::path::Path) -> Option<Vec<serde_json::Value>> {
    let file = std::fs::File::open(path).ok()?;
    let docs = std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|line| !line.trim().is_empty())
        .take(SAMPLE_RECORDS)
        .filter_map(|line| serde_json::from_str(&line).ok())
        .collect::<Vec<_>>();
    (!docs.is_empty()).then_some(docs)
}
