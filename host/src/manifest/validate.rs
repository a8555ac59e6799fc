//! Checks a parsed manifest for what serde cannot: values in range, names
//! unique, operators in a possible order, placeholders set, files present.

use super::spec::*;
use super::validate_operators::check_policy;
use super::{Manifest, ManifestError};
use crate::config_string::ConfigString;
use crate::connectors::kafka;
use std::ops::Range;

type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

pub(super) fn validate(m: &mut Manifest, env: Env<'_>) -> Result<(), ManifestError> {
    check_pipeline(m)?;
    super::graph::check_ends(m)?;
    resolve_all(m, env)?;
    for source in m.sources() {
        check_source(m, source.spec, &source.span)?;
    }
    super::validate_operators::check_operators(m)?;
    let dead_letters_to_itself = |policy| policy == crate::operator::FailurePolicy::DeadLetter;
    if let Some(d) = &m.spec.dead_letter
        && match d.get_ref() {
            SinkSpec::Kafka(k) => dead_letters_to_itself(k.on_error),
            SinkSpec::Postgres(p) => dead_letters_to_itself(p.on_error),
            _ => false,
        }
    {
        return Err(m.error_at(
            &d.span(),
            "on_error",
            "the dead-letter sink cannot send what it fails to write to itself: use `fail` or `skip`",
        ));
    }
    for side in [&m.spec.dead_letter, &m.spec.late_output].into_iter().flatten() {
        check_sink(m, side.get_ref(), &side.span(), false)?;
    }
    if let Some(w) = &m.spec.watermark
        && w.get_ref().idle_timeout.is_some_and(|t| t.is_zero())
    {
        return Err(m.error_at(&w.span(), "idle_timeout", "idle_timeout must be longer than 0"));
    }
    check_admin(m)?;
    check_checkpoint(m)?;
    check_state(m)?;
    for sink in m.sinks() {
        check_sink(m, sink.spec, &sink.span, true)?;
    }
    Ok(())
}

fn check_state(m: &Manifest) -> Result<(), ManifestError> {
    let Some(s) = &m.spec.state else { return Ok(()) };
    let out_of_range = |field: &str, mb: u32, expected: &str| {
        Err(m.error_at(
            &s.span(),
            field,
            format!("{field} {mb} is out of range: expected {expected}"),
        ))
    };
    match (s.get_ref().cache_mb, s.get_ref().block_cache_mb) {
        (Some(mb), _) if mb > 65_536 => out_of_range("cache_mb", mb, "0 (no cache) to 65536"),
        (_, Some(mb)) if !(1..=65_536).contains(&mb) => out_of_range("block_cache_mb", mb, "1 to 65536"),
        _ => Ok(()),
    }
}

fn check_checkpoint(m: &Manifest) -> Result<(), ManifestError> {
    let Some(c) = &m.spec.checkpoint else {
        return Ok(());
    };
    let spec = c.get_ref();
    if spec.keep == 0 {
        return Err(m.error_at(
            &c.span(),
            "keep",
            "keep must be at least 1: a pipeline resumes from a checkpoint it kept",
        ));
    }
    if spec.interval.is_zero() {
        return Err(m.error_at(&c.span(), "interval", "interval must be longer than 0"));
    }
    Ok(())
}

