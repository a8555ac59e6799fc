//! From a validated manifest to a plan: plugins loaded and checked against
//! their operators' worlds, operators grouped into stages.

use super::draft::{Draft, Placed, Step};
use super::{AdminSettings, SinkCheck};
use super::{Endpoint, NativeFactory, NodeKind, OpenSink, OpenSource, OperatorNode, Plan, WatermarkSettings};
use crate::builtins::{FieldFilter, KeyFromField, Reshape, ReshapeKind, RunningAggregate};
use crate::checkpoint::CheckpointSettings;
use crate::checkpoint::CommittedCheckpoint;
use crate::connectors::kafka::{KafkaSink, KafkaSource, TransactionalKafkaSink};
use crate::connectors::postgres::{self, PostgresSink, WriteMode};
use crate::connectors::{BlackholeSink, FileSink, FileSource, GeneratorSource, StdoutSink};
use crate::json::from_toml;
use crate::manifest::{
    AggregateSpec, FieldFilterSpec, GrantsSpec, LateSpec, Manifest, ManifestError, OperatorSpec, SinkSpec,
    SourceSpec, StateBackendName, TimeDomain, WindowKind, WindowOperatorSpec,
};
use crate::metrics::Telemetry;
use crate::operator::{FailureHandler, FailurePolicy};
use crate::plugin::{Grants, LoadedPlugin, PluginEngine, PluginLimits, World};
use crate::state::BackendKind;
use crate::time::{Assigner, WindowSpec, millis};
use std::sync::Arc;

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
        let step = match op.get_ref() {
            OperatorSpec::KeyBy(k) => Step::KeyBy {
                key: k
                    .field
                    .as_ref()
                    .map(|f| builtin(name, k.on_error, key_from_field(name, f))),
                parallelism: k.parallelism,
            },
            _ => {
                let (node, parallelism) = operator(m, engine, op, name)?;
                Step::Operator { node, parallelism }
            }
        };
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
    Ok(Plan {
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
        restore: None,
        committed_checkpoint: committed_checkpoint(m),
        sink_checks: m.sinks().iter().filter_map(|s| sink_check(s.spec)).collect(),
        admin,
        telemetry,
        plugin_store: super::store_dir(&m.dir, &p.name),
        swapped_from: Default::default(),
    })
}

/// The node of operator `op` (named `name`) and its parallelism; `key_by`
/// is placed by [`build`] itself.
fn operator(
    m: &Manifest,
    engine: &PluginEngine,
    op: &toml::Spanned<OperatorSpec>,
    name: &str,
) -> Result<(OperatorNode, usize), ManifestError> {
    Ok(match op.get_ref() {
        OperatorSpec::Window(w) => {
            let plugin = match &w.plugin {
                None => None,
                Some(path) => {
                    let plugin = engine
                        .load_with(&m.path(path), World::Window, name, w.fuel.is_some())
                        .map_err(|e| m.error_at(&op.span(), "plugin", e.to_string()))?;
                    let limits = limits(w.timeout, w.memory_limit_mb, w.fuel, w.max_outputs_per_record);
                    Some((plugin, limits))
                }
            };
            let mut node = window_node(name, w, plugin);
            node.grants = grants(m, &w.grants);
            (node, 1)
        }
        OperatorSpec::KeyBy(_) => unreachable!("handled above"),
        OperatorSpec::FieldFilter(f) => (builtin(name, f.on_error, field_filter(name, f)), 1),
        OperatorSpec::Project(p) => (
            builtin(
                name,
                p.on_error,
                reshape(name, ReshapeKind::Project(p.fields.clone())),
            ),
            1,
        ),
        OperatorSpec::Rename(r) => {
            let pairs = r.fields.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
            (
                builtin(name, r.on_error, reshape(name, ReshapeKind::Rename(pairs))),
                1,
            )
        }
        OperatorSpec::Set(st) => {
            let pairs = st.fields.iter().map(|(a, v)| (a.clone(), from_toml(v))).collect();
            (
                builtin(name, st.on_error, reshape(name, ReshapeKind::Set(pairs))),
                1,
            )
        }
        OperatorSpec::Aggregate(a) => (builtin(name, a.on_error, aggregate(name, a)), 1),
        plugin_op => {
            let ps = plugin_op.plugin().expect("every other operator runs a plugin");
            let world = plugin_op.world().expect("plugin operator");
            let plugin = engine
                .load_with(&m.path(&ps.plugin), world, name, ps.fuel.is_some())
                .map_err(|e| m.error_at(&op.span(), "plugin", e.to_string()))?;
            let node = OperatorNode {
                name: name.to_owned(),
                kind: NodeKind::Plugin {
                    plugin,
                    limits: limits(ps.timeout, ps.memory_limit_mb, ps.fuel, ps.max_outputs_per_record),
                    mode: ps.call,
                    state_ttl: ps
                        .state_ttl
                        .iter()
                        .map(|(name, ttl)| (name.clone(), millis(**ttl)))
                        .collect(),
                },
                policy: ps.on_error,
                failures: Default::default(),
                calls: Default::default(),
                grants: grants(m, &ps.grants),
            };
            (node, ps.parallelism.unwrap_or(1))
        }
    })
}

