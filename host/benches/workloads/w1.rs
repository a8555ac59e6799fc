//! W1: 20M generated records -> map value x2 -> filter (value x2) % 4 == 0
//! (exactly half kept) -> blackhole; Wasm per batch, Wasm per record, native.

use crate::common::{measure, native, plan, records, records_of, stage, wasm};
use bytes::{BufMut, BytesMut};
use mailer::batch::Batch;
use mailer::operator::{Operator, OperatorError};
use mailer::plugin::{CallMode, PluginEngine, World};
use mailer::record::Record;
use mailer::state::BackendKind;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    ["w1-native", "w1-wasm-batch", "w1-wasm-record"]
        .into_iter()
        .map(|name| (name.to_owned(), Box::new(move || run(name)) as Box<dyn Fn()>))
        .collect()
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
            vec![
                wasm(&engine, "bench-double", World::Map, mode),
                wasm(&engine, "bench-mod4", World::Filter, mode),
            ]
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
