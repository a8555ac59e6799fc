//! `pg-sink`: rows per second into the machine's PostgreSQL
//! (`MAILER_TEST_PG`, default `postgres://postgres@127.0.0.1:5432`).
//! `pg-copy-psql` loads the rows with `psql`'s `\copy` (the baseline);
//! `pg-sink-*` run a pipeline (JSON lines file -> postgres sink) over the
//! same rows in insert, upsert and exactly-once insert modes. Each variant
//! writes into a fresh database, dropped at the end.

use crate::common::{env_or, peak_rss_kib};
use mailer::manifest::Manifest;
use mailer::plugin::PluginEngine;
use mailer::runtime::{Shutdown, run};
use mailer_test_support::postgres::{TestDb, server};
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::time::Instant;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    vec![
        ("pg-copy-psql".to_owned(), Box::new(copy_psql) as Box<dyn Fn()>),
        (
            "pg-sink-insert".to_owned(),
            Box::new(|| sink("pg-sink-insert", "", "")),
        ),
        (
            "pg-sink-upsert".to_owned(),
            Box::new(|| {
                sink(
                    "pg-sink-upsert",
                    "mode = \"upsert\"\nconflict_columns = [\"id\"]",
                    "",
                )
            }),
        ),
        (
            "pg-sink-exactly-once".to_owned(),
            Box::new(|| {
                sink(
                    "pg-sink-exactly-once",
                    "exactly_once = true",
                    "[checkpoint]\ninterval = \"1s\"\npath = \"checkpoints\"",
                )
            }),
        ),
    ]
}

fn rows() -> u64 {
    env_or("MAILER_BENCH_PG_RECORDS", 1_000_000)
}

fn psql(db: &str, command: &str) {
    let out = Command::new("psql")
        .args([
            &format!("{}/{db}", server()),
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            command,
        ])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh database with the table `orders`; dropped when dropped.
fn orders_db(name: &str) -> TestDb {
    let db = TestDb::new(&format!("bench_{name}"));
    db.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, \
         amount double precision, at timestamptz)",
    );
    db
}

fn count(db: &TestDb) -> u64 {
    db.value("SELECT count(*) FROM orders").parse().unwrap()
}

const T0: i64 = 1_700_000_000_000;

fn amount(i: u64) -> f64 {
    (i % 10_000) as f64 / 100.0
}

fn print_line(name: &str, n: u64, secs: f64) {
    println!(
        "bench {name} records={n} secs={secs:.3} rec_per_s={:.0} peak_rss_kib={}",
        n as f64 / secs,
        peak_rss_kib()
    );
}

fn copy_psql() {
    let n = rows();
    let db = orders_db("copy");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orders.tsv");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for i in 0..n {
        let at = mailer_timestamp(T0 + i as i64);
        writeln!(f, "{i}\tc{}\t{}\t{at}", i % 1000, amount(i)).unwrap();
    }
    f.flush().unwrap();
    drop(f);
    let started = Instant::now();
    psql(
        &db.name,
        &format!(
            "\\copy orders (id, customer, amount, at) FROM '{}'",
            path.display()
        ),
    );
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(count(&db), n);
    print_line("pg-copy-psql", n, secs);
}

/// The same text the sink writes for a time.
fn mailer_timestamp(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    assert_eq!(days, 19_675, "the benchmark's times stay within 2023-11-14");
    let s = secs.rem_euclid(86_400);
    format!(
        "2023-11-14T{:02}:{:02}:{:02}.{:03}Z",
        s / 3600,
        s / 60 % 60,
        s % 60,
        ms.rem_euclid(1000)
    )
}

fn sink(name: &str, settings: &str, sections: &str) {
    let n = rows();
    let db = orders_db(name);
    let dir = tempfile::tempdir().unwrap();
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.path().join("orders.jsonl")).unwrap());
    for i in 0..n {
        writeln!(
            f,
            r#"{{"id":{i},"customer":"c{}","amount":{},"ts":{}}}"#,
            i % 1000,
            amount(i),
            T0 + i as i64
        )
        .unwrap();
    }
    f.flush().unwrap();
    drop(f);
    let manifest = write_manifest(dir.path(), &db.name, settings, sections);
    let m = Manifest::load(&manifest).unwrap();
    let plan = mailer::plan::build(&m, &PluginEngine::new().unwrap()).unwrap();
    let report = run(plan, &Shutdown::new()).unwrap();
    assert_eq!(report.sink_records, n, "{name}: records at the sink");
    assert_eq!(count(&db), n, "{name}: rows in the table");
    print_line(name, n, report.elapsed.as_secs_f64());
}

fn write_manifest(dir: &Path, db: &str, settings: &str, sections: &str) -> std::path::PathBuf {
    let text = format!(
        r#"[pipeline]
name = "pg-bench"
batch_size = 4096

[source]
type = "file"
path = "orders.jsonl"
format = "json_lines"
timestamp_field = "ts"

[sink]
type = "postgres"
dsn = "{server}/{db}"
table = "orders"
{settings}

[sink.columns]
id = {{ field = "id", type = "integer" }}
customer = {{ field = "customer", type = "text" }}
amount = {{ field = "amount", type = "float" }}
at = {{ from = "timestamp", type = "timestamp" }}

{sections}
"#,
        server = server()
    );
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    path
}
