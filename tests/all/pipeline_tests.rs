//! `mailer test`: a Kafka-to-PostgreSQL pipeline run on a case's files in
//! place of its source and sink, with neither a broker nor a database
//! reachable; a wrong expectation is named.

use crate::support::*;
use serde_json::Value;
use std::collections::BTreeMap;

/// Kafka (CSV orders) -> `parse-order` -> key_by -> running count and sum
/// per customer -> PostgreSQL, exactly once.
const MANIFEST: &str = r#"
[pipeline]
name = "orders-to-pg"

[source]
type = "kafka"
bootstrap_servers = "${KAFKA_BOOTSTRAP}"
topics = ["orders"]
group_id = "orders-to-pg"
format = "string"

[[operators]]
name = "parse"
type = "map"
plugin = "{plugin:parse-order}"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "totals"
type = "aggregate"
aggregates = ["count", "sum"]
field = "amount"

[sink]
type = "postgres"
dsn = "${PG_DSN}"
table = "customer_totals"
mode = "upsert"
conflict_columns = ["customer"]
exactly_once = true

[sink.columns]
customer = { field = "key", type = "text" }
orders = { field = "count", type = "integer" }
total = { field = "sum", type = "float" }

[checkpoint]
interval = "1s"
"#;

/// Writes `content` to `name` in `w`, making its folders.
fn write(w: &Workdir, name: &str, content: &str) {
    std::fs::create_dir_all(w.path(name).parent().unwrap()).unwrap();
    w.write(name, content);
}

/// `mailer test <args>` with neither the broker's nor the database's
/// variable set.
fn mailer_test(args: &[&str]) -> (bool, String, String) {
    let out = mailer()
        .env_remove("KAFKA_BOOTSTRAP")
        .env_remove("PG_DSN")
        .arg("test")
        .args(args)
        .output()
        .unwrap();
    (out.status.success(), stdout(&out), stderr(&out))
}

#[test]
fn a_case_passes_when_the_sink_gets_what_it_expects_and_names_the_first_difference_when_not() {
    let w = Workdir::new();
    let m = w.manifest(MANIFEST);
    let orders: Vec<String> = std::fs::read_to_string(repo().join("pipelines/data/orders.csv"))
        .unwrap()
        .lines()
        .take(40)
        .map(str::to_owned)
        .collect();
    write(
        &w,
        "tests/pipeline/good/input/source.txt",
        &(orders.join("\n") + "\n"),
    );

    // Without expectations, the case says what it lacks.
    let (ok, _, err) = mailer_test(&[m.to_str().unwrap()]);
    assert!(!ok);
    assert!(
        err.contains("nothing expected of sink `sink`: put its records in expected/sink.jsonl (or .txt)"),
        "{err}"
    );

    // `--update` writes what the sink got: each record the running count
    // and sum of its customer, as a model of the orders says.
    let (ok, out, err) = mailer_test(&[m.to_str().unwrap(), "--update"]);
    assert!(ok, "{err}");
    assert!(out.contains("wrote") && out.contains("sink: 40 records"), "{out}");
    let written = w.read("tests/pipeline/good/expected/sink.jsonl");
    let mut per_customer: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for line in written.lines() {
        let r: Value = serde_json::from_str(line).unwrap();
        let v: Value = serde_json::from_str(r["value"].as_str().unwrap()).unwrap();
        assert_eq!(r["key"], v["key"], "{line}");
        per_customer
            .entry(r["key"].as_str().unwrap().to_owned())
            .or_default()
            .push((v["count"].as_u64().unwrap(), v["sum"].as_f64().unwrap()));
    }
    let mut model: BTreeMap<String, Vec<(u64, f64)>> = BTreeMap::new();
    for order in &orders {
        let f: Vec<&str> = order.split(',').collect();
        let runs = model.entry(f[1].to_owned()).or_default();
        let (count, sum) = runs.last().copied().unwrap_or((0, 0.0));
        runs.push((count + 1, sum + f[2].parse::<f64>().unwrap()));
    }
    assert_eq!(
        per_customer.keys().collect::<Vec<_>>(),
        model.keys().collect::<Vec<_>>()
    );
    for (customer, runs) in &model {
        let got = &per_customer[customer];
        assert_eq!(got.len(), runs.len(), "{customer}");
        for ((c, s), (mc, ms)) in got.iter().zip(runs) {
            assert_eq!(c, mc, "{customer}");
            assert!((s - ms).abs() < 1e-9, "{customer}: {s} vs {ms}");
        }
    }

    // The case passes as written.
    let (ok, out, err) = mailer_test(&[m.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("ok") && out.contains("sink: 40 records"), "{out}");

    // A wrong case: bob's second total changed.
    let bob_second = written
        .lines()
        .filter(|l| l.contains(r#""key":"bob""#))
        .nth(1)
        .unwrap()
        .to_owned();
    let wrong_line = bob_second.replacen(r#"\"count\":2"#, r#"\"count\":3"#, 1);
    assert_ne!(wrong_line, bob_second);
    write(
        &w,
        "tests/pipeline/wrong/input/source.txt",
        &(orders.join("\n") + "\n"),
    );
    write(
        &w,
        "tests/pipeline/wrong/expected/sink.jsonl",
        &written.replacen(&bob_second, &wrong_line, 1),
    );
    let (ok, out, _) = mailer_test(&[m.to_str().unwrap()]);
    assert!(!ok);
    let got_line: Value = serde_json::from_str(&bob_second).unwrap();
    assert!(
        out.contains(&format!("ok     {}", w.path("tests/pipeline/good").display())),
        "{out}"
    );
    assert!(
        out.contains(&format!("FAILED {}", w.path("tests/pipeline/wrong").display())),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "  sink `sink`: record 2 of key \"bob\": expected {}, got ",
            wrong_line
        )),
        "{out}"
    );
    assert!(
        out.contains(got_line["value"].as_str().unwrap().replace('"', "\\\"").as_str()),
        "{out}"
    );
}

#[test]
fn every_example_pipeline_passes_its_test_cases() {
    let dir = repo().join("pipelines");
    let mut manifests: Vec<std::path::PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    manifests.sort();
    assert!(manifests.len() >= 10, "{manifests:?}");
    for m in manifests {
        let stem = m.file_stem().unwrap().to_str().unwrap();
        assert!(
            dir.join("tests").join(stem).is_dir(),
            "pipelines/{stem}.toml ships no test case in pipelines/tests/{stem}/"
        );
        let (ok, out, err) = mailer_test(&[m.to_str().unwrap()]);
        assert!(ok, "{}:\n{out}{err}", m.display());
        assert!(out.starts_with("ok "), "{out}");
    }
}
