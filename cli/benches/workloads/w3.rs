//! W3: key_by key (1,000 keys) -> tumbling event-time window of 1 s
//! (watermark = max ts, event time = g / 10) -> count and sum -> blackhole;
//! the built-in aggregates (native) or the `bench-count-sum` plugin of the
//! aggregate world (wasm), keyed parallelism 1 and 2, both backends.

use crate::common::{measure, plan, records, rocks_dir, stage};
use mailer::connectors::splitmix64;
use mailer::failure::FailurePolicy;
use mailer::operators::window::{AggregateKind, Assigner, WindowNode, WindowSpec};
use mailer::operators::{NodeKind, OperatorNode};
use mailer::plugin::{PluginEngine, PluginLimits, World};
use mailer::state::BackendKind;
use std::path::Path;
use std::time::Duration;

const KEYS: u64 = 1_000;
const DIVISOR: u64 = 10;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    for logic in ["native", "wasm"] {
        for p in [1, 2] {
            for backend in ["memory", "rocksdb"] {
                let name = format!("w3-tumbling-count-{logic}-p{p}-{backend}");
                let n2 = name.clone();
                v.push((name, Box::new(move || run(&n2, logic == "wasm", p, backend))));
            }
        }
    }
    v
}

/// One result per (key, window) that got a record: counted exactly.
fn expected_results(n: u64) -> u64 {
    let windows = (n / DIVISOR / 1000 + 1) as usize;
    let mut seen = vec![false; windows * KEYS as usize];
    for g in 0..n {
        let w = (g / DIVISOR / 1000) as usize;
        seen[w * KEYS as usize + (splitmix64(g) % KEYS) as usize] = true;
    }
    seen.iter().filter(|s| **s).count() as u64
}

fn run(name: &str, wasm: bool, parallelism: usize, backend: &str) {
    let n = records();
    let expected = expected_results(n);
    let plugin = wasm.then(|| {
        let engine = PluginEngine::new().unwrap();
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/bench-count-sum.wasm");
        let plugin = engine
            .load(&path, World::Window, "window")
            .expect("run `just plugins` first");
        let limits = PluginLimits {
            timeout: Duration::from_secs(1),
            memory_bytes: 64 << 20,
            ..Default::default()
        };
        (plugin, limits)
    });
    let node = OperatorNode {
        name: "window".into(),
        kind: NodeKind::Window(WindowNode {
            spec: WindowSpec {
                assigner: Assigner::Tumbling { size: 1000 },
                allowed_lateness: 0,
                aggregates: vec![AggregateKind::Count, AggregateKind::Sum],
                field: None,
                processing_time: false,
            },
            plugin,
            side_output: false,
            late_records: Default::default(),
        }),
        policy: FailurePolicy::Fail,
        failures: Default::default(),
        calls: Default::default(),
        grants: Default::default(),
    };
    let state = if backend == "rocksdb" {
        rocks_dir(name)
    } else {
        BackendKind::Memory
    };
    let stages = vec![stage("keyed", parallelism, true, vec![node])];
    let p = plan(name, n, Some(KEYS), DIVISOR, stages, true, state);
    measure(name, n, p, expected, "");
}
