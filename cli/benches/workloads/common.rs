//! What the workloads share: plans, nodes, measuring and printing.

use mailer::batch::Batch;
use mailer::connectors::Endpoint;
use mailer::connectors::{BlackholeSink, GeneratorSource};
use mailer::failure::FailurePolicy;
use mailer::manifest::defaults;
use mailer::operators::Operator;
use mailer::operators::wasm::WasmNode;
use mailer::operators::{InstanceContext, InstantiateError};
use mailer::operators::{NodeKind, OperatorNode};
use mailer::plan::Routing;
use mailer::plan::{OperatorStage, Plan, SinkNode, WatermarkSettings};
use mailer::plugin::{CallMode, PluginEngine, PluginLimits, World};
use mailer::runtime::{RunReport, Shutdown, run};
use mailer::state::BackendKind;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

pub use mailer_test_support::env_or;

/// N: the records of a workload run.
pub fn records() -> u64 {
    env_or("MAILER_BENCH_RECORDS", 20_000_000)
}

/// The process's peak resident memory, KiB.
pub fn peak_rss_kib() -> u64 {
    mailer_test_support::peak_rss_kib(std::process::id()).unwrap_or(0)
}

/// The process's resident memory now, KiB.
pub fn rss_kib() -> u64 {
    mailer_test_support::rss_kib(std::process::id()).unwrap_or(0)
}

