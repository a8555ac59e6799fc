//! W4: two generated sources A and B of N/2 records each (ts = g / 10; A's
//! key = splitmix64(g) mod 100,000, B's = splitmix64(g + 2^40) mod
//! 100,000), keyed, interval-joined on equal keys within ±1 s (watermark =
//! the lower of the two sources' largest times) -> one record per pair ->
//! blackhole. The built-in join's JSON document of the pair (native) or the
//! `bench-pair-sum` plugin of the join world (wasm: the sum of the two
//! values), keyed parallelism 1 and 2, both backends.

use crate::common::{bench_pipeline, measure, records};
use mailer::connectors::{BlackholeSink, GeneratorSource, splitmix64};
use mailer::operators::join::{IntervalJoinSpec, JoinKind};

const KEYS: u64 = 100_000;
const DIVISOR: u64 = 10;
/// B's keys are mixed with this (`g ^ 2^40 = g + 2^40` for g below it).
const B_SEED: u64 = 1 << 40;
const BOUND_MS: i64 = 1_000;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = Vec::new();
    for logic in ["native", "wasm"] {
        for p in [1, 2] {
            for backend in ["memory", "rocksdb"] {
                let name = format!("w4-interval-join-{logic}-p{p}-{backend}");
                let n2 = name.clone();
                v.push((name, Box::new(move || run(&n2, logic == "wasm", p, backend))));
            }
        }
    }
    v
}

/// The pairs of equal keys within ±1 s, counted by brute force: B's records
/// bucketed by key (in time order), each A record's partners found by
/// binary search.
pub fn expected_pairs(half: u64) -> u64 {
    let mut starts = vec![0usize; KEYS as usize + 1];
    for g in 0..half {
        starts[(splitmix64(g ^ B_SEED) % KEYS) as usize + 1] += 1;
    }
    for k in 0..KEYS as usize {
        starts[k + 1] += starts[k];
    }
    let mut next = starts.clone();
    let mut times = vec![0i64; half as usize];
    for g in 0..half {
        let k = (splitmix64(g ^ B_SEED) % KEYS) as usize;
        times[next[k]] = (g / DIVISOR) as i64;
        next[k] += 1;
    }
    (0..half)
        .map(|g| {
            let k = (splitmix64(g) % KEYS) as usize;
            let bucket = &times[starts[k]..starts[k + 1]];
            let t = (g / DIVISOR) as i64;
            let from = bucket.partition_point(|&b| b < t - BOUND_MS);
            let to = bucket.partition_point(|&b| b <= t + BOUND_MS);
            (to - from) as u64
        })
        .sum()
}

fn run(name: &str, wasm: bool, parallelism: usize, backend: &str) {
    let n = records();
    let half = n / 2;
    let expected = expected_pairs(half);
    let p = bench_pipeline(name, backend);
    let a = p.source(
        "a",
        GeneratorSource::new(Some(half), Some(KEYS), 0, DIVISOR, None),
    );
    let b = p.source(
        "b",
        GeneratorSource::new(Some(half), Some(KEYS), B_SEED, DIVISOR, None),
    );
    let (a, b) = (a.key_by_record_key(parallelism), b.key_by_record_key(parallelism));
    let spec = IntervalJoinSpec {
        lower: -BOUND_MS,
        upper: BOUND_MS,
        kind: JoinKind::Inner,
    };
    let joined = match wasm {
        true => a.interval_join_plugin("join", &b, spec, mailer_test_support::plugin("bench-pair-sum")),
        false => a.interval_join("join", &b, spec),
    };
    joined.sink("sink", BlackholeSink);
    let (plan, _engine) = p.build().expect("a valid pipeline");
    measure(name, n, plan, expected, "");
}
