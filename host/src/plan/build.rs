//! From a validated manifest to a plan: plugins loaded and checked against
//! their operators' worlds, operators grouped into stages.

use super::draft::{Draft, Placed, Step};
use super::{AdminSettings, AdminTls};
use super::{ClusterSettings, NodeKind, OperatorNode, Plan, WatermarkSettings};
use crate::checkpoint::CommittedCheckpoint;
use crate::checkpoint::{BucketUrl, CheckpointSettings, S3Settings};
use crate::clock::millis;
use crate::connectors::{Endpoint, OpenSink, OpenSource};
use crate::failure::FailurePolicy;
use crate::json::from_toml;
use crate::manifest::condition;
use crate::manifest::{
    BranchOperatorSpec, GrantsSpec, IntervalJoinOperatorSpec, JoinPluginSpec, LateSpec,
    LookupJoinOperatorSpec, Manifest, ManifestError, OperatorSpec, SinkSpec, SourceSpec, StateBackendName,
    TimeDomain, WindowKind, WindowOperatorSpec,
};
use crate::metrics::Telemetry;
use crate::operators::NativeFactory;
use crate::operators::branch::{BranchNode, PredicateNode};
use crate::operators::builtin::{
    ReshapeKind, aggregate_factory, field_filter_factory, key_from_field_factory, reshape_factory,
};
use crate::operators::join::{
    GlobalJoinSpec, IntervalJoinSpec, JoinKind, JoinNode, JoinSpec, LookupJoinSpec,
};
use crate::operators::wasm::WasmNode;
use crate::operators::window::WindowNode;
use crate::operators::window::{Assigner, WindowSpec};
use crate::plugin::{CallMode, Grants, LoadedPlugin, PluginEngine, PluginLimits, World};
use crate::state::BackendKind;
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
                    .map(|f| builtin(name, k.on_error, key_from_field_factory(name, f))),
                parallelism: k.parallelism,
            },
            OperatorSpec::IntervalJoin(j) => {
                let plugin = join_plugin(m, engine, op, name, j.plugin.as_ref())?;
                let spec = JoinSpec::Interval(interval_spec(j));
                join_step(join_node(name, spec, j.late, plugin, j.on_error), 1)
            }
            OperatorSpec::LookupJoin(j) => {
                let plugin = join_plugin(m, engine, op, name, j.plugin.as_ref())?;
                let node = join_node(name, lookup_spec(j), j.late, plugin, j.on_error);
                join_step(node, j.parallelism.unwrap_or(1))
            }
            OperatorSpec::CoProcess(_) => join_step(plugin_node(m, engine, op, name, op.get_ref())?.0, 1),
            OperatorSpec::Branch(b) => Step::Branch {
                node: branch_node(m, engine, op, b, name)?,
                parallelism: b.parallelism.unwrap_or(1),
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
        checkpoint_store: None,
        restore: None,
        committed_checkpoint: committed_checkpoint(m),
        sink_checks: m
            .sinks()
            .iter()
            .filter_map(|s| s.spec.config().table_check())
            .collect(),
        admin,
        telemetry,
        plugin_store: super::store_dir(&m.dir, &p.name),
        swapped_from: Default::default(),
        allow_state_downgrade: false,
        migrate_every_key: false,
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
        OperatorSpec::KeyBy(_)
        | OperatorSpec::IntervalJoin(_)
        | OperatorSpec::LookupJoin(_)
        | OperatorSpec::Branch(_) => {
            unreachable!("handled above")
        }
        OperatorSpec::FieldFilter(f) => {
            let value = f.value.as_ref().map_or(serde_json::Value::Null, from_toml);
            let factory = field_filter_factory(name, &f.field, f.op, value);
            (builtin(name, f.on_error, factory), 1)
        }
        OperatorSpec::Project(p) => (
            builtin(
                name,
                p.on_error,
                reshape_factory(name, ReshapeKind::Project(p.fields.clone())),
            ),
            1,
        ),
        OperatorSpec::Rename(r) => {
            let pairs = r.fields.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
            (
                builtin(
                    name,
                    r.on_error,
                    reshape_factory(name, ReshapeKind::Rename(pairs)),
                ),
                1,
            )
        }
        OperatorSpec::Set(st) => {
            let pairs = st.fields.iter().map(|(a, v)| (a.clone(), from_toml(v))).collect();
            (
                builtin(name, st.on_error, reshape_factory(name, ReshapeKind::Set(pairs))),
                1,
            )
        }
        OperatorSpec::Aggregate(a) => {
            let factory = aggregate_factory(name, a.aggregates.clone(), a.field.clone());
            (builtin(name, a.on_error, factory), 1)
        }
        plugin_op => plugin_node(m, engine, op, name, plugin_op)?,
    })
}

/// The node of branch operator `b`: each branch's predicate, a condition
/// or a `filter` plugin (loaded and checked here).
fn branch_node(
    m: &Manifest,
    engine: &PluginEngine,
    op: &toml::Spanned<OperatorSpec>,
    b: &BranchOperatorSpec,
    name: &str,
) -> Result<OperatorNode, ManifestError> {
    let mut branches = Vec::with_capacity(b.branches.len());
    let at = &op.span();
    for spec in &b.branches {
        let predicate = match (&spec.plugin, &spec.field, spec.op) {
            (Some(path), _, _) => PredicateNode::Plugin {
                plugin: engine
                    .load_with(&m.path(path), World::Filter, name, spec.fuel.is_some())
                    .map_err(|e| m.error_at(at, "plugin", e.to_string()))?,
                limits: limits(spec.timeout, spec.memory_limit_mb, spec.fuel, 1),
                mode: spec.call,
            },
            (None, Some(field), Some(op)) => {
                PredicateNode::Field(condition(m, at, field, op, spec.value.as_ref())?)
            }
            _ => unreachable!("validated: a condition or a plugin"),
        };
        branches.push((spec.name.clone(), predicate));
    }
    let mut node = OperatorNode::new(name, NodeKind::Branch(BranchNode { branches }), b.on_error);
    node.grants = grants(m, &b.grants);
    Ok(node)
}

