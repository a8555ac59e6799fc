//! Checks a parsed manifest for what serde cannot: values in range, names
//! unique, operators in a possible order, placeholders set, files present.

use super::spec::*;
use super::vars::ConfigString;
use super::{Manifest, ManifestError};
use crate::operator::FailurePolicy;
use std::collections::HashSet;
use std::ops::Range;

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(super) fn validate(m: &mut Manifest, env: Env<'_>) -> Result<(), ManifestError> {
    check_pipeline(m)?;
    resolve_all(m, env)?;
    check_source(m)?;
    check_operators(m)?;
    if let Some(dl) = &m.spec.dead_letter {
        check_sink(m, dl.get_ref(), &dl.span())?;
    }
    check_sink(m, m.spec.sink.get_ref(), &m.spec.sink.span())
}

fn check_pipeline(m: &Manifest) -> Result<(), ManifestError> {
    let p = m.spec.pipeline.get_ref();
    let span = m.spec.pipeline.span();
    if p.name.is_empty()
        || !p
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(m.error_at(
            &span,
            "name",
            format!(
                "pipeline name `{}` is invalid: use letters, digits, `-` and `_`",
                p.name
            ),
        ));
    }
    if p.edge_capacity == 0 {
        return Err(m.error_at(
            &span,
            "edge_capacity",
            "edge_capacity must be at least 1 (records)",
        ));
    }
    if !(1..=65_536).contains(&p.batch_size) {
        return Err(m.error_at(
            &span,
            "batch_size",
            format!(
                "batch_size {} is out of range: expected 1 to 65536 records",
                p.batch_size
            ),
        ));
    }
    if !(1..=32_768).contains(&p.max_parallelism) {
        return Err(m.error_at(
            &span,
            "max_parallelism",
            format!(
                "max_parallelism {} is out of range: expected 1 to 32768",
                p.max_parallelism
            ),
        ));
    }
    Ok(())
}

