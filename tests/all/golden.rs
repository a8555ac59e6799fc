//! Golden pipelines: every manifest in `pipelines/` gives the same output on
//! the in-memory and the RocksDB state backend, at keyed parallelism 1 and 3.

use crate::support::*;

/// The manifest `name` with its keyed parallelism set to `parallelism`, its
/// state in `backend`, and its relative paths made absolute.
fn variant(w: &Workdir, name: &str, parallelism: usize, backend: &str) -> std::path::PathBuf {
    let dir = repo().join("pipelines");
    let text = std::fs::read_to_string(dir.join(name)).unwrap();
    let mut out = String::new();
    let mut in_key_by = false;
    for line in text.lines() {
        if line.starts_with("[[") || line.starts_with('[') {
            in_key_by = false;
        }
        if line.trim() == "type = \"key_by\"" {
            in_key_by = true;
        }
        let line = if in_key_by && line.starts_with("parallelism") {
            format!("parallelism = {parallelism}")
        } else {
            line.replace("\"data/", &format!("\"{}/data/", dir.display()))
                .replace("\"../plugins/", &format!("\"{}/plugins/", repo().display()))
        };
        out.push_str(&line);
        out.push('\n');
    }
    out.push_str(&format!(
        "\n[state]\nbackend = \"{backend}\"\npath = \"{}\"\n",
        w.path("state").display()
    ));
    w.write(name, &out)
}

fn sorted_output(manifest: &std::path::Path) -> Vec<String> {
    let out = run(&["run", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}: {}", manifest.display(), stderr(&out));
    let mut lines: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn pipelines_give_the_same_output_on_both_backends_at_parallelism_1_and_3() {
    let mut manifests: Vec<String> = std::fs::read_dir(repo().join("pipelines"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".toml"))
        // The Kafka and PostgreSQL pipelines need a broker or a database:
        // tests/all/kafka.rs and tests/all/postgres.rs run them.
        .filter(|n| {
            let text = std::fs::read_to_string(repo().join("pipelines").join(n)).unwrap();
            !text.contains("type = \"kafka\"") && !text.contains("type = \"postgres\"")
        })
        .collect();
    manifests.sort();
    assert!(manifests.len() >= 2, "{manifests:?}");
    for name in &manifests {
        let w = Workdir::new();
        let reference = sorted_output(&variant(&w, name, 1, "memory"));
        assert!(!reference.is_empty(), "{name} printed nothing");
        for (parallelism, backend) in [(3, "memory"), (1, "rocksdb"), (3, "rocksdb")] {
            let got = sorted_output(&variant(&w, name, parallelism, backend));
            if got != reference {
                // Short, so that the pipeline and the lines at fault lead a
                // CI log that shows only the start of a panic.
                let missing: Vec<_> = reference.iter().filter(|l| !got.contains(l)).take(5).collect();
                let extra: Vec<_> = got.iter().filter(|l| !reference.contains(l)).take(5).collect();
                panic!(
                    "{name} at parallelism {parallelism} on {backend}: {} lines, {} at parallelism 1 in memory; missing {missing:?}; extra {extra:?}",
                    got.len(),
                    reference.len()
                );
            }
        }
    }
}

#[test]
fn orders_tumbling_sums_each_customers_minutes() {
    let out = run(&[
        "run",
        repo().join("pipelines/orders-tumbling.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Recompute from the data, with the pipeline's rules: a record is late
    // when its window's end - 1 + 10 s lateness is at or before the
    // watermark (largest time seen before its batch - 5 s - 1).
    let data = std::fs::read_to_string(repo().join("pipelines/data/orders.jsonl")).unwrap();
    let docs: Vec<serde_json::Value> = data.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut watermark = i64::MIN;
    let mut max_seen = i64::MIN;
    let mut expected: std::collections::BTreeMap<(String, i64), (u64, f64)> = Default::default();
    let mut late = 0;
    for batch in docs.chunks(10) {
        for d in batch {
            let ts = d["ts"].as_i64().unwrap();
            let start = ts - ts.rem_euclid(60_000);
            if start + 60_000 - 1 + 10_000 <= watermark {
                late += 1;
                continue;
            }
            let e = expected
                .entry((d["customer"].as_str().unwrap().to_owned(), start))
                .or_default();
            e.0 += 1;
            e.1 += d["amount"].as_f64().unwrap();
            max_seen = max_seen.max(ts);
        }
        watermark = watermark.max(max_seen - 5_000 - 1);
    }
    assert_eq!(finished_field(&stderr(&out), "late_records"), late);
    let mut last: std::collections::BTreeMap<(String, i64), (u64, f64)> = Default::default();
    for line in stdout(&out).lines() {
        let d: serde_json::Value = serde_json::from_str(line).unwrap();
        let k = (
            d["key"].as_str().unwrap().to_owned(),
            d["start"].as_i64().unwrap(),
        );
        last.insert(k, (d["count"].as_u64().unwrap(), d["sum"].as_f64().unwrap()));
    }
    assert_eq!(
        last.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (k, (count, sum)) in &expected {
        let (c, s) = last[k];
        assert_eq!(c, *count, "{k:?}");
        assert!((s - sum).abs() < 1e-6, "{k:?}: {s} vs {sum}");
    }
}

#[test]
fn orders_running_totals_follow_each_customers_orders() {
    let out = run(&[
        "run",
        repo()
            .join("pipelines/orders-running-totals.toml")
            .to_str()
            .unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let data = std::fs::read_to_string(repo().join("pipelines/data/orders.jsonl")).unwrap();
    // The model: per customer, in file order, the running count and sum of
    // the amounts of at least 20.
    let mut expected: std::collections::BTreeMap<String, Vec<(u64, f64)>> = Default::default();
    let mut running: std::collections::BTreeMap<String, (u64, f64)> = Default::default();
    for line in data.lines() {
        let d: serde_json::Value = serde_json::from_str(line).unwrap();
        let amount = d["amount"].as_f64().unwrap();
        if amount < 20.0 {
            continue;
        }
        let customer = d["customer"].as_str().unwrap().to_owned();
        let r = running.entry(customer.clone()).or_default();
        r.0 += 1;
        r.1 += amount;
        expected.entry(customer).or_default().push(*r);
    }
    let mut got: std::collections::BTreeMap<String, Vec<(u64, f64)>> = Default::default();
    for line in stdout(&out).lines() {
        let (key, value) = line.split_once('\t').unwrap();
        let d: serde_json::Value = serde_json::from_str(value).unwrap();
        assert_eq!(d["key"], key);
        got.entry(key.to_owned())
            .or_default()
            .push((d["count"].as_u64().unwrap(), d["sum"].as_f64().unwrap()));
    }
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (customer, seq) in &expected {
        let g = &got[customer];
        assert_eq!(g.len(), seq.len(), "{customer}");
        for ((c1, s1), (c2, s2)) in g.iter().zip(seq) {
            assert_eq!(c1, c2, "{customer}");
            assert!((s1 - s2).abs() < 1e-6, "{customer}: {s1} vs {s2}");
        }
    }
}