/// A native operator node; `f` makes one instance per worker.
pub fn native(
    name: &str,
    f: impl Fn(&InstanceContext<'_>) -> Result<Box<dyn Operator>, InstantiateError> + Send + Sync + 'static,
) -> OperatorNode {
    OperatorNode {
        name: name.into(),
        kind: NodeKind::Native(Arc::new(move |ctx: &InstanceContext<'_>, _| f(ctx))),
        policy: FailurePolicy::Fail,
        failures: Default::default(),
        calls: Default::default(),
        grants: Default::default(),
    }
}

/// A plugin operator node from `plugins/dist/<plugin>.wasm`.
pub fn wasm(engine: &PluginEngine, plugin: &str, world: World, mode: CallMode) -> OperatorNode {
    wasm_at(engine, &mailer_test_support::plugin(plugin), plugin, world, mode)
}

/// Operator `name` running the plugin at `path`.
pub fn wasm_at(engine: &PluginEngine, path: &Path, name: &str, world: World, mode: CallMode) -> OperatorNode {
    OperatorNode {
        name: name.into(),
        kind: NodeKind::Plugin(WasmNode {
            plugin: engine.load(path, world, name).expect("run `just plugins` first"),
            limits: PluginLimits {
                timeout: Duration::from_secs(1),
                memory_bytes: 64 << 20,
                ..Default::default()
            },
            mode,
            state_ttl: Default::default(),
        }),
        policy: FailurePolicy::Fail,
        failures: Default::default(),
        calls: Default::default(),
        grants: Default::default(),
    }
}

/// A stage of `operators` at `parallelism`, keyed or not.
pub fn stage(name: &str, parallelism: usize, keyed: bool, operators: Vec<OperatorNode>) -> OperatorStage {
    OperatorStage {
        name: name.into(),
        inputs: Vec::new(),
        input_numbers: Vec::new(),
        parallelism,
        routing: if keyed {
            Routing::Hash {
                key_groups: defaults::max_parallelism(),
            }
        } else {
            Routing::RoundRobin
        },
        broadcast_input: None,
        operators,
    }
}

/// generator(n, keys, divisor) -> stages -> blackhole, manifest defaults.
pub fn plan(
    name: &str,
    n: u64,
    keys: Option<u64>,
    time_divisor: u64,
    mut stages: Vec<OperatorStage>,
    watermark: bool,
    state: BackendKind,
) -> Plan {
    let sink_inputs = Plan::chain(&mut stages);
    Plan {
        name: name.to_owned(),
        manifest_hash: String::new(),
        batch_size: env_or("MAILER_BENCH_BATCH", defaults::batch_size()),
        edge_capacity: env_or("MAILER_BENCH_EDGE", defaults::edge_capacity()),
        shutdown_timeout: Duration::from_secs(30),
        sources: vec![Endpoint {
            name: "source".into(),
            description: "generator".into(),
            open: Box::new(move |_| {
                Ok(Box::new(GeneratorSource::new(Some(n), keys, 0, time_divisor, None)) as _)
            }),
        }],
        stages,
        sinks: vec![SinkNode {
            end: Endpoint {
                name: "sink".into(),
                description: "blackhole".into(),
                open: Box::new(|_| Ok(Box::new(BlackholeSink) as _)),
            },
            inputs: sink_inputs,
        }],
        dead_letter: None,
        late_output: None,
        watermark: watermark.then_some(WatermarkSettings {
            delay: Duration::ZERO,
            idle_timeout: None,
        }),
        state,
        key_groups: defaults::max_parallelism(),
        checkpoint: None,
        committed_checkpoint: None,
        sink_checks: Vec::new(),
        admin: None,
        telemetry: mailer::metrics::Telemetry::new(name, true),
        plugin_store: std::path::PathBuf::new(),
        warnings: Vec::new(),
        cluster: None,
    }
}

/// Runs a plan and prints its line; checks the sink saw `expected` records.
pub fn measure(name: &str, n: u64, plan: Plan, expected: u64, extra: &str) {
    let report: RunReport = run(plan, &Shutdown::new()).unwrap();
    assert_eq!(report.sink_records, expected, "{name}: records at the sink");
    let secs = report.elapsed.as_secs_f64();
    println!(
        "bench {name} records={n} secs={secs:.3} rec_per_s={:.0} sink_records={} peak_rss_kib={}{extra}",
        n as f64 / secs,
        report.sink_records,
        peak_rss_kib()
    );
}

/// A state folder for a RocksDB variant, removed first, with a cache of
/// `MAILER_BENCH_CACHE_MB` (default 64; 0 for none) and a block cache of
/// `MAILER_BENCH_BLOCK_CACHE_MB` (default 128).
pub fn rocks_dir(name: &str) -> BackendKind {
    let dir = std::env::temp_dir().join(format!("mailer-bench-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    BackendKind::Rocks {
        dir,
        cache_bytes: env_or::<usize>("MAILER_BENCH_CACHE_MB", 64) << 20,
        block_cache_bytes: env_or::<usize>("MAILER_BENCH_BLOCK_CACHE_MB", 128) << 20,
    }
}

/// A builder pipeline `name` with the benchmarks' batch and edge sizes,
/// watermarks 1 ms behind the largest time seen (Flink's monotonous
/// timestamps: a record at the largest time so far is not late), and its
/// state in `backend` (`memory`, or `rocksdb` in a fresh folder).
pub fn bench_pipeline(name: &str, backend: &str) -> mailer::Pipeline {
    let p = mailer::Pipeline::new(name)
        .batch_size(env_or("MAILER_BENCH_BATCH", defaults::batch_size()))
        .edge_capacity(env_or("MAILER_BENCH_EDGE", defaults::edge_capacity()))
        .watermarks(Duration::from_millis(1));
    match rocks_dir(name) {
        BackendKind::Rocks { dir, .. } if backend == "rocksdb" => p.state_in_rocksdb(dir),
        _ => p,
    }
}

/// Takes a batch's records (native operators work on decoded records).
pub fn records_of(b: Batch) -> Vec<mailer::record::Record> {
    b.into_records()
}

fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let start = line.find(&format!(" {key}="))? + key.len() + 2;
    line[start..].split_whitespace().next()
}

/// `bench <x>-ratio` lines: each Wasm variant against its native twin.
pub fn ratios(outputs: &[String]) -> Vec<String> {
    let rates: Vec<(String, f64)> = outputs
        .iter()
        .flat_map(|o| o.lines())
        .filter_map(|l| {
            let name = l.strip_prefix("bench ")?.split_whitespace().next()?.to_owned();
            Some((name, field(l, "rec_per_s")?.parse().ok()?))
        })
        .collect();
    let rate = |n: &str| rates.iter().find(|(v, _)| v == n).map(|(_, r)| *r);
    let mut out = Vec::new();
    for (name, r) in &rates {
        if let Some(twin) = name
            .contains("wasm")
            .then(|| name.replace("wasm-batch", "native").replace("wasm", "native"))
            && let Some(native) = rate(&twin)
        {
            out.push(format!("bench {name}-ratio wasm_vs_native={:.3}", r / native));
        }
        if name == "w1-metrics-on"
            && let Some(off) = rate("w1-metrics-off")
        {
            out.push(format!("bench w1-metrics-ratio on_vs_off={:.3}", r / off));
        }
        if name == "sandbox-beside-raw"
            && let (Some(alone), Some(busy), Some(hostile)) = (
                rate("sandbox-alone"),
                rate("sandbox-beside-busy"),
                rate("sandbox-beside-hostile"),
            )
        {
            out.push(format!(
                "bench sandbox-ratio hostile_vs_busy={:.3} raw_vs_busy={:.3} hostile_vs_alone={:.3} raw_vs_alone={:.3} busy_vs_alone={:.3}",
                hostile / busy,
                r / busy,
                hostile / alone,
                r / alone,
                busy / alone
            ));
        }
        if name.starts_with("kafka-passthrough")
            && let Some(raw) = rate("kafka-raw")
        {
            out.push(format!("bench {name}-ratio vs_kafka_raw={:.3}", r / raw));
        }
        if name.starts_with("pg-sink")
            && let Some(copy) = rate("pg-copy-psql")
        {
            out.push(format!("bench {name}-ratio vs_psql_copy={:.3}", r / copy));
        }
    }
    out
}
