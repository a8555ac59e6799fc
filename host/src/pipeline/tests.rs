//! The builder: the stages it plans, the problems it reports, and a run of
//! native operators from two sources into two sinks.

use super::*;
use crate::connectors::{FileSink, GeneratorSource, SinkFormat};
use crate::plan::{PartInput, Producer};

fn numbers(n: u64) -> GeneratorSource {
    GeneratorSource::new(Some(n), Some(5), 0, 1, None)
}

fn stage_shapes(plan: &Plan) -> Vec<(String, Vec<Producer>, Vec<String>)> {
    plan.stages
        .iter()
        .map(|s| {
            let ops = s.operators.iter().map(|o| o.name.clone()).collect();
            (s.name.clone(), s.inputs.clone(), ops)
        })
        .collect()
}

#[test]
fn a_fan_out_and_a_union_become_stages_reading_their_producers() {
    let dir = tempfile::tempdir().unwrap();
    let p = Pipeline::new("shapes");
    let a = p.source("a", numbers(10));
    let b = p.source("b", numbers(10));
    let both = p.union(&[&a, &b]).map("tag", |r| r);
    // `tag` is read twice: each reader starts a stage of its own.
    let left = both.filter("left", |_| true);
    let right = both.map("right", |r| r).map("after-right", |r| r);
    p.union(&[&left, &right]).sink(
        "out",
        FileSink::create(&dir.path().join("out"), SinkFormat::Value, false).unwrap(),
    );
    a.sink(
        "copy",
        FileSink::create(&dir.path().join("copy"), SinkFormat::Value, false).unwrap(),
    );
    let (plan, _) = p.build().unwrap();
    use Producer::*;
    assert_eq!(
        stage_shapes(&plan),
        vec![
            ("stage-1".into(), vec![Source(0), Source(1)], vec!["tag".into()]),
            ("stage-2".into(), vec![Stage(0)], vec!["left".into()]),
            (
                "stage-3".into(),
                vec![Stage(0)],
                vec!["right".into(), "after-right".into()]
            ),
        ]
    );
    let sinks: Vec<(&str, &[Producer])> = plan
        .sinks
        .iter()
        .map(|s| (s.end.name.as_str(), s.inputs.as_slice()))
        .collect();
    assert_eq!(
        sinks,
        [("out", &[Stage(1), Stage(2)][..]), ("copy", &[Source(0)][..])]
    );
}

#[test]
fn every_problem_of_the_graph_is_reported_by_name() {
    let p = Pipeline::new("broken");
    let a = p.source("a", numbers(1));
    p.source("unread", numbers(1));
    let counted = a.aggregate("counts", &[AggregateKind::Count], None);
    counted.map("counts", |r| r).filter("dangling", |_| true);
    a.key_by_record_key(0).map("nowhere", |r| r);
    let err = p.build().err().expect("a broken graph is refused").to_string();
    for problem in [
        "`aggregate` operator `counts` needs a keyed stream: call `key_by` before it",
        "the name `counts` is used twice",
        "nothing reads source `unread`",
        "nothing reads the output of operator `dangling`",
        "`key_by-3` parallelism 0 is out of range: expected 1 to max_parallelism (128)",
        "a pipeline needs a source and a sink",
    ] {
        assert!(err.contains(problem), "{problem:?} missing from {err}");
    }
}

#[test]
fn a_checkpoint_bucket_without_checkpoints_or_of_another_scheme_is_reported() {
    let p = Pipeline::new("bucket").checkpoints_to_bucket("s3://b/p", Default::default());
    p.source("a", numbers(1))
        .sink("out", crate::connectors::StdoutSink::new(SinkFormat::Text));
    let err = p.build().err().expect("refused").to_string();
    assert!(err.contains("call `checkpoints` first"), "{err}");
    let p = Pipeline::new("bucket")
        .checkpoints("c", Duration::from_secs(1))
        .checkpoints_to_bucket("gs://b/p", Default::default());
    p.source("a", numbers(1))
        .sink("out", crate::connectors::StdoutSink::new(SinkFormat::Text));
    let err = p.build().err().expect("refused").to_string();
    assert!(err.contains("`gs://` is not supported"), "{err}");
}

