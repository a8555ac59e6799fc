//! W2: key_by key (100,000 keys) -> running sum of the values, one update
//! emitted per record -> blackhole; Wasm and native, keyed parallelism 1
//! and 2, in-memory and RocksDB state.

use crate::common::{measure, native, plan, records, records_of, rocks_dir, stage, wasm};
use mailer::batch::Batch;
use mailer::checkpoint::CheckpointSettings;
use mailer::failure::OperatorError;
use mailer::operators::Operator;
use mailer::plugin::{CallMode, PluginEngine, World};
use mailer::record::Record;
use mailer::state::{BackendKind, KeyedState};
use std::time::Duration;

const KEYS: u64 = 100_000;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    for how in ["native", "wasm"] {
        for p in [1, 2] {
            for backend in ["memory", "rocksdb"] {
                let name = format!("w2-keyed-reduce-{how}-p{p}-{backend}");
                let n2 = name.clone();
                v.push((name, Box::new(move || run(&n2, how, p, backend, false))));
            }
        }
    }
    // The throughput drop of checkpoints (`checkpoint-*` benchmarks).
    for backend in ["memory", "rocksdb"] {
        let name = format!("checkpoint-every-1s-w2-native-p1-{backend}");
        let n2 = name.clone();
        v.push((name, Box::new(move || run(&n2, "native", 1, backend, true))));
    }
    v
}

fn run(name: &str, how: &str, parallelism: usize, backend: &str, checkpoints: bool) {
    let n = records();
    let engine = PluginEngine::new().unwrap();
    let node = if how == "wasm" {
        wasm(&engine, "bench-sum", World::Reduce, CallMode::Batch)
    } else {
        native("sum", |ctx| {
            Ok(Box::new(NativeSum {
                state: ctx.open_state("sum")?,
            }))
        })
    };
    let state = if backend == "rocksdb" {
        rocks_dir(name)
    } else {
        BackendKind::Memory
    };
    let stages = vec![stage("keyed", parallelism, true, vec![node])];
    let mut p = plan(name, n, Some(KEYS), 1, stages, false, state);
    if checkpoints {
        let dir = std::env::temp_dir().join(format!("mailer-bench-{name}-checkpoints"));
        let _ = std::fs::remove_dir_all(&dir);
        p.checkpoint = Some(CheckpointSettings {
            interval: Duration::from_secs(1),
            dir,
            bucket: None,
            s3: Default::default(),
            keep: 2,
            tolerable_failures: 0,
            timeout: mailer::manifest::defaults::checkpoint_timeout(),
        });
    }
    measure(name, n, p, n, "");
}

/// The running sum per key, in the state backend like the plugin's.
struct NativeSum {
    state: KeyedState,
}

impl Operator for NativeSum {
    fn name(&self) -> &str {
        "sum"
    }

    fn snapshot(&mut self, dir: &std::path::Path) -> Result<bool, OperatorError> {
        self.state
            .snapshot(dir)
            .map_err(|e| OperatorError::state("sum", e))?;
        Ok(true)
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let err = |reason: String| OperatorError::State {
            operator: "sum".into(),
            reason,
        };
        let mut out = Vec::with_capacity(input.len());
        let mut text = itoa::Buffer::new();
        let mut k = Vec::with_capacity(64);
        // The batch's output values, split off one by one: one allocation a batch.
        let mut values = bytes::BytesMut::with_capacity(input.len() * 12);
        for r in records_of(input) {
            let key_group = self.state.key_group(r.key_bytes());
            self.state.entry_into(&mut k, key_group, r.key_bytes(), &[]);
            let mut acc = 0i64;
            self.state
                .read_with(&k, &mut |a| {
                    acc = a
                        .and_then(|a| std::str::from_utf8(a).ok())
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0)
                })
                .map_err(|e| err(e.to_string()))?;
            let v: i64 = std::str::from_utf8(&r.value)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            let sum = text.format(acc + v).as_bytes();
            self.state.put(&k, sum).map_err(|e| err(e.to_string()))?;
            values.extend_from_slice(sum);
            out.push(Record::new(r.key.clone(), values.split().freeze(), r.timestamp));
        }
        Ok(Batch::Records(out))
    }
}
