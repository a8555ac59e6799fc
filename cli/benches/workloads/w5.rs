//! W5: a table of 100,000 rows (key g -> value g) loaded first, and a
//! stream of N records of W1's generator (key = splitmix64(g) mod 100,000)
//! -> each record joined with its key's row -> blackhole. The table is a
//! global table (every worker holds all of it, read to its end before the
//! stream, as Kafka Streams loads a GlobalKTable); the join runs on 1 or 2
//! workers. The built-in join's JSON document of record and row (native)
//! or the `bench-pair-sum` plugin of the join world (wasm: value_stream +
//! value_table), both backends.

use crate::common::{bench_pipeline, measure, records};
use mailer::connectors::{BlackholeSink, GeneratorSource};
use mailer::operators::join::GlobalJoinSpec;

const KEYS: u64 = 100_000;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    for logic in ["native", "wasm"] {
        for p in [1, 2] {
            for backend in ["memory", "rocksdb"] {
                let name = format!("w5-table-join-{logic}-p{p}-{backend}");
                let n2 = name.clone();
                v.push((name, Box::new(move || run(&n2, logic == "wasm", p, backend))));
            }
        }
    }
    v
}

fn run(name: &str, wasm: bool, parallelism: usize, backend: &str) {
    let n = records();
    let p = bench_pipeline(name, backend);
    let table = p
        .source("table", GeneratorSource::new(Some(KEYS), None, 0, 1, None))
        .map("row-key", |mut r| {
            r.key = Some(r.value.clone());
            r
        });
    let stream = p.source("stream", GeneratorSource::new(Some(n), Some(KEYS), 0, 1, None));
    let spec = GlobalJoinSpec {
        key_field: None,
        keep_unmatched: false,
        max_rows: KEYS,
    };
    let joined = match wasm {
        true => stream.join_global_table_plugin(
            "join",
            &table,
            spec,
            parallelism,
            mailer_test_support::plugin("bench-pair-sum"),
        ),
        false => stream.join_global_table("join", &table, spec, parallelism),
    };
    joined.sink("sink", BlackholeSink);
    let (plan, _engine) = p.build().expect("a valid pipeline");
    measure(name, n, plan, n, "");
}
