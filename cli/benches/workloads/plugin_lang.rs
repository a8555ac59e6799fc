//! The same plugins in Rust, Python and JavaScript: a map (`uppercase`,
//! `py-uppercase`, `js-uppercase`) and a keyed running sum (`bench-sum`
//! and its `py-`/`js-` twins, W2's reduce over 100,000 keys), each on one
//! worker (one core).
//!
//! Each variant prints its throughput and `compile_ms` (loading and
//! compiling the component), `instantiate_ms` (one instance, the mean of
//! [`INSTANCES`]) and, for the map, `instance_kib`: the resident memory each
//! of those instances adds once it has mapped a batch of 1,024 records
//! (before a call, an instance's memory is mostly copy-on-write pages of
//! the compiled image, not resident yet). `MAILER_BENCH_LANG_RECORDS` sets N (default 500,000:
//! the script languages run a few hundred thousand records a second).

use crate::common::{env_or, measure, plan, stage, wasm_at};
use mailer::plugin::{CallMode, PluginEngine, PluginInstance, World};
use mailer::state::BackendKind;
use std::time::Instant;

/// Instances made to measure instantiation.
const INSTANCES: u64 = 8;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    for (what, plugin, world) in [
        ("map", "uppercase", World::Map),
        ("sum", "bench-sum", World::Reduce),
    ] {
        for (lang, prefix) in [("rust", ""), ("python", "py-"), ("js", "js-")] {
            let name = format!("plugin-lang-{what}-{lang}");
            let file = format!("{prefix}{plugin}");
            let n2 = name.clone();
            v.push((name, Box::new(move || run(&n2, &file, world))));
        }
    }
    v
}

fn run(name: &str, plugin: &str, world: World) {
    let n: u64 = env_or("MAILER_BENCH_LANG_RECORDS", 500_000);
    let engine = PluginEngine::new().unwrap();
    let started = Instant::now();
    let mut node = wasm_at(
        &engine,
        &mailer_test_support::plugin(plugin),
        plugin,
        world,
        CallMode::Batch,
    );
    let compile_ms = started.elapsed().as_secs_f64() * 1e3;
    let mailer::operators::NodeKind::Plugin(wasm) = &mut node.kind else {
        unreachable!("a plugin node")
    };
    // The script languages embed their interpreter.
    wasm.limits.memory_bytes = 256 << 20;
    let (loaded, limits) = (wasm.plugin.clone(), wasm.limits);
    let rss_before = crate::common::rss_kib();
    let started = Instant::now();
    let mut instances: Vec<PluginInstance> = (0..INSTANCES)
        .map(|_| PluginInstance::new(loaded.clone(), limits).unwrap())
        .collect();
    let instantiate_ms = started.elapsed().as_secs_f64() * 1e3 / INSTANCES as f64;
    let memory = match world {
        World::Map => {
            let batch = mailer::batch::Batch::Records(
                (0..1024)
                    .map(|i| mailer::record::Record::new(None, format!("order-{i}"), i))
                    .collect(),
            );
            for instance in &mut instances {
                instance.call_batch(&batch.encode()).unwrap();
            }
            let kib = crate::common::rss_kib().saturating_sub(rss_before) / INSTANCES;
            format!(" instance_kib={kib}")
        }
        _ => String::new(),
    };
    drop(instances);
    let keyed = world == World::Reduce;
    let keys = keyed.then_some(100_000);
    let p = plan(
        name,
        n,
        keys,
        1,
        vec![stage("plugin", 1, keyed, vec![node])],
        false,
        BackendKind::Memory,
    );
    measure(
        name,
        n,
        p,
        n,
        &format!(" compile_ms={compile_ms:.0} instantiate_ms={instantiate_ms:.2}{memory}"),
    );
}
