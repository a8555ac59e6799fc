//! From a validated manifest to a plan: plugins loaded and checked against
//! their operators' worlds, operators grouped into stages.

use super::{Endpoint, NodeKind, OpenSink, OpenSource, OperatorNode, OperatorStage, Plan, WatermarkSettings};
use crate::connectors::{BlackholeSink, FileSink, FileSource, GeneratorSource, StdoutSink};
use crate::manifest::{
    LateSpec, Manifest, ManifestError, OperatorSpec, SinkSpec, SourceSpec, StateBackendName, WindowKind,
    WindowOperatorSpec,
};
use crate::plugin::{PluginEngine, PluginLimits};
use crate::runtime::Routing;
use crate::state::BackendKind;
use crate::time::{Assigner, WindowSpec, millis};

/// Plans the manifest's pipeline, loading its plugins with `engine`. A plugin
/// that cannot be loaded, or whose world does not fit its operator, is
/// reported at the operator's `plugin` line.
pub fn build(m: &Manifest, engine: &PluginEngine) -> Result<Plan, ManifestError> {
    let p = m.spec.pipeline.get_ref();
    let key_groups = p.max_parallelism;
    let mut stages: Vec<OperatorStage> = Vec::new();
    let mut keyed = false;
    for (op, name) in m.spec.operators.iter().zip(&m.operator_names) {
        let spec = op.get_ref();
        if let OperatorSpec::Window(w) = spec {
            stages
                .last_mut()
                .expect("validated: a window follows a key_by")
                .operators
                .push(window_node(name, w));
            continue;
        }
        if let OperatorSpec::KeyBy(k) = spec {
            keyed = true;
            stages.push(OperatorStage {
                name: format!("keyed-{}", stages.len() + 1),
                parallelism: k.parallelism,
                routing: Routing::Hash { key_groups },
                operators: Vec::new(),
            });
            continue;
        }
        let ps = spec.plugin().expect("every other operator runs a plugin");
        let world = spec.world().expect("plugin operator");
        let plugin = engine
            .load(&m.path(&ps.plugin), world, name)
            .map_err(|e| m.error_at(&op.span(), "plugin", e.to_string()))?;
        let node = OperatorNode {
            name: name.clone(),
            kind: NodeKind::Plugin {
                plugin,
                limits: PluginLimits {
                    timeout: ps.timeout,
                    memory_bytes: (ps.memory_limit_mb as usize) << 20,
                },
                mode: ps.call,
            },
            policy: ps.on_error,
            failures: Default::default(),
        };
        let parallelism = ps.parallelism.unwrap_or(1);
        match stages.last_mut() {
            Some(s) if keyed || s.parallelism == parallelism => s.operators.push(node),
            _ => stages.push(OperatorStage {
                name: format!("stage-{}", stages.len() + 1),
                parallelism,
                routing: Routing::RoundRobin,
                operators: vec![node],
            }),
        }
    }
    Ok(Plan {
        name: p.name.clone(),
        manifest_hash: m.hash.clone(),
        batch_size: p.batch_size.min(p.edge_capacity),
        edge_capacity: p.edge_capacity,
        shutdown_timeout: p.shutdown_timeout,
        source: source(m),
        stages,
        sink: sink(m, m.spec.sink.get_ref()),
        dead_letter: m.spec.dead_letter.as_ref().map(|d| sink(m, d.get_ref())),
        late_output: m.spec.late_output.as_ref().map(|d| sink(m, d.get_ref())),
        watermark: m.spec.watermark.as_ref().map(|w| WatermarkSettings {
            delay: w.get_ref().max_out_of_orderness,
            idle_timeout: w.get_ref().idle_timeout,
        }),
        state: state_backend(m),
        key_groups,
    })
}

fn state_backend(m: &Manifest) -> BackendKind {
    let Some(spec) = m.spec.state.as_ref().map(|s| s.get_ref()) else {
        return BackendKind::Memory;
    };
    match spec.backend {
        StateBackendName::Memory => BackendKind::Memory,
        StateBackendName::Rocksdb => BackendKind::Rocks(match &spec.path {
            Some(p) => m.path(p),
            None => m
                .dir
                .join(".mailer")
                .join(&m.spec.pipeline.get_ref().name)
                .join("state"),
        }),
    }
}

fn window_node(name: &str, w: &WindowOperatorSpec) -> OperatorNode {
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
                aggregates: w.aggregates.clone(),
                field: w.field.clone(),
            },
            side_output: w.late == LateSpec::SideOutput,
            late_records: Default::default(),
        },
        policy: w.on_error,
        failures: Default::default(),
    }
}

fn source(m: &Manifest) -> Endpoint<OpenSource> {
    match m.spec.source.get_ref() {
        SourceSpec::Generator(g) => {
            let (count, keys, seed, div, rate) = (g.count, g.keys, g.seed, g.time_divisor, g.rate);
            let bound = count.map_or("unbounded".to_owned(), |c| format!("{c} records"));
            Endpoint {
                description: format!("generator ({bound})"),
                open: Box::new(move || Ok(Box::new(GeneratorSource::new(count, keys, seed, div, rate)) as _)),
            }
        }
        SourceSpec::File(f) => {
            let path = m.path(&f.path);
            let (format, key, ts) = (f.format, f.key_field.clone(), f.timestamp_field.clone());
            Endpoint {
                description: format!("file `{}` ({})", f.path, serde_plain(&format)),
                open: Box::new(move || Ok(Box::new(FileSource::open(&path, format, key, ts)?) as _)),
            }
        }
    }
}

fn sink(m: &Manifest, spec: &SinkSpec) -> Endpoint<OpenSink> {
    match spec {
        SinkSpec::Stdout(s) => {
            let format = s.format;
            Endpoint {
                description: format!("stdout ({})", serde_plain(&format)),
                open: Box::new(move || Ok(Box::new(StdoutSink::new(format)) as _)),
            }
        }
        SinkSpec::File(f) => {
            let (path, format, append) = (m.path(&f.path), f.format, f.append);
            Endpoint {
                description: format!("file `{}` ({})", f.path, serde_plain(&format)),
                open: Box::new(move || Ok(Box::new(FileSink::create(&path, format, append)?) as _)),
            }
        }
        SinkSpec::Blackhole(_) => Endpoint {
            description: "blackhole".to_owned(),
            open: Box::new(|| Ok(Box::new(BlackholeSink) as _)),
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
