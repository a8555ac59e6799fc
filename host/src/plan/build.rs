//! From a validated manifest to a plan: plugins loaded and checked against
//! their operators' worlds, operators grouped into stages.

use super::draft::{Draft, Placed};
use super::{AdminSettings, AdminTls};
use super::{ClusterSettings, Plan, WatermarkSettings};
use crate::checkpoint::CommittedCheckpoint;
use crate::checkpoint::{BucketUrl, CheckpointSettings, S3Settings};
use crate::connectors::{Endpoint, OpenSink, OpenSource};
use crate::manifest::{Manifest, ManifestError, SinkSpec, SourceSpec, StateBackendName};
use crate::metrics::Telemetry;
use crate::operators::config::BuildContext;
use crate::plugin::PluginEngine;
use crate::state::BackendKind;

/// Plans the manifest's pipeline, loading its plugins with `engine`. A plugin
/// that cannot be loaded, or whose world does not fit its operator, is
/// reported at the operator's `plugin` line.
pub fn build(m: &Manifest, engine: &PluginEngine) -> Result<Plan, ManifestError> {
    let p = m.spec.pipeline.get_ref();
    let key_groups = p.max_parallelism;
    let mut draft = Draft {
        sources: m.sources().iter().map(|s| source(m, s.name, s.spec)).collect(),
        ..Draft::default()
    };
    let steps = m.spec.operators.iter().zip(&m.operator_names);
    for ((op, name), inputs) in steps.zip(&m.graph.operator_inputs) {
        let cx = BuildContext {
            name,
            dir: &m.dir,
            engine,
        };
        let step = op
            .get_ref()
            .config()
            .step(&cx)
            .map_err(|p| m.problem_at(&op.span(), p))?;
        draft.steps.push((inputs.clone(), step));
    }
    for (s, inputs) in m.sinks().iter().zip(&m.graph.sink_inputs) {
        draft.sinks.push((sink(m, s.name, s.spec), inputs.clone()));
    }
    let Placed {
        sources,
        mut stages,
        sinks,
    } = draft.place(key_groups);
    let admin = admin_settings(m)?;
    let telemetry = Telemetry::new(&p.name, admin.as_ref().is_some_and(|a| a.metrics));
    for op in stages.iter_mut().flat_map(|s| &mut s.operators) {
        op.calls = telemetry.call_stats(&op.name);
    }
    let warnings = super::warnings::warnings(m, &stages);
    let mut plan = Plan {
        name: p.name.clone(),
        manifest_hash: m.hash.clone(),
        batch_size: p.batch_size(),
        edge_capacity: p.edge_capacity,
        shutdown_timeout: p.shutdown_timeout,
        sources,
        stages,
        sinks,
        dead_letter: m
            .spec
            .dead_letter
            .as_ref()
            .map(|d| sink(m, "dead-letter", d.get_ref())),
        late_output: m
            .spec
            .late_output
            .as_ref()
            .map(|d| sink(m, "late-output", d.get_ref())),
        watermark: m.spec.watermark.as_ref().map(|w| WatermarkSettings {
            delay: w.get_ref().max_out_of_orderness,
            idle_timeout: w.get_ref().idle_timeout,
        }),
        state: state_backend(m),
        key_groups,
        checkpoint: checkpoint_settings(m),
        committed_checkpoint: committed_checkpoint(m),
        sink_checks: m
            .sinks()
            .iter()
            .filter_map(|s| s.spec.config().table_check())
            .collect(),
        admin,
        telemetry,
        plugin_store: super::store_dir(&m.dir, &p.name),
        cluster: None,
        warnings,
    };
    plan.cluster = cluster_settings(m, &plan)?;
    Ok(plan)
}

/// Cluster mode's settings, with the pipeline cut into its parts.
fn cluster_settings(m: &Manifest, plan: &Plan) -> Result<Option<ClusterSettings>, ManifestError> {
    let Some(c) = &m.spec.cluster else {
        return Ok(None);
    };
    let kafka = |spec: &SourceSpec| match spec {
        SourceSpec::Kafka(k) => k.as_ref().clone(),
        _ => unreachable!("validation lets cluster mode read Kafka only"),
    };
    let sources: Vec<_> = m.sources().iter().map(|s| kafka(s.spec)).collect();
    let sinks = m.sinks();
    let [sink] = &sinks[..] else {
        unreachable!("validation lets cluster mode write one sink");
    };
    let SinkSpec::Kafka(sink) = sink.spec else {
        unreachable!("validation lets cluster mode write Kafka only");
    };
    ClusterSettings::new(c.get_ref(), &sources, sink, plan)
        .map(Some)
        .map_err(|e| m.error_at(&c.span(), "group", e))
}

/// For a sink that commits with checkpoints: how to ask it which
/// checkpoint's output it last committed.
fn committed_checkpoint(m: &Manifest) -> Option<CommittedCheckpoint> {
    let cx = m.connector_context();
    m.sinks()
        .iter()
        .find_map(|s| s.spec.config().committed_checkpoint(&cx))
}

