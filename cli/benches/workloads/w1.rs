//! W1: 20M generated records -> map value x2 -> filter (value x2) % 4 == 0
//! (exactly half kept) -> blackhole; Wasm per batch, Wasm per record, native.

use crate::common::{measure, native, peak_rss_kib, plan, records, records_of, stage, wasm};
use bytes::{BufMut, BytesMut};
use mailer::batch::Batch;
use mailer::failure::OperatorError;
use mailer::metrics::Telemetry;
use mailer::operators::Operator;
use mailer::operators::OperatorNode;
use mailer::plugin::{CallMode, PluginEngine, World};
use mailer::record::Record;
use mailer::runtime::Shutdown;
use mailer::state::BackendKind;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = ["w1-native", "w1-wasm-batch", "w1-wasm-record"]
        .into_iter()
        .map(|name| (name.to_owned(), Box::new(move || run(name)) as Box<dyn Fn()>))
        .collect();
    v.push((
        "w1-metrics-on".into(),
        Box::new(|| metrics("w1-metrics-on", true)),
    ));
    v.push((
        "w1-metrics-off".into(),
        Box::new(|| metrics("w1-metrics-off", false)),
    ));
    v
}

/// Runs of W1 (Wasm per batch) compared for the cost of metrics.
const METRICS_RUNS: usize = 3;

/// W1 (Wasm per batch) with metrics on (plugin calls timed, the metrics
/// rendered every second as a scraper would ask) or off; the median of
/// [`METRICS_RUNS`] runs.
fn metrics(name: &str, on: bool) {
    let n = records();
    let mut secs = Vec::new();
    let mut scrapes = 0;
    for _ in 0..METRICS_RUNS {
        let engine = PluginEngine::new().unwrap();
        let telemetry = Telemetry::new(name, on);
        let mut operators = wasm_operators(&engine, CallMode::Batch);
        for op in &mut operators {
            op.calls = telemetry.call_stats(&op.name);
        }
        let mut p = plan(
            name,
            n,
            None,
            1,
            vec![stage("map-filter", 1, false, operators)],
            false,
            BackendKind::Memory,
        );
        p.telemetry = telemetry.clone();
        let done = Arc::new(AtomicBool::new(false));
        let scraper = on.then(|| {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut count = 0;
                while !done.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_secs(1));
                    assert!(telemetry.render(&[]).contains("mailer_operator_call_seconds"));
                    count += 1;
                }
                count
            })
        });
        let report = mailer::runtime::run(p, &Shutdown::new()).unwrap();
        done.store(true, Ordering::Relaxed);
        scrapes += scraper.map_or(0, |s| s.join().unwrap());
        assert_eq!(report.sink_records, n / 2 + n % 2, "{name}: records at the sink");
        secs.push(report.elapsed.as_secs_f64());
    }
    secs.sort_by(f64::total_cmp);
    let median = secs[secs.len() / 2];
    println!(
        "bench {name} records={n} secs={median:.3} rec_per_s={:.0} runs={METRICS_RUNS} scrapes={scrapes} peak_rss_kib={}",
        n as f64 / median,
        peak_rss_kib()
    );
}

/// W1's map and filter as plugins, called per batch or per record.
pub fn wasm_operators(engine: &PluginEngine, mode: CallMode) -> Vec<OperatorNode> {
    vec![
        wasm(engine, "bench-double", World::Map, mode),
        wasm(engine, "bench-mod4", World::Filter, mode),
    ]
}

fn run(name: &str) {
    let n = records();
    let engine = PluginEngine::new().unwrap();
    let operators = match name {
        "w1-native" => vec![
            native("double", |_| Ok(Box::new(NativeDouble::default()))),
            native("mod4", |_| Ok(Box::new(NativeMod4))),
        ],
        _ => {
            let mode = if name == "w1-wasm-batch" {
                CallMode::Batch
            } else {
                CallMode::Record
            };
            wasm_operators(&engine, mode)
        }
    };
    let stages = vec![stage("map-filter", 1, false, operators)];
    let p = plan(name, n, None, 1, stages, false, BackendKind::Memory);
    measure(name, n, p, n / 2 + n % 2, "");
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
        let mut records = records_of(input);
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
        for r in records_of(input) {
            if parse(&r, "mod4")? % 4 == 0 {
                out.push(r);
            }
        }
        Ok(Batch::Records(out))
    }
}