/// Fills every `${VAR}` of the manifest.
fn resolve_all(m: &mut Manifest, env: Env<'_>) -> Result<(), ManifestError> {
    let mut fields: Vec<(Range<usize>, &'static str, &mut ConfigString)> = Vec::new();
    let span = m.spec.source.span();
    if let SourceSpec::File(f) = m.spec.source.get_mut() {
        fields.push((span, "path", &mut f.path));
    }
    for op in &mut m.spec.operators {
        let span = op.span();
        if let Some(p) = op.get_mut().plugin_mut() {
            fields.push((span, "plugin", &mut p.plugin));
        }
    }
    for sink in [Some(&mut m.spec.sink), m.spec.dead_letter.as_mut()]
        .into_iter()
        .flatten()
    {
        let span = sink.span();
        if let SinkSpec::File(f) = sink.get_mut() {
            fields.push((span, "path", &mut f.path));
        }
    }
    let mut failure = None;
    for (span, key, value) in fields {
        if let Err(message) = value.resolve(env) {
            failure = Some((span, key, message));
            break;
        }
    }
    match failure {
        Some((span, key, message)) => Err(m.error_at(&span, key, message)),
        None => Ok(()),
    }
}

fn check_source(m: &Manifest) -> Result<(), ManifestError> {
    let span = m.spec.source.span();
    match m.spec.source.get_ref() {
        SourceSpec::Generator(g) => {
            for (key, value) in [
                ("keys", g.keys),
                ("rate", g.rate),
                ("time_divisor", Some(g.time_divisor)),
            ] {
                if value == Some(0) {
                    return Err(m.error_at(&span, key, format!("generator `{key}` must be at least 1")));
                }
            }
        }
        SourceSpec::File(f) => {
            let path = m.path(&f.path);
            if !path.is_file() {
                return Err(m.error_at(
                    &span,
                    "path",
                    format!("source file {} does not exist", shown(&f.path, &path)),
                ));
            }
            if f.format == crate::connectors::FileFormat::Lines
                && (f.key_field.is_some() || f.timestamp_field.is_some())
            {
                let key = if f.key_field.is_some() {
                    "key_field"
                } else {
                    "timestamp_field"
                };
                return Err(m.error_at(
                    &span,
                    key,
                    format!("`{key}` needs `format = \"json_lines\"`: plain lines have no fields"),
                ));
            }
        }
    }
    Ok(())
}

fn check_operators(m: &mut Manifest) -> Result<(), ManifestError> {
    let max = m.spec.pipeline.get_ref().max_parallelism as usize;
    let has_dead_letter = m.spec.dead_letter.is_some();
    let mut names = Vec::with_capacity(m.spec.operators.len());
    let mut seen = HashSet::new();
    let mut keyed = false;
    let count = m.spec.operators.len();
    for (i, op) in m.spec.operators.iter().enumerate() {
        let span = op.span();
        let name = match op.get_ref() {
            OperatorSpec::KeyBy(k) => {
                if !(1..=max).contains(&k.parallelism) {
                    return Err(m.error_at(
                        &span,
                        "parallelism",
                        format!(
                            "key_by parallelism {} is out of range: expected 1 to max_parallelism ({max})",
                            k.parallelism
                        ),
                    ));
                }
                if i + 1 == count {
                    return Err(m.error_at(
                        &span,
                        "type",
                        "`key_by` is the last operator: put the keyed operators (e.g. a `reduce`) after it",
                    ));
                }
                keyed = true;
                "key_by".to_owned()
            }
            other => {
                let p = other.plugin().expect("not key_by");
                if matches!(other, OperatorSpec::Reduce(_)) && !keyed {
                    return Err(m.error_at(
                        &span,
                        "type",
                        "`reduce` needs a keyed stream: add an operator with `type = \"key_by\"` before it",
                    ));
                }
                if let Some(par) = p.parallelism {
                    if keyed {
                        return Err(m.error_at(
                            &span,
                            "parallelism",
                            "operators after `key_by` run on its workers: set `parallelism` on the `key_by` instead",
                        ));
                    }
                    if !(1..=max).contains(&par) {
                        return Err(m.error_at(
                            &span,
                            "parallelism",
                            format!(
                                "parallelism {par} is out of range: expected 1 to max_parallelism ({max})"
                            ),
                        ));
                    }
                }
                if p.timeout.is_zero() {
                    return Err(m.error_at(
                        &span,
                        "timeout",
                        "timeout must be longer than 0 (e.g. \"500ms\")",
                    ));
                }
                if p.memory_limit_mb == 0 || p.memory_limit_mb > 4096 {
                    return Err(m.error_at(
                        &span,
                        "memory_limit_mb",
                        format!(
                            "memory_limit_mb {} is out of range: expected 1 to 4096",
                            p.memory_limit_mb
                        ),
                    ));
                }
                if p.on_error == FailurePolicy::DeadLetter && !has_dead_letter {
                    return Err(m.error_at(
                        &span,
                        "on_error",
                        "`on_error = \"dead-letter\"` needs a `[dead_letter]` sink in the manifest",
                    ));
                }
                let path = m.path(&p.plugin);
                if !path.is_file() {
                    return Err(m.error_at(
                        &span,
                        "plugin",
                        format!(
                            "plugin file {} does not exist; build the plugins with `just plugins`",
                            shown(&p.plugin, &path)
                        ),
                    ));
                }
                p.name.clone().unwrap_or_else(|| {
                    path.file_stem()
                        .map_or_else(|| "plugin".to_owned(), |s| s.to_string_lossy().replace('_', "-"))
                })
            }
        };
        let name = if matches!(op.get_ref(), OperatorSpec::KeyBy(_)) && seen.contains(&name) {
            format!("key_by-{i}")
        } else {
            name
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
    Ok(())
}

fn check_sink(m: &Manifest, sink: &SinkSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    if let SinkSpec::File(f) = sink {
        let path = m.path(&f.path);
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        if let Some(dir) = parent.filter(|d| !d.is_dir()) {
            return Err(m.error_at(
                span,
                "path",
                format!("the folder of sink file {} does not exist", shown(&f.path, dir)),
            ));
        }
    }
    Ok(())
}

/// A path for an error message: as written, plus where it resolved to unless
/// it holds a `${VAR}` (whose value is never shown).
fn shown(value: &ConfigString, resolved: &std::path::Path) -> String {
    if value.has_placeholders() {
        format!("`{value}`")
    } else {
        format!("`{value}` (`{}`)", resolved.display())
    }
}