fn admin_settings(m: &Manifest) -> Result<Option<AdminSettings>, ManifestError> {
    let Some(a) = &m.spec.admin else { return Ok(None) };
    let spec = a.get_ref();
    let token = match (&spec.token, &spec.token_file) {
        (Some(t), _) => t.value().trim().to_owned(),
        (None, Some(file)) => {
            let path = m.path(file);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                m.error_at(
                    &a.span(),
                    "token_file",
                    format!("cannot read the token file `{file}`: {e}"),
                )
            })?;
            text.lines().next().unwrap_or_default().trim().to_owned()
        }
        (None, None) => unreachable!("validated: one of them is set"),
    };
    if token.len() < 16 {
        return Err(m.error_at(
            &a.span(),
            if spec.token.is_some() { "token" } else { "token_file" },
            "the admin token is shorter than 16 characters: use a long random one (e.g. `openssl rand -hex 32`)",
        ));
    }
    if !(0.0..=1.0).contains(&spec.rollback_failure_share) {
        return Err(m.error_at(
            &a.span(),
            "rollback_failure_share",
            "`rollback_failure_share` is a share of records: from 0.0 to 1.0",
        ));
    }
    let tls = match (&spec.tls_cert, &spec.tls_key) {
        (Some(cert), Some(key)) => Some(AdminTls {
            cert: m.path(cert),
            key: m.path(key),
            ca: m.path(spec.tls_ca.as_ref().unwrap_or(cert)),
        }),
        (None, None) if spec.tls_ca.is_none() => None,
        (None, None) => {
            return Err(m.error_at(
                &a.span(),
                "tls_ca",
                "`tls_ca` without `tls_cert` and `tls_key`: the admin API serves TLS only with both",
            ));
        }
        (Some(_), None) | (None, Some(_)) => {
            return Err(m.error_at(
                &a.span(),
                if spec.tls_cert.is_some() {
                    "tls_key"
                } else {
                    "tls_cert"
                },
                "TLS for the admin API needs both `tls_cert` and `tls_key`",
            ));
        }
    };
    Ok(Some(AdminSettings {
        tls,
        listen: spec.listen,
        token,
        probation_records: spec.probation_records.max(1),
        rollback_failure_share: spec.rollback_failure_share,
        metrics: spec.metrics,
        metrics_need_token: spec.metrics_need_token,
        max_plugin_bytes: usize::try_from(spec.max_plugin_mb.saturating_mul(1 << 20)).unwrap_or(usize::MAX),
        allowed_hosts: super::allowed_hosts(spec.listen, &spec.allowed_hosts),
    }))
}

fn checkpoint_settings(m: &Manifest) -> Option<CheckpointSettings> {
    let spec = m.spec.checkpoint.as_ref()?.get_ref();
    let default_dir = || {
        m.dir
            .join(".mailer")
            .join(&m.spec.pipeline.get_ref().name)
            .join("checkpoints")
    };
    // Validation refused a malformed bucket URL.
    let bucket = spec
        .path
        .as_ref()
        .and_then(|p| BucketUrl::parse(p.value()).ok().flatten());
    let dir = match (&bucket, &spec.path, &spec.local_path) {
        (Some(_), _, Some(local)) => m.path(local),
        (Some(_), _, None) | (None, None, _) => default_dir(),
        (None, Some(p), _) => m.path(p),
    };
    let s3 = &spec.s3;
    let value = |v: &Option<crate::config_string::ConfigString>| v.as_ref().map(|v| v.value().to_owned());
    Some(CheckpointSettings {
        interval: spec.interval,
        dir,
        bucket,
        s3: S3Settings {
            endpoint: value(&s3.endpoint),
            region: value(&s3.region),
            access_key_id: value(&s3.access_key_id),
            secret_access_key: value(&s3.secret_access_key),
            session_token: value(&s3.session_token),
            virtual_hosted_style: s3.virtual_hosted_style,
            request_timeout: s3.request_timeout,
            max_retries: s3.max_retries,
            concurrency: s3.concurrency,
        },
        keep: spec.keep,
        tolerable_failures: spec.tolerable_failures,
        timeout: spec.timeout,
    })
}

fn state_backend(m: &Manifest) -> BackendKind {
    let Some(spec) = m.spec.state.as_ref().map(|s| s.get_ref()) else {
        return BackendKind::Memory;
    };
    match spec.backend {
        StateBackendName::Memory => BackendKind::Memory,
        StateBackendName::Rocksdb => BackendKind::Rocks {
            dir: match &spec.path {
                Some(p) => m.path(p),
                None => m
                    .dir
                    .join(".mailer")
                    .join(&m.spec.pipeline.get_ref().name)
                    .join("state"),
            },
            cache_bytes: spec
                .cache_mb
                .map_or(crate::state::DEFAULT_CACHE_BYTES, |mb| (mb as usize) << 20),
            block_cache_bytes: spec
                .block_cache_mb
                .map_or(crate::state::DEFAULT_BLOCK_CACHE_BYTES, |mb| (mb as usize) << 20),
        },
    }
}

fn source(m: &Manifest, name: &str, spec: &SourceSpec) -> Endpoint<OpenSource> {
    spec.config().endpoint(&m.connector_context(), name)
}

fn sink(m: &Manifest, name: &str, spec: &SinkSpec) -> Endpoint<OpenSink> {
    spec.config().endpoint(&m.connector_context(), name)
}