#[test]
fn a_plugin_that_cannot_be_loaded_is_reported_at_its_operator() {
    let p = Pipeline::new("no-plugin");
    let dir = tempfile::tempdir().unwrap();
    let counted = p
        .source("a", numbers(1))
        .key_by_record_key(1)
        .reduce("count", dir.path().join("missing.wasm"));
    counted.sink(
        "out",
        FileSink::create(&dir.path().join("out"), SinkFormat::Value, false).unwrap(),
    );
    let err = p.build().err().expect("refused").to_string();
    assert!(err.contains("operator `count`: "), "{err}");
    assert!(err.contains("missing.wasm"), "{err}");
}

/// Two sources -> union -> native map -> key_by closure -> running count ->
/// two file sinks: each sink has one update per record, and every key's
/// last count is its number of records.
#[test]
fn native_operators_from_two_sources_reach_two_sinks_with_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let p = Pipeline::new("native").batch_size(64);
    let a = p.source("a", numbers(700));
    let b = p.source("b", GeneratorSource::new(Some(300), None, 0, 1, None));
    let counts = p
        .union(&[&a, &b])
        .map("parity", |r| {
            let n: u64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
            Record::new(
                None,
                if n.is_multiple_of(2) { "even" } else { "odd" },
                r.timestamp,
            )
        })
        .key_by(2, |r| r.value.clone())
        .aggregate("counts", &[AggregateKind::Count], None);
    counts.sink(
        "first",
        FileSink::create(&first, SinkFormat::Text, false).unwrap(),
    );
    counts.sink(
        "second",
        FileSink::create(&second, SinkFormat::Text, false).unwrap(),
    );
    let report = p.run().unwrap();
    assert_eq!(report.source_records, 1_000);
    assert_eq!(report.sink_records, 2_000);
    let evens = (0..700).filter(|n| n % 2 == 0).count() + (0..300).filter(|n| n % 2 == 0).count();
    for file in [&first, &second] {
        let text = std::fs::read_to_string(file).unwrap();
        assert_eq!(text.lines().count(), 1_000, "one update per record");
        let last = |key: &str| {
            let line = text
                .lines()
                .rev()
                .find(|l| l.starts_with(&format!("{key}\t")))
                .unwrap();
            let v: serde_json::Value = serde_json::from_str(line.split_once('\t').unwrap().1).unwrap();
            v["count"].as_u64().unwrap()
        };
        assert_eq!(last("even"), evens as u64);
        assert_eq!(last("odd"), (1_000 - evens) as u64);
    }
}

/// A native keyed reduce on two workers, with checkpoints: each record
/// gives its key's running sum, and every key's last sum is the sum of its
/// values.
#[test]
fn a_native_reduce_folds_each_keys_records_in_state() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sums");
    let p = Pipeline::new("sums").checkpoints(dir.path().join("checkpoints"), Duration::from_millis(20));
    p.source("numbers", numbers(2_000))
        .key_by_record_key(2)
        .reduce_with("sums", |acc, r| {
            let before: u64 = acc.map_or(0, |a| std::str::from_utf8(a).unwrap().parse().unwrap());
            let n: u64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
            (before + n).to_string().into_bytes()
        })
        .sink("out", FileSink::create(&out, SinkFormat::Text, false).unwrap());
    let report = p.run().unwrap();
    assert_eq!(report.sink_records, 2_000);
    let mut expected = std::collections::BTreeMap::new();
    for g in 0..2_000u64 {
        *expected
            .entry((crate::connectors::splitmix64(g) % 5).to_string())
            .or_insert(0u64) += g;
    }
    let mut last = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(&out).unwrap().lines() {
        let (key, sum) = line.split_once('\t').unwrap();
        last.insert(key.to_owned(), sum.parse::<u64>().unwrap());
    }
    assert_eq!(last, expected);
}

