//! State queries: a keyed operator's state in a running pipeline, read
//! through the admin API and `mailer state`, equal to what a brute-force
//! model of the input says.

use crate::support::*;
use mailer_test_support::kafka::{create_topic, produce, unique_topic};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Kafka (never ends) -> key_by over 2 workers -> `totals` (running count
/// and sum of `amount`) -> `counts` (the `count` reduce plugin) -> file.
fn manifest(w: &Workdir, input: &str, admin: &str) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "queried"
batch_size = 50

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}-group"
format = "string"

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "totals"
type = "aggregate"
aggregates = ["count", "sum"]
field = "amount"

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[sink]
type = "file"
path = "out.txt"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
listen = "{admin}"
"#
    ))
}

/// 300 keys, key `i` with `i * 7 % 13 + 1` records of amounts `(i + j) % 10`.
fn input() -> Vec<(String, String)> {
    (0..300)
        .flat_map(|i| {
            (0..i * 7 % 13 + 1)
                .map(move |j| (format!("user-{i}"), json!({ "amount": (i + j) % 10 }).to_string()))
        })
        .collect()
}

/// Each key's count and sum, as the operators should hold them.
fn model(input: &[(String, String)]) -> BTreeMap<String, (u64, i64)> {
    let mut m: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    for (k, v) in input {
        let amount = serde_json::from_str::<Value>(v).unwrap()["amount"]
            .as_i64()
            .unwrap();
        let e = m.entry(k.clone()).or_default();
        e.0 += 1;
        e.1 += amount;
    }
    m
}

fn state(admin: &str, path: &str) -> (u16, Value) {
    get(&format!("http://{admin}/api/state/{path}"), Some(TOKEN))
}

#[test]
fn state_queries_return_exactly_the_state_a_model_of_the_input_gives() {
    let w = Workdir::new();
    let topic = unique_topic("queried");
    create_topic(&topic, 2);
    let records = input();
    let expected = model(&records);
    produce(&topic, &records);
    let admin = format!("127.0.0.1:{}", free_port());
    let m = manifest(&w, &topic, &admin);
    let _run = spawn_manifest(&m);
    wait_for(&admin);

    // The input is all read once every key's count is in the state.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, scan) = state(&admin, "counts?limit=1000");
        let counted: u64 = match status {
            200 => scan["keys"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| {
                    k["state"]["accumulator"]
                        .as_str()
                        .unwrap()
                        .parse::<u64>()
                        .unwrap()
                })
                .sum(),
            _ => 0,
        };
        if counted == records.len() as u64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the state never held every record: {scan}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // 100 keys picked at random: each operator's state is exactly the model's.
    let keys: Vec<&String> = expected.keys().collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for _ in 0..100 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let key = keys[(seed % keys.len() as u64) as usize];
        let (count, sum) = expected[key];
        let (status, got) = state(&admin, &format!("totals?key={key}"));
        assert_eq!(status, 200, "{got}");
        assert_eq!(
            got,
            json!({"operator": "totals", "key": key, "state": {"count": count, "sum": sum}})
        );
        let (status, got) = state(&admin, &format!("counts?key={key}"));
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["state"], json!({"accumulator": count.to_string()}), "{key}");
    }

    // From the command line: one key, and a scan of a prefix in key order.
    let cli = |args: &[&str]| {
        let out = mailer()
            .env("MAILER_ADMIN_TOKEN", TOKEN)
            .arg("state")
            .args(args)
            .output()
            .unwrap();
        (out.status.success(), stdout(&out), stderr(&out))
    };
    let manifest = m.to_str().unwrap();
    let (ok, out, err) = cli(&["get", manifest, "totals", "user-42"]);
    assert!(ok, "{err}");
    let (count, sum) = expected["user-42"];
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["state"],
        json!({"count": count, "sum": sum})
    );
    let (ok, out, err) = cli(&["scan", manifest, "counts", "--prefix", "user-29", "--limit", "3"]);
    assert!(ok, "{err}");
    let scan: Value = serde_json::from_str(&out).unwrap();
    let scanned: Vec<(&str, &str)> = scan["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            (
                k["key"].as_str().unwrap(),
                k["state"]["accumulator"].as_str().unwrap(),
            )
        })
        .collect();
    let wanted: Vec<(String, String)> = ["user-29", "user-290", "user-291"]
        .iter()
        .map(|k| (k.to_string(), expected[*k].0.to_string()))
        .collect();
    let wanted: Vec<(&str, &str)> = wanted.iter().map(|(k, c)| (k.as_str(), c.as_str())).collect();
    assert_eq!(scanned, wanted);

    // What has no state, and what cannot be asked, is said clearly.
    let (ok, _, err) = cli(&["get", manifest, "counts", "nobody"]);
    assert!(!ok);
    assert!(
        err.contains(r#"key "nobody" has no state in operator `counts`"#),
        "{err}"
    );
    let (ok, _, err) = cli(&["get", manifest, "cuonts", "user-1"]);
    assert!(!ok);
    assert!(
        err.contains("no operator is named `cuonts`; the operators: totals, counts"),
        "{err}"
    );
}
