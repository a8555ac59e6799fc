//! Checks a parsed manifest for what serde cannot: values in range, names
//! unique, operators in a possible order, placeholders set, files present.

use super::spec::*;
use super::{Manifest, ManifestError};
use crate::checkpoint::BucketUrl;
use crate::config_string::ConfigString;
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
    if let Some(d) = &m.spec.dead_letter
        && d.get_ref().config().on_error() == Some(crate::failure::FailurePolicy::DeadLetter)
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
    super::validate_cluster::check_cluster(m)?;
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
    let bucket = match &spec.path {
        Some(path) => BucketUrl::parse(path.value()).map_err(|e| m.error_at(&c.span(), "path", e))?,
        None => None,
    };
    if bucket.is_none() && spec.local_path.is_some() {
        return Err(m.error_at(
            &c.span(),
            "local_path",
            "`local_path` is the staging folder of checkpoints in a bucket: it needs `path = \"s3://<bucket>/<prefix>\"`; for a folder, give it as `path`",
        ));
    }
    let s3 = &spec.s3;
    if let Some(endpoint) = &s3.endpoint
        && !(endpoint.value().starts_with("http://") || endpoint.value().starts_with("https://"))
    {
        return Err(m.error_at(
            &c.span(),
            "endpoint",
            format!(
                "endpoint `{}` is not a URL: write `http://host:port` or `https://host`",
                endpoint.template()
            ),
        ));
    }
    if s3.request_timeout.is_zero() {
        return Err(m.error_at(
            &c.span(),
            "request_timeout",
            "request_timeout must be longer than 0",
        ));
    }
    if s3.max_retries > 10 {
        return Err(m.error_at(
            &c.span(),
            "max_retries",
            format!("max_retries {} is out of range: expected 0 to 10", s3.max_retries),
        ));
    }
    if !(1..=64).contains(&s3.concurrency) {
        return Err(m.error_at(
            &c.span(),
            "concurrency",
            format!("concurrency {} is out of range: expected 1 to 64", s3.concurrency),
        ));
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
        let strings = source.config_mut().config_strings();
        fields.extend(strings.into_iter().map(|(key, v)| (span.clone(), key, v)));
    }
    for op in &mut m.spec.operators {
        let span = op.span();
        let strings = op.get_mut().config_mut().config_strings();
        fields.extend(strings.into_iter().map(|(key, v)| (span.clone(), key, v)));
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
        let strings = sink.config_mut().config_strings();
        fields.extend(strings.into_iter().map(|(key, v)| (span.clone(), key, v)));
    }
    if let Some(s) = m.spec.state.as_mut() {
        let span = s.span();
        if let Some(p) = s.get_mut().path.as_mut() {
            fields.push((span, "path", p));
        }
    }
    if let Some(c) = m.spec.cluster.as_mut() {
        let span = c.span();
        if let Some(id) = c.get_mut().instance_id.as_mut() {
            fields.push((span, "instance_id", id));
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
        let c = c.get_mut();
        let s3 = &mut c.s3;
        let strings = [
            ("path", c.path.as_mut()),
            ("local_path", c.local_path.as_mut()),
            ("endpoint", s3.endpoint.as_mut()),
            ("region", s3.region.as_mut()),
            ("access_key_id", s3.access_key_id.as_mut()),
            ("secret_access_key", s3.secret_access_key.as_mut()),
            ("session_token", s3.session_token.as_mut()),
        ];
        for (key, value) in strings {
            if let Some(v) = value {
                fields.push((span.clone(), key, v));
            }
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

/// A connector's `on_error`: `dead-letter` needs a `[dead_letter]` sink.
fn check_policy(
    m: &Manifest,
    policy: crate::failure::FailurePolicy,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    policy
        .check_dead_letter(m.spec.dead_letter.is_some())
        .map_err(|message| m.error_at(span, "on_error", message))
}

fn check_source(m: &Manifest, source: &SourceSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    let config = source.config();
    if let Some(policy) = config.on_error() {
        check_policy(m, policy, span)?;
    }
    config
        .check(&m.connector_context())
        .map_err(|problem| m.problem_at(span, problem))
}

/// Checks a sink; `main` is false for the side outputs' sinks.
pub(super) fn check_sink(
    m: &Manifest,
    sink: &SinkSpec,
    span: &Range<usize>,
    main: bool,
) -> Result<(), ManifestError> {
    let config = sink.config();
    if let Some(policy) = config.on_error() {
        check_policy(m, policy, span)?;
    }
    let exactly_once = config.commits_with_checkpoints();
    if exactly_once && !main {
        return Err(m.error_at(
            span,
            "exactly_once",
            "`exactly_once` is for the pipeline's sinks: dead-letter and late-record sinks write at least once",
        ));
    }
    if exactly_once && m.spec.checkpoint.is_none() && m.spec.cluster.is_none() {
        return Err(m.error_at(
            span,
            "exactly_once",
            "`exactly_once = true` needs a `[checkpoint]` section (its transactions commit with the checkpoints), or `[cluster]` (each commit interval is one transaction)",
        ));
    }
    config
        .check(&m.connector_context())
        .map_err(|problem| m.problem_at(span, problem))
}