fn check_admin(m: &Manifest) -> Result<(), ManifestError> {
    let Some(a) = &m.spec.admin else { return Ok(()) };
    let span = a.span();
    let a = a.get_ref();
    if !(1..=4096).contains(&a.max_plugin_mb) {
        return Err(m.error_at(
            &span,
            "max_plugin_mb",
            format!(
                "max_plugin_mb {} is out of range: expected 1 to 4096 (MiB)",
                a.max_plugin_mb
            ),
        ));
    }
    match (&a.token, &a.token_file) {
        (Some(_), Some(_)) => Err(m.error_at(&span, "token_file", "give `token` or `token_file`, not both")),
        (None, None) => Err(m.error_at(
            &span,
            "token",
            "the admin API needs a token: `token = \"${MAILER_ADMIN_TOKEN}\"` or `token_file = \"…\"`",
        )),
        _ => Ok(()),
    }
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
    if !(1..=65_536).contains(&p.batch_size()) {
        return Err(m.error_at(
            &span,
            "batch_size",
            format!(
                "batch_size {} is out of range: expected 1 to 65536 records",
                p.batch_size()
            ),
        ));
    }
    if p.batch_size() > p.edge_capacity {
        return Err(m.error_at(
            &span,
            "batch_size",
            format!(
                "batch_size {} is larger than edge_capacity {}: a batch must fit in an edge; lower batch_size or raise edge_capacity",
                p.batch_size(),
                p.edge_capacity
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
    let linear = m.spec.source.iter_mut().map(|s| (s.span(), s.get_mut()));
    let named = m
        .spec
        .sources
        .iter_mut()
        .map(|s| (s.span(), &mut s.get_mut().spec));
    for (span, source) in linear.chain(named) {
        match source {
            SourceSpec::File(f) => fields.push((span, "path", &mut f.path)),
            SourceSpec::Kafka(k) => {
                let strings =
                    kafka::config_strings(&mut k.bootstrap_servers, k.security.as_mut(), &mut k.options);
                fields.extend(strings.into_iter().map(|(key, v)| (span.clone(), key, v)));
            }
            SourceSpec::Generator(_) => {}
        }
    }
    for op in &mut m.spec.operators {
        let span = op.span();
        match op.get_mut() {
            OperatorSpec::Window(w) => {
                if let Some(p) = w.plugin.as_mut() {
                    fields.push((span, "plugin", p));
                }
            }
            other => {
                if let Some(p) = other.plugin_mut() {
                    fields.push((span, "plugin", &mut p.plugin));
                }
            }
        }
    }
    let linear = [
        m.spec.sink.as_mut(),
        m.spec.dead_letter.as_mut(),
        m.spec.late_output.as_mut(),
    ]
    .into_iter()
    .flatten()
    .map(|s| (s.span(), s.get_mut()));
    let named = m.spec.sinks.iter_mut().map(|s| (s.span(), &mut s.get_mut().spec));
    for (span, sink) in linear.chain(named) {
        match sink {
            SinkSpec::File(f) => fields.push((span, "path", &mut f.path)),
            SinkSpec::Kafka(k) => {
                let strings =
                    kafka::config_strings(&mut k.bootstrap_servers, k.security.as_mut(), &mut k.options);
                fields.extend(strings.into_iter().map(|(key, v)| (span.clone(), key, v)));
            }
            SinkSpec::Postgres(p) => {
                fields.push((span.clone(), "dsn", &mut p.dsn));
                if let Some(ca) = p.ca_file.as_mut() {
                    fields.push((span, "ca_file", ca));
                }
            }
            SinkSpec::Stdout(_) | SinkSpec::Blackhole(_) => {}
        }
    }
    if let Some(s) = m.spec.state.as_mut() {
        let span = s.span();
        if let Some(p) = s.get_mut().path.as_mut() {
            fields.push((span, "path", p));
        }
    }
    if let Some(a) = m.spec.admin.as_mut() {
        let span = a.span();
        let a = a.get_mut();
        for (key, field) in [("token", a.token.as_mut()), ("token_file", a.token_file.as_mut())] {
            if let Some(f) = field {
                fields.push((span.clone(), key, f));
            }
        }
    }
    if let Some(c) = m.spec.checkpoint.as_mut() {
        let span = c.span();
        if let Some(p) = c.get_mut().path.as_mut() {
            fields.push((span, "path", p));
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

fn check_source(m: &Manifest, source: &SourceSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    let span = span.clone();
    match source {
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
            check_policy(m, f.on_error, &span)?;
            if f.max_record_bytes == 0 {
                return Err(m.error_at(&span, "max_record_bytes", "max_record_bytes must be at least 1"));
            }
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
        SourceSpec::Kafka(k) => {
            if k.topics.is_empty() {
                return Err(m.error_at(&span, "topics", "`topics` is empty: name at least one topic"));
            }
            check_policy(m, k.on_error, &span)?;
            if k.max_record_bytes == 0 {
                return Err(m.error_at(&span, "max_record_bytes", "max_record_bytes must be at least 1"));
            }
            if k.format != kafka::KafkaFormat::Json
                && let Some(key) = [
                    ("key_field", &k.key_field),
                    ("timestamp_field", &k.timestamp_field),
                ]
                .into_iter()
                .find_map(|(key, v)| v.as_ref().map(|_| key))
            {
                return Err(m.error_at(
                    &span,
                    key,
                    format!("`{key}` needs `format = \"json\"`: other values have no fields"),
                ));
            }
        }
    }
    Ok(())
}

/// Checks a sink; `main` is false for the side outputs' sinks.
pub(super) fn check_sink(
    m: &Manifest,
    sink: &SinkSpec,
    span: &Range<usize>,
    main: bool,
) -> Result<(), ManifestError> {
    if let SinkSpec::Kafka(k) = sink {
        check_policy(m, k.on_error, span)?;
    }
    if let SinkSpec::Postgres(p) = sink {
        check_policy(m, p.on_error, span)?;
        super::validate_postgres::check(m, p, span)?;
    }
    let exactly_once = super::graph::commits_with_checkpoints(sink);
    if exactly_once && !main {
        return Err(m.error_at(
            span,
            "exactly_once",
            "`exactly_once` is for the pipeline's sinks: dead-letter and late-record sinks write at least once",
        ));
    }
    if exactly_once && m.spec.checkpoint.is_none() {
        return Err(m.error_at(
            span,
            "exactly_once",
            "`exactly_once = true` needs a `[checkpoint]` section: its transactions commit with the checkpoints",
        ));
    }
    if let SinkSpec::Kafka(k) = sink
        && k.exactly_once
        && let Some(c) = &m.spec.checkpoint
    {
        // A transaction stays open for an interval and the checkpoint
        // after it; the brokers abort one open past the timeout.
        let timeout = k
            .options
            .get("transaction.timeout.ms")
            .and_then(|v| v.value().parse().ok())
            .map_or(
                crate::connectors::kafka::TRANSACTION_TIMEOUT,
                std::time::Duration::from_millis,
            );
        if c.get_ref().interval * 2 > timeout {
            return Err(m.error_at(
                &c.span(),
                "interval",
                format!(
                    "the checkpoint interval ({:?}) must be at most half the Kafka sink's transaction timeout ({timeout:?}, `transaction.timeout.ms`): each transaction stays open for an interval and the checkpoint after it, and the brokers abort one open longer",
                    c.get_ref().interval
                ),
            ));
        }
    }
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
pub(super) fn shown(value: &ConfigString, resolved: &std::path::Path) -> String {
    if value.has_placeholders() {
        format!("`{value}`")
    } else {
        format!("`{value}` (`{}`)", resolved.display())
    }
}
