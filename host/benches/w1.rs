//! Benchmark W1 of `BENCH-WORKLOADS.md`: 20M generated records -> map
//! value x2 -> filter (value x2) % 4 == 0 (exactly half kept) -> blackhole,
//! run three ways: Wasm plugins called per batch, Wasm plugins called per
//! record, and the same logic as native Rust operators.
//!
//! `cargo bench -p mailer --bench w1 -- [name-prefix]` (the plugins must be
//! built: `just plugins`). Each variant runs in its own process so that its
//! peak RSS is its own. `MAILER_BENCH_RECORDS` overrides N.

use bytes::{BufMut, BytesMut};
use mailer::batch::Batch;
use mailer::connectors::{BlackholeSink, GeneratorSource};
use mailer::manifest::defaults;
use mailer::operator::{FailurePolicy, Operator, OperatorError};
use mailer::plan::{Endpoint, NodeKind, OperatorNode, OperatorStage, Plan};
use mailer::plugin::{CallMode, PluginEngine, PluginLimits, World};
use mailer::record::Record;
use mailer::runtime::{Routing, Shutdown, run};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const VARIANTS: [&str; 3] = ["w1-native", "w1-wasm-batch", "w1-wasm-record"];

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Some(i) = args.iter().position(|a| a == "--variant") {
        run_variant(&args[i + 1]);
        return;
    }
    if !args.iter().any(|a| a == "--bench") {
        println!("w1: a benchmark; run it with `just bench` or `cargo bench`");
        return;
    }
    let prefix = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .cloned()
        .unwrap_or_default();
    let mut rates = Vec::new();
    for name in VARIANTS.iter().filter(|v| v.starts_with(&prefix)) {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--variant", name])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        print!("{text}");
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rate: f64 = field(&text, "rec_per_s").parse().unwrap();
        rates.push((*name, rate));
    }
    let rate = |n: &str| rates.iter().find(|(v, _)| *v == n).map(|(_, r)| *r);
    if let (Some(native), Some(batch)) = (rate("w1-native"), rate("w1-wasm-batch")) {
        let record = rate("w1-wasm-record").map_or(String::new(), |r| {
            format!(" wasm_record_vs_native={:.3}", r / native)
        });
        println!(
            "bench w1-ratio wasm_batch_vs_native={:.3}{record}",
            batch / native
        );
    }
}

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    let start = line.find(&format!(" {key}=")).unwrap() + key.len() + 2;
    line[start..].split_whitespace().next().unwrap()
}

fn run_variant(name: &str) {
    let n: u64 = env_or("MAILER_BENCH_RECORDS", 20_000_000);
    let engine = PluginEngine::new().unwrap();
    let operators = match name {
        "w1-native" => vec![
            native("double", || Box::new(NativeDouble::default())),
            native("mod4", || Box::new(NativeMod4)),
        ],
        "w1-wasm-batch" => vec![
            wasm(&engine, "bench-double", World::Map, CallMode::Batch),
            wasm(&engine, "bench-mod4", World::Filter, CallMode::Batch),
        ],
        "w1-wasm-record" => vec![
            wasm(&engine, "bench-double", World::Map, CallMode::Record),
            wasm(&engine, "bench-mod4", World::Filter, CallMode::Record),
        ],
        other => panic!("unknown variant {other}"),
    };
    let plan = Plan {
        name: name.to_owned(),
        manifest_hash: String::new(),
        batch_size: env_or("MAILER_BENCH_BATCH", defaults::batch_size()),
        edge_capacity: env_or("MAILER_BENCH_EDGE", defaults::edge_capacity()),
        shutdown_timeout: Duration::from_secs(30),
        source: Endpoint {
            description: "generator".into(),
            open: Box::new(move || Ok(Box::new(GeneratorSource::new(Some(n), None, 0, 1, None)) as _)),
        },
        stages: vec![OperatorStage {
            name: "map-filter".into(),
            parallelism: 1,
            routing: Routing::RoundRobin,
            operators,
        }],
        sink: Endpoint {
            description: "blackhole".into(),
            open: Box::new(|| Ok(Box::new(BlackholeSink) as _)),
        },
        dead_letter: None,
        late_output: None,
        watermark: None,
        state: mailer::state::BackendKind::Memory,
        key_groups: defaults::max_parallelism(),
    };
    let report = run(plan, &Shutdown::new()).unwrap();
    assert_eq!(
        report.sink_records,
        n / 2 + n % 2,
        "exactly half of the records pass the filter"
    );
    let secs = report.elapsed.as_secs_f64();
    println!(
        "bench {name} records={n} secs={secs:.3} rec_per_s={:.0} sink_records={} peak_rss_kib={}",
        n as f64 / secs,
        report.sink_records,
        peak_rss_kib()
    );
}

/// A number from the environment, or `default`.
fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn native(name: &str, f: fn() -> Box<dyn Operator>) -> OperatorNode {
    OperatorNode {
        name: name.into(),
        kind: NodeKind::Native(Arc::new(f)),
        policy: FailurePolicy::Fail,
        failures: Default::default(),
    }
}

fn wasm(engine: &PluginEngine, plugin: &str, world: World, mode: CallMode) -> OperatorNode {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../plugins/dist/{plugin}.wasm"));
    OperatorNode {
        name: plugin.into(),
        kind: NodeKind::Plugin {
            plugin: engine
                .load(&path, world, plugin)
                .expect("run `just plugins` first"),
            limits: PluginLimits {
                timeout: Duration::from_secs(1),
                memory_bytes: 64 << 20,
            },
            mode,
        },
        policy: FailurePolicy::Fail,
        failures: Default::default(),
    }
}

fn parse(r: &Record, op: &str) -> Result<i64, OperatorError> {
    std::str::from_utf8(&r.value)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| OperatorError::RecordFailed {
            operator: op.into(),
            record: String::from_utf8_lossy(&r.value).into_owned(),
            reason: "not an integer".into(),
        })
}

/// value := value x 2, written into one buffer per batch (as the Wasm path
/// slices its outputs from one buffer).
#[derive(Default)]
struct NativeDouble {
    buf: BytesMut,
}

impl Operator for NativeDouble {
    fn name(&self) -> &str {
        "double"
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut records = input.into_records();
        self.buf.reserve(records.len() * 20);
        let mut text = itoa::Buffer::new();
        for r in &mut records {
            let v = parse(r, "double")?;
            self.buf.put_slice(text.format(v * 2).as_bytes());
            r.value = self.buf.split().freeze();
        }
        Ok(Batch::Records(records))
    }
}

/// Keeps multiples of 4.
struct NativeMod4;

impl Operator for NativeMod4 {
    fn name(&self) -> &str {
        "mod4"
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        for r in input.into_records() {
            if parse(&r, "mod4")? % 4 == 0 {
                out.push(r);
            }
        }
        Ok(Batch::Records(out))
    }
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