/// For a sink that commits with checkpoints: how to ask it which
/// checkpoint's output it last committed.
fn committed_checkpoint(m: &Manifest) -> Option<CommittedCheckpoint> {
    m.sinks().iter().find_map(|s| committed_checkpoint_of(m, s.spec))
}

fn committed_checkpoint_of(m: &Manifest, sink: &SinkSpec) -> Option<CommittedCheckpoint> {
    match sink {
        SinkSpec::Kafka(k) if k.exactly_once => {
            let (spec, pipeline) = (k.clone(), m.spec.pipeline.get_ref().name.clone());
            Some(Box::new(move || {
                Ok(crate::connectors::kafka::committed_checkpoint(&spec, &pipeline)?)
            }))
        }
        SinkSpec::Postgres(p) if p.exactly_once => {
            let (spec, pipeline) = (p.clone(), m.spec.pipeline.get_ref().name.clone());
            Some(Box::new(move || {
                Ok(postgres::committed_checkpoint(&spec, &pipeline)?)
            }))
        }
        _ => None,
    }
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
    Ok(Some(AdminSettings {
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

/// For a sink writing to a database: how to check, before a run, that its
/// table fits the mapping.
fn sink_check(sink: &SinkSpec) -> Option<SinkCheck> {
    match sink {
        SinkSpec::Postgres(p) => {
            let spec = p.clone();
            Some(Box::new(move || postgres::check_table(&spec)))
        }
        _ => None,
    }
}

fn checkpoint_settings(m: &Manifest) -> Option<CheckpointSettings> {
    let spec = m.spec.checkpoint.as_ref()?.get_ref();
    let dir = match &spec.path {
        Some(p) => m.path(p),
        None => m
            .dir
            .join(".mailer")
            .join(&m.spec.pipeline.get_ref().name)
            .join("checkpoints"),
    };
    Some(CheckpointSettings {
        interval: spec.interval,
        dir,
        keep: spec.keep,
        tolerable_failures: spec.tolerable_failures,
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

fn limits(
    timeout: std::time::Duration,
    memory_limit_mb: u64,
    fuel: Option<u64>,
    max_outputs: u32,
) -> PluginLimits {
    PluginLimits {
        timeout,
        memory_bytes: (memory_limit_mb as usize) << 20,
        fuel,
        max_outputs_per_record: max_outputs,
    }
}

/// The grants of a plugin (checked: the folder exists, the variables are
/// set).
fn grants(m: &Manifest, g: &GrantsSpec) -> Arc<Grants> {
    Arc::new(Grants {
        dir: g.dir.as_ref().map(|d| m.path(d)),
        env: g
            .env
            .iter()
            .filter_map(|n| Some((n.clone(), std::env::var(n).ok()?)))
            .collect(),
        clocks: g.clocks,
        random: g.random,
    })
}

fn window_node(
    name: &str,
    w: &WindowOperatorSpec,
    plugin: Option<(Arc<LoadedPlugin>, PluginLimits)>,
) -> OperatorNode {
    let ms = |d: Option<std::time::Duration>| d.map_or(1, millis);
    let assigner = match w.window {
        WindowKind::Tumbling => Assigner::Tumbling { size: ms(w.size) },
        WindowKind::Sliding => Assigner::Sliding {
            size: ms(w.size),
            slide: ms(w.slide),
        },
        WindowKind::Session => Assigner::Session { gap: ms(w.gap) },
    };
    OperatorNode {
        name: name.to_owned(),
        kind: NodeKind::Window {
            spec: WindowSpec {
                assigner,
                allowed_lateness: i64::try_from(w.allowed_lateness.as_millis()).unwrap_or(i64::MAX),
                aggregates: w
                    .aggregates
                    .clone()
                    .unwrap_or_else(crate::manifest::defaults::aggregates),
                field: w.field.clone(),
                processing_time: w.time == TimeDomain::Processing,
            },
            plugin,
            side_output: w.late == LateSpec::SideOutput,
            late_records: Default::default(),
        },
        policy: w.on_error,
        failures: Default::default(),
        calls: Default::default(),
        grants: Default::default(),
    }
}

fn source(m: &Manifest, name: &str, spec: &SourceSpec) -> Endpoint<OpenSource> {
    let operator = name.to_owned();
    let name = name.to_owned();
    match spec {
        SourceSpec::Generator(g) => {
            let (count, keys, seed, div, rate) = (g.count, g.keys, g.seed, g.time_divisor, g.rate);
            let prefix = g.value_prefix.clone();
            let bound = count.map_or("unbounded".to_owned(), |c| format!("{c} records"));
            Endpoint {
                name,
                description: format!("generator ({bound})"),
                open: Box::new(move |_| {
                    let source =
                        GeneratorSource::new(count, keys, seed, div, rate).with_value_prefix(&prefix);
                    Ok(Box::new(source) as _)
                }),
            }
        }
        SourceSpec::Kafka(k) => {
            let description = format!("kafka topics {} (group `{}`)", k.topics.join(", "), k.group_id);
            let spec = k.clone();
            Endpoint {
                name,
                description,
                open: Box::new(move |dead_letter| {
                    let rejects =
                        FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                    Ok(Box::new(KafkaSource::open(&spec, rejects)?) as _)
                }),
            }
        }
        SourceSpec::File(f) => {
            let path = m.path(&f.path);
            let (format, key, ts, rate) = (f.format, f.key_field.clone(), f.timestamp_field.clone(), f.rate);
            Endpoint {
                name,
                description: format!("file `{}` ({})", f.path, serde_plain(&format)),
                open: Box::new(move |_| {
                    Ok(Box::new(FileSource::open(&path, format, key, ts)?.with_rate(rate)) as _)
                }),
            }
        }
    }
}

fn sink(m: &Manifest, name: &str, spec: &SinkSpec) -> Endpoint<OpenSink> {
    // What its dead letters' `mailer.operator` header names.
    let operator = name.to_owned();
    let name = name.to_owned();
    match spec {
        SinkSpec::Stdout(s) => {
            let format = s.format;
            Endpoint {
                name,
                description: format!("stdout ({})", serde_plain(&format)),
                open: Box::new(move |_| Ok(Box::new(StdoutSink::new(format)) as _)),
            }
        }
        SinkSpec::File(f) => {
            let (path, format, append) = (m.path(&f.path), f.format, f.append);
            Endpoint {
                name,
                description: format!("file `{}` ({})", f.path, serde_plain(&format)),
                open: Box::new(move |_| Ok(Box::new(FileSink::create(&path, format, append)?) as _)),
            }
        }
        SinkSpec::Kafka(k) if k.exactly_once => {
            let (spec, pipeline) = (k.clone(), m.spec.pipeline.get_ref().name.clone());
            Endpoint {
                name,
                description: format!("kafka topic `{}` (exactly once, transactional)", k.topic),
                open: Box::new(move |dead_letter| {
                    let rejects =
                        FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                    Ok(Box::new(TransactionalKafkaSink::open(&spec, &pipeline, rejects)?) as _)
                }),
            }
        }
        SinkSpec::Kafka(k) => {
            let spec = k.clone();
            Endpoint {
                name,
                description: format!("kafka topic `{}`", k.topic),
                open: Box::new(move |dead_letter| {
                    let rejects =
                        FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                    Ok(Box::new(KafkaSink::open(&spec, rejects)?) as _)
                }),
            }
        }
        SinkSpec::Postgres(p) => {
            let (spec, pipeline) = (p.clone(), m.spec.pipeline.get_ref().name.clone());
            let mode = match (p.mode, p.exactly_once) {
                (WriteMode::Insert, false) => "insert",
                (WriteMode::Upsert, false) => "upsert",
                (WriteMode::Insert, true) => "insert, exactly once",
                (WriteMode::Upsert, true) => "upsert, exactly once",
            };
            Endpoint {
                name,
                description: format!("postgres table `{}` ({mode})", p.table),
                open: Box::new(move |dead_letter| {
                    let rejects =
                        FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                    Ok(Box::new(PostgresSink::open(&spec, &pipeline, rejects)?) as _)
                }),
            }
        }
        SinkSpec::Blackhole(_) => Endpoint {
            name,
            description: "blackhole".to_owned(),
            open: Box::new(|_| Ok(Box::new(BlackholeSink) as _)),
        },
    }
}

/// The manifest spelling of a unit enum value.
fn serde_plain(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn builtin(name: &str, policy: FailurePolicy, factory: NativeFactory) -> OperatorNode {
    OperatorNode {
        name: name.to_owned(),
        kind: NodeKind::Native(factory),
        policy,
        failures: Default::default(),
        calls: Default::default(),
        grants: Default::default(),
    }
}

fn key_from_field(name: &str, f: &str) -> NativeFactory {
    let (name, f) = (name.to_owned(), f.to_owned());
    Arc::new(move |_, failure| Ok(Box::new(KeyFromField::new(&name, &f, failure))))
}

fn field_filter(name: &str, f: &FieldFilterSpec) -> NativeFactory {
    let (name, field, op) = (name.to_owned(), f.field.clone(), f.op);
    let value = f.value.as_ref().map_or(serde_json::Value::Null, from_toml);
    Arc::new(move |_, failure| {
        let filter = FieldFilter::new(&name, &field, op, value.clone(), failure)
            .expect("checked when the manifest was validated");
        Ok(Box::new(filter))
    })
}

fn reshape(name: &str, kind: ReshapeKind) -> NativeFactory {
    let name = name.to_owned();
    Arc::new(move |_, failure| Ok(Box::new(Reshape::new(&name, kind.clone(), failure))))
}

fn aggregate(name: &str, a: &AggregateSpec) -> NativeFactory {
    aggregate_factory(name, a.aggregates.clone(), a.field.clone())
}

/// Makes the running `aggregates` of each key over the JSON `field` of the
/// values, for operator `name`.
pub fn aggregate_factory(
    name: &str,
    aggregates: Vec<crate::time::AggregateKind>,
    field: Option<String>,
) -> NativeFactory {
    let name = name.to_owned();
    Arc::new(move |ctx, failure| {
        let state = ctx.open_state(&name)?;
        Ok(Box::new(RunningAggregate::new(
            &name,
            ctx.op_index,
            ctx.key_groups,
            aggregates.clone(),
            field.clone(),
            state,
            failure,
        )))
    })
}