/// The node of an operator of a record world and its parallelism.
fn plugin_node(
    m: &Manifest,
    engine: &PluginEngine,
    op: &toml::Spanned<OperatorSpec>,
    name: &str,
    plugin_op: &OperatorSpec,
) -> Result<(OperatorNode, usize), ManifestError> {
    let ps = plugin_op.plugin().expect("every other operator runs a plugin");
    let world = plugin_op.world().expect("plugin operator");
    let plugin = engine
        .load_with(&m.path(&ps.plugin), world, name, ps.fuel.is_some())
        .map_err(|e| m.error_at(&op.span(), "plugin", e.to_string()))?;
    let node = OperatorNode {
        name: name.to_owned(),
        kind: NodeKind::Plugin(WasmNode {
            plugin,
            limits: limits(ps.timeout, ps.memory_limit_mb, ps.fuel, ps.max_outputs_per_record),
            mode: ps.call,
            state_ttl: ps
                .state_ttl
                .iter()
                .map(|(name, ttl)| (name.clone(), millis(**ttl)))
                .collect(),
        }),
        policy: ps.on_error,
        failures: Default::default(),
        calls: Default::default(),
        grants: grants(m, &ps.grants),
    };
    Ok((node, ps.parallelism.unwrap_or(1)))
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
        kind: NodeKind::Window(WindowNode {
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
        }),
        policy: w.on_error,
        failures: Default::default(),
        calls: Default::default(),
        grants: Default::default(),
    }
}

fn source(m: &Manifest, name: &str, spec: &SourceSpec) -> Endpoint<OpenSource> {
    spec.config().endpoint(&m.connector_context(), name)
}

fn sink(m: &Manifest, name: &str, spec: &SinkSpec) -> Endpoint<OpenSink> {
    spec.config().endpoint(&m.connector_context(), name)
}

/// What the `interval_join` `j` computes.
fn interval_spec(j: &IntervalJoinOperatorSpec) -> IntervalJoinSpec {
    IntervalJoinSpec {
        lower: j.lower,
        upper: j.upper,
        kind: j.join,
    }
}

/// What the `lookup_join` `j` computes: with a keyed table, or with a
/// global one.
fn lookup_spec(j: &LookupJoinOperatorSpec) -> JoinSpec {
    let keep_unmatched = j.join == JoinKind::Left;
    match j.global {
        true => JoinSpec::Global(GlobalJoinSpec {
            key_field: j.key_field.clone(),
            keep_unmatched,
            max_rows: j.max_rows.unwrap_or(crate::manifest::defaults::max_global_rows()),
        }),
        false => JoinSpec::Lookup(LookupJoinSpec {
            as_of: j.as_of,
            keep_unmatched,
        }),
    }
}

/// The step of a join `node` reading its left (or stream) side as input 0
/// and its right (or table) side as input 1; `parallelism` workers when
/// its stream is not keyed (a global table's join).
fn join_step(node: OperatorNode, parallelism: usize) -> Step {
    let broadcast = match &node.kind {
        NodeKind::Join(j) => j.spec.broadcast_input(),
        _ => None,
    };
    Step::Apart {
        node,
        input_numbers: vec![0, 1],
        parallelism,
        broadcast,
    }
}

/// The node of the join `name` computing `spec`, its late records as `late`
/// says, its output made by `plugin` (when set), what fails going to `policy`.
fn join_node(
    name: &str,
    spec: JoinSpec,
    late: LateSpec,
    plugin: Option<(Arc<LoadedPlugin>, PluginLimits, CallMode)>,
    policy: FailurePolicy,
) -> OperatorNode {
    let kind = NodeKind::Join(JoinNode {
        spec,
        side_output: late == LateSpec::SideOutput,
        late_records: Default::default(),
        plugin,
    });
    OperatorNode::new(name, kind, policy)
}

/// The `join`-world plugin of join `name`, loaded and checked.
fn join_plugin(
    m: &Manifest,
    engine: &PluginEngine,
    op: &toml::Spanned<OperatorSpec>,
    name: &str,
    spec: Option<&JoinPluginSpec>,
) -> Result<Option<(Arc<LoadedPlugin>, PluginLimits, CallMode)>, ManifestError> {
    let Some(spec) = spec else { return Ok(None) };
    let s = &spec.settings;
    let plugin = engine
        .load_with(&m.path(&spec.path), World::Join, name, s.fuel.is_some())
        .map_err(|e| m.error_at(&op.span(), "plugin", e.to_string()))?;
    let limits = limits(s.timeout, s.memory_limit_mb, s.fuel, s.max_outputs_per_record);
    Ok(Some((plugin, limits, s.call)))
}

fn builtin(name: &str, policy: FailurePolicy, factory: NativeFactory) -> OperatorNode {
    OperatorNode::new(name, NodeKind::Native(factory), policy)
}