/// Tumbling windows whose results an `aggregate`-world plugin computes:
/// one result per (key, window), counting and summing exactly that
/// window's records.
#[test]
fn a_window_computed_by_a_plugin_gives_one_exact_result_per_key_and_window() {
    let plugin =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/bench-count-sum.wasm");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("windows");
    let p = Pipeline::new("windows");
    let spec = WindowSpec {
        assigner: crate::operators::window::Assigner::Tumbling { size: 100 },
        allowed_lateness: 0,
        aggregates: Vec::new(),
        field: None,
        processing_time: false,
    };
    p.source("numbers", numbers(1_000))
        .key_by_record_key(2)
        .window_plugin("windows", spec, &plugin)
        .sink("out", FileSink::create(&out, SinkFormat::Text, false).unwrap());
    p.run().unwrap();
    // Record g: key splitmix64(g) % 5, event time g ms.
    let mut expected = std::collections::BTreeMap::new();
    for g in 0..1_000u64 {
        let entry = expected
            .entry(((crate::connectors::splitmix64(g) % 5).to_string(), g / 100))
            .or_insert((0u64, 0u64));
        entry.0 += 1;
        entry.1 += g;
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let got: Vec<(String, u64, u64)> = text
        .lines()
        .map(|line| {
            let (key, json) = line.split_once('\t').unwrap();
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            (
                key.to_owned(),
                v["count"].as_u64().unwrap(),
                v["sum"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got.len(),
        expected.len(),
        "one result per key and window:\n{text}"
    );
    let mut counted: Vec<(String, u64, u64)> =
        expected.into_iter().map(|((k, _), (c, s))| (k, c, s)).collect();
    let mut got = got;
    counted.sort();
    got.sort();
    assert_eq!(got, counted);
}

/// Source `name` of records `0..n` at time `g`, values `<prefix><g>`, keyed
/// over `keys` keys mixed with `seed`, read by 2 keyed workers.
fn keyed_numbers(p: &Pipeline, name: &str, n: u64, keys: u64, seed: u64, prefix: &str) -> Stream {
    let source = GeneratorSource::new(Some(n), Some(keys), seed, 1, None).with_value_prefix(prefix);
    p.source(name, source).key_by_record_key(2)
}

/// The lines of the file at `path`, sorted.
fn sorted_lines(path: &Path) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

/// left (values `g`) and right (values `r<g>`), `n` records each at time
/// `g`, keyed over `keys` keys differently, joined within [-3, 2], fully
/// outer, into `out`.
fn interval_join(out: &Path, n: u64, keys: u64) -> Pipeline {
    use crate::operators::join::{IntervalJoinSpec, JoinKind};
    let p = Pipeline::new("join").watermarks(Duration::from_millis(2));
    let left = keyed_numbers(&p, "left", n, keys, 0, "");
    let right = keyed_numbers(&p, "right", n, keys, 5, "r");
    let spec = IntervalJoinSpec {
        lower: -3,
        upper: 2,
        kind: JoinKind::Full,
    };
    let joined = left.interval_join("join", &right, spec);
    joined.sink("out", FileSink::create(out, SinkFormat::Value, false).unwrap());
    p
}

#[test]
fn an_interval_join_of_two_keyed_sources_gives_every_pair_and_the_unmatched() {
    use crate::connectors::splitmix64;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("joined.txt");
    let (n, keys) = (300u64, 7u64);
    let (plan, _) = interval_join(&out, n, keys).build().unwrap();
    assert_eq!(plan.stages.len(), 1, "the join runs on the keyed workers");
    assert_eq!(plan.stages[0].input_numbers, [0, 1]);
    interval_join(&out, n, keys).run().unwrap();
    let key = |g: u64, seed: u64| splitmix64(g ^ seed) % keys;
    let mut want = Vec::new();
    let mut right_joined = vec![false; n as usize];
    for l in 0..n {
        let mut joined = false;
        for r in l.saturating_sub(3)..(l + 3).min(n) {
            if key(l, 0) == key(r, 5) {
                want.push(format!(r#"{{"left":{l},"right":"r{r}"}}"#));
                (joined, right_joined[r as usize]) = (true, true);
            }
        }
        if !joined {
            want.push(format!(r#"{{"left":{l},"right":null}}"#));
        }
    }
    for (r, joined) in right_joined.iter().enumerate() {
        if !joined {
            want.push(format!(r#"{{"left":null,"right":"r{r}"}}"#));
        }
    }
    let got = sorted_lines(&out);
    want.sort();
    assert_eq!(got.len(), want.len());
    assert_eq!(got, want);
}

#[test]
fn a_stream_joined_with_a_table_as_of_event_time_sees_the_row_of_its_time() {
    use crate::connectors::splitmix64;
    use crate::operators::join::{AsOf, LookupJoinSpec};
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("enriched.txt");
    let (n, keys) = (300u64, 7u64);
    let p = Pipeline::new("lookup").watermarks(Duration::from_millis(2));
    let stream = keyed_numbers(&p, "stream", n, keys, 0, "");
    let table = keyed_numbers(&p, "table", n, keys, 3, "v");
    let spec = LookupJoinSpec {
        as_of: AsOf::EventTime,
        keep_unmatched: true,
    };
    let joined = stream.join_table("enrich", &table, spec);
    joined.sink("out", FileSink::create(&out, SinkFormat::Value, false).unwrap());
    p.run().unwrap();
    let key = |g: u64, seed: u64| splitmix64(g ^ seed) % keys;
    let mut want: Vec<String> = (0..n)
        .map(|g| {
            let row = (0..=g).rev().find(|&t| key(t, 3) == key(g, 0));
            let table = row.map_or("null".to_owned(), |t| format!("\"v{t}\""));
            format!(r#"{{"stream":{g},"table":{table}}}"#)
        })
        .collect();
    want.sort();
    assert_eq!(sorted_lines(&out), want);
}

/// A keyed branch on two workers: multiples of three, then evens, then the
/// rest. One output is read twice (once through a filter dropping all of
/// it, which holds nothing back from the other outputs), the default one
/// is counted per key on its own keyed stage; each sink gets exactly the
/// records of its output.
#[test]
fn each_record_reaches_the_readers_of_the_first_branch_that_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name);
    let value = |r: &Record| -> u64 { std::str::from_utf8(&r.value).unwrap().parse().unwrap() };
    let p = Pipeline::new("branches").batch_size(50);
    let routes = p.source("numbers", numbers(3_000)).key_by_record_key(2).branch(
        "route",
        [
            (
                "threes",
                Arc::new(move |r: &Record| value(r).is_multiple_of(3)) as RecordPredicate,
            ),
            (
                "evens",
                Arc::new(move |r: &Record| value(r).is_multiple_of(2)) as RecordPredicate,
            ),
        ],
    );
    let file = |name: &str| FileSink::create(&path(name), SinkFormat::Value, false).unwrap();
    routes.output("threes").sink("threes", file("threes"));
    routes.output("evens").sink("evens", file("evens"));
    routes
        .output("evens")
        .filter("none", |_| false)
        .sink("nothing", file("nothing"));
    routes
        .output("default")
        .aggregate("counts", &[AggregateKind::Count], None)
        .sink(
            "count-file",
            FileSink::create(&path("counts"), SinkFormat::Text, false).unwrap(),
        );
    let (plan, _) = p.build().unwrap();
    use Producer::*;
    let shapes = stage_shapes(&plan);
    assert_eq!(
        shapes[0],
        ("keyed-1".into(), vec![Source(0)], vec!["route".into()])
    );
    assert_eq!(
        shapes[1],
        ("keyed-2".into(), vec![Output(0, 1)], vec!["none".into()])
    );
    assert_eq!(
        shapes[2],
        ("keyed-3".into(), vec![Output(0, 2)], vec!["counts".into()])
    );
    assert_eq!(plan.stream_name(Output(0, 2)), "route.default");
    let report = crate::runtime::run(plan, &Shutdown::new()).unwrap();
    assert_eq!(report.source_records, 3_000);
    let sorted = |name: &str| {
        let mut v: Vec<u64> = std::fs::read_to_string(path(name))
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        v.sort_unstable();
        v
    };
    let all = 0..3_000u64;
    assert_eq!(
        sorted("threes"),
        all.clone().filter(|n| n % 3 == 0).collect::<Vec<_>>()
    );
    assert_eq!(
        sorted("evens"),
        all.clone()
            .filter(|n| n % 3 != 0 && n % 2 == 0)
            .collect::<Vec<_>>()
    );
    assert_eq!(sorted("nothing"), Vec::<u64>::new());
    let mut want = std::collections::BTreeMap::new();
    for g in all.filter(|n| n % 3 != 0 && n % 2 != 0) {
        *want
            .entry((crate::connectors::splitmix64(g) % 5).to_string())
            .or_insert(0u64) += 1;
    }
    let mut got = std::collections::BTreeMap::new();
    for line in std::fs::read_to_string(path("counts")).unwrap().lines() {
        let (key, v) = line.split_once('\t').unwrap();
        let count = serde_json::from_str::<serde_json::Value>(v).unwrap()["count"]
            .as_u64()
            .unwrap();
        let c: &mut u64 = got.entry(key.to_owned()).or_default();
        *c = (*c).max(count);
    }
    assert_eq!(got, want);
}

#[test]
fn an_unknown_output_of_a_branch_is_reported() {
    let p = Pipeline::new("no-output");
    let routes = p
        .source("a", numbers(1))
        .branch("route", [("x", Arc::new(|_: &Record| true) as RecordPredicate)]);
    routes
        .output("y")
        .sink("out", crate::connectors::StdoutSink::new(SinkFormat::Value));
    let err = p.build().err().expect("refused").to_string();
    assert!(
        err.contains("branch `route` has no output `y`: its outputs are `x` and `default`"),
        "{err}"
    );
}

/// A global table from a generator (50 changes over 10 keys) joined with an
/// unkeyed stream on two workers: the table is loaded before the stream is
/// read, so every record meets the last row of its key.
#[test]
fn a_global_table_is_loaded_first_and_joined_on_every_worker() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("joined");
    let p = Pipeline::new("global").batch_size(16);
    let table = p.source("table", GeneratorSource::new(Some(50), Some(10), 0, 1, None));
    let stream = p.source("stream", numbers(1_000));
    let spec = GlobalJoinSpec {
        key_field: None,
        keep_unmatched: true,
        max_rows: 10,
    };
    stream
        .join_global_table("joined", &table, spec, 2)
        .sink("out", FileSink::create(&out, SinkFormat::Value, false).unwrap());
    let (plan, _) = p.build().unwrap();
    assert_eq!(plan.table_sources(), [true, false]);
    assert_eq!(plan.stages[0].broadcast_input, Some(1));
    assert_eq!(plan.stages[0].parallelism, 2);
    let report = crate::runtime::run(plan, &Shutdown::new()).unwrap();
    assert_eq!(report.source_records, 1_050);
    let key = |g: u64, keys: u64| crate::connectors::splitmix64(g) % keys;
    let mut want: Vec<String> = (0..1_000u64)
        .map(|g| {
            let row = (0..50u64).rev().find(|&t| key(t, 10) == key(g, 5));
            let table = row.map_or("null".to_owned(), |t| t.to_string());
            format!(r#"{{"stream":{g},"table":{table}}}"#)
        })
        .collect();
    want.sort_unstable();
    let mut got: Vec<String> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    got.sort_unstable();
    assert_eq!(got, want);
}

/// Cluster mode built in code follows the manifest's rules: one Kafka
/// source and sink, its settings in range; exactly once outside it is
/// refused; a valid pipeline plans its parts.
#[test]
fn cluster_mode_in_code_is_checked_and_cut_into_parts() {
    use crate::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec};
    use crate::manifest::{ClusterSpec, NOT_KAFKA_SOURCE};
    let brokers = "127.0.0.1:1";
    let source = || KafkaSourceSpec::new(brokers, &["in"], "g");
    let sink = || KafkaSinkSpec::new(brokers, "out");
    let refusal = |p: Pipeline| p.build().err().expect("refused").to_string();

    let p = Pipeline::new("c").cluster(ClusterSpec::new("g"));
    p.source("numbers", numbers(10)).kafka_sink("out", sink());
    let err = refusal(p);
    assert!(err.contains(NOT_KAFKA_SOURCE), "{err}");

    let mut spec = ClusterSpec::new("g");
    spec.repartition_partitions = Some(0);
    let p = Pipeline::new("c").cluster(spec);
    p.kafka_source("in", source()).kafka_sink("out", sink());
    let err = refusal(p);
    assert!(
        err.contains("cluster `repartition_partitions`: repartition_partitions 0 is out of range"),
        "{err}"
    );

    let p = Pipeline::new("c");
    let mut exactly_once = sink();
    exactly_once.exactly_once = true;
    p.kafka_source("in", source())
        .kafka_sink("out", exactly_once.clone());
    let err = refusal(p);
    assert!(
        err.contains("runs in cluster mode (`Pipeline::cluster`) only"),
        "{err}"
    );

    let p = Pipeline::new("c").cluster(ClusterSpec::new("g"));
    p.kafka_source("in", source())
        .key_by_record_key(1)
        .reduce_with("counts", |_, r| r.value.to_vec())
        .kafka_sink("out", exactly_once);
    let (plan, _) = p.build().unwrap();
    let cluster = plan.cluster.expect("cluster mode");
    assert_eq!(cluster.group, "g");
    assert_eq!(cluster.sources[0].topics, ["in"]);
    let repartitions: Vec<_> = cluster.parts.iter().map(|p| &p.reads).collect();
    assert_eq!(
        repartitions,
        [
            &PartInput::Source(0),
            &PartInput::Repartition { by: "counts".into() }
        ]
    );
}
