//! The PostgreSQL sink against the machine's real PostgreSQL: inserts and
//! upserts, exactly once through SIGKILLs, retries through cut connections,
//! and clear errors that never show the password. Each test creates its own
//! database and drops it.

use crate::support::*;
use mailer::connectors::splitmix64;
use std::collections::BTreeMap;
use std::time::Duration;

pub use mailer_test_support::postgres::{TestDb, server, sql};

const RECORDS: u64 = 60_000;
const KEYS: u64 = 20;

/// A generator -> Wasm keyed count -> PostgreSQL pipeline: each record
/// becomes the row (key, its running count).
fn counts_pipeline(w: &Workdir, db: &TestDb, sink: &str, rate: u64) -> std::path::PathBuf {
    db.execute("CREATE TABLE counts (k text NOT NULL, n bigint NOT NULL, at timestamptz)");
    w.manifest(&format!(
        r#"
[pipeline]
name = "pg-counts"
batch_size = 500

[source]
type = "generator"
count = {RECORDS}
keys = {KEYS}
rate = {rate}

{KEYED_COUNT}
[sink]
type = "postgres"
dsn = "{dsn}"
table = "counts"
{sink}

[sink.columns]
k = {{ from = "key", type = "text" }}
n = {{ from = "value", type = "integer" }}
at = {{ from = "timestamp", type = "timestamp" }}

[checkpoint]
interval = "100ms"
path = "checkpoints"
"#,
        dsn = db.dsn()
    ))
}

/// Each key's count in one run of the generator.
fn expected_counts() -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for g in 0..RECORDS {
        *counts.entry((splitmix64(g) % KEYS).to_string()).or_insert(0) += 1;
    }
    counts
}

/// Every (key, running count) of one run, in order.
fn expected_rows() -> Vec<(String, u64)> {
    let mut rows: Vec<(String, u64)> = expected_counts()
        .into_iter()
        .flat_map(|(k, n)| (1..=n).map(move |i| (k.clone(), i)))
        .collect();
    rows.sort();
    rows
}

fn table_rows(db: &TestDb) -> Vec<(String, u64)> {
    db.rows("SELECT k, n FROM counts ORDER BY k, n")
        .into_iter()
        .map(|r| (r[0].clone().unwrap(), r[1].as_deref().unwrap().parse().unwrap()))
        .collect()
}

fn assert_exactly_once(db: &TestDb) {
    one_run_tally(db).assert_exactly_once("the table's rows");
}

/// The table's rows against one run's.
fn one_run_tally(db: &TestDb) -> Tally {
    Tally::of_items(table_rows(db), expected_rows())
}

#[test]
fn exactly_once_rows_land_once_after_killed_runs() {
    let sweep = Sweep::start("postgres", "memory");
    let db = TestDb::new("eo");
    let w = Workdir::new();
    // 20 s of records: work is left for every kill.
    let m = counts_pipeline(&w, &db, "exactly_once = true", 3_000);
    // Another writer of the table, on its own, all along: its rows stay
    // as it wrote them, and it cuts nothing of the pipeline's.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let other = {
        let (dsn, stop) = (db.dsn(), stop.clone());
        std::thread::spawn(move || {
            let mut written = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                written += 1;
                sql(
                    &dsn,
                    &format!("INSERT INTO counts (k, n) VALUES ('other', {written})"),
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            written
        })
    };
    // Every other kill at a random moment, the rest aimed between the
    // steps: the output staged, the checkpoint durable, the output
    // committed, of the run's first, second or third checkpoint.
    let kills = (2 * crate::checkpoints::kills()).max(50);
    let (mut resumed, mut aimed) = (0, [0; 3]);
    for i in 0..kills {
        if i % 2 == 0 {
            resumed += u64::from(crate::checkpoints::run_and_kill(&w, &m, i, 400));
        } else {
            let at = (i / 2 % 3) as usize;
            let moment = crate::checkpoints::KILL_MOMENTS[at];
            aimed[at] += u64::from(crate::checkpoints::run_killed_at(&m, moment, 1 + i / 6 % 3));
        }
    }
    assert!(resumed > 0, "no run resumed from a checkpoint");
    assert!(
        aimed.iter().all(|&n| n >= 5),
        "kills that hit staged, durable, committed: {aimed:?}"
    );
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let written = other.join().unwrap();
    assert_eq!(
        db.value(
            "SELECT count(*) || ' ' || count(DISTINCT n) || ' ' || max(n) FROM counts WHERE k = 'other'"
        ),
        format!("{written} {written} {written}")
    );
    db.execute("DELETE FROM counts WHERE k = 'other'");
    sweep.report(one_run_tally(&db));
    assert_eq!(
        db.value("SELECT count(*) FROM mailer_progress WHERE pipeline = 'pg-counts' AND sink = 'counts'"),
        "1"
    );
}

#[test]
fn a_second_instance_of_an_exactly_once_pipeline_is_refused_by_the_databases_lock() {
    let db = TestDb::new("twice");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "exactly_once = true", 3_000);
    // The same pipeline beside other checkpoints: no folder lock sees the
    // first instance, only the database can.
    let elsewhere = Workdir::new();
    let second = elsewhere.write("pipeline.toml", &std::fs::read_to_string(&m).unwrap());
    let mut first = mailer()
        .arg("run")
        .arg(&m)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    while db.value("SELECT count(*) FROM counts") == "0" {
        assert!(first.try_wait().unwrap().is_none(), "the first instance ended");
        std::thread::sleep(Duration::from_millis(50));
    }
    let refused = run(&["run", second.to_str().unwrap()]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(
        message.contains("another instance of pipeline `pg-counts` writes to `counts` exactly once")
            && message.contains("pg_terminate_backend"),
        "{message}"
    );
    assert!(first.try_wait().unwrap().is_none(), "the first instance goes on");
    assert!(first.wait().unwrap().success());
    assert_exactly_once(&db);
}

#[test]
fn a_sink_blocked_by_a_lock_fails_its_checkpoints_at_the_timeout_and_the_run_stops_saying_so() {
    let db = TestDb::new("stuck");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "", 5_000);
    let text = std::fs::read_to_string(&m)
        .unwrap()
        .replace("batch_size = 500", "batch_size = 500\nshutdown_timeout = \"2s\"")
        .replace(
            "interval = \"100ms\"",
            "interval = \"100ms\"\ntimeout = \"2s\"\ntolerable_failures = 1",
        );
    let m = w.write("pipeline.toml", &text);
    // Another session holds the table for 15 s: the sink's COPY waits on it.
    let holder = {
        let dsn = db.dsn();
        std::thread::spawn(move || {
            sql(
                &dsn,
                "BEGIN; LOCK TABLE counts IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(15); COMMIT",
            )
        })
    };
    let locked = "SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                  WHERE c.relname = 'counts' AND l.mode = 'AccessExclusiveLock' AND l.granted";
    while db.value(locked) == "0" {
        std::thread::sleep(Duration::from_millis(50));
    }
    let started = std::time::Instant::now();
    let out = run(&["run", m.to_str().unwrap()]);
    let took = started.elapsed();
    let message = stderr(&out);
    assert!(!out.status.success(), "{message}");
    assert!(
        message.contains("within the checkpoint timeout (2s)"),
        "{message}"
    );
    assert!(
        took < Duration::from_secs(14),
        "it stopped in {took:?}, before the lock was let go: {message}"
    );
    holder.join().unwrap();
}

#[test]
fn a_retry_ends_only_the_sinks_own_sessions_never_a_person_reading_the_stage() {
    let db = TestDb::new("reader");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "exactly_once = true", 4_000);
    let mut child = spawn_run(&m);
    let stage = loop {
        let found = db.rows("SELECT tablename FROM pg_tables WHERE tablename LIKE 'mailer_stage_%'");
        if let Some(row) = found.first() {
            break row[0].clone().unwrap();
        }
        assert!(child.try_wait().unwrap().is_none(), "the run ended");
        std::thread::sleep(Duration::from_millis(50));
    };
    // A person reads the stage in a transaction of 8 s, while the sink's
    // connections (not the one holding its lock) are cut: the retries'
    // fences must leave that session alone.
    let reader = {
        let (dsn, stage) = (db.dsn(), stage.clone());
        std::thread::spawn(move || {
            sql(
                &dsn,
                &format!("BEGIN; SELECT count(*) FROM {stage}; SELECT pg_sleep(8); COMMIT"),
            )
        })
    };
    let cut = cut_connections(&db, &mut child, true);
    assert!(reader.join().is_ok(), "the reader's session was ended");
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(cut >= 3, "only {cut} connections were cut: {err}");
    assert_exactly_once(&db);
}

#[test]
fn kills_between_a_durable_checkpoint_and_its_commit_neither_lose_nor_repeat_rows() {
    let sweep = Sweep::start("postgres", "memory");
    let db = TestDb::new("gap");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "exactly_once = true", 40_000);
    crate::kafka_recovery::killed_between_durable_and_committed(&m);
    sweep.report(one_run_tally(&db));
}

#[test]
fn a_restart_whose_committed_checkpoint_is_gone_is_refused_with_the_choices() {
    let db = TestDb::new("gone");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "exactly_once = true", 40_000);
    assert!(!crate::checkpoints::run_and_kill(&w, &m, 3, 400));
    let committed = db.value("SELECT checkpoint FROM mailer_progress WHERE pipeline = 'pg-counts'");
    let folder = w.path(&format!(
        "checkpoints/chk-{:020}",
        committed.parse::<u64>().unwrap()
    ));
    assert!(
        folder.is_dir(),
        "the committed checkpoint is kept: {}",
        folder.display()
    );
    std::fs::remove_dir_all(&folder).unwrap();
    let refused = run(&["run", m.to_str().unwrap()]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(
        message.contains(&format!(
            "the sink committed the output of checkpoint {committed}"
        )),
        "{message}"
    );
    assert!(
        message.contains("--from-checkpoint") && message.contains("--fresh"),
        "{message}"
    );
    // Starting over knowingly writes the committed rows again: the user's choice.
    let out = run(&["run", "--fresh", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_savepoint_older_than_the_committed_output_is_refused_for_an_exactly_once_sink() {
    let db = TestDb::new("sp");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "exactly_once = true", 20_000);
    let mut running = spawn_manifest(&m);
    while mailer::checkpoint::lock_holder(&w.path("checkpoints")).unwrap() != Some(running.0.id()) {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let savepoint = w.path("sp");
    let out = run(&[
        "savepoint",
        m.to_str().unwrap(),
        "--dir",
        savepoint.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // The pipeline goes on committing past the savepoint, then stops.
    std::thread::sleep(std::time::Duration::from_millis(600));
    sigterm(&running.0);
    assert!(running.0.wait().unwrap().success());
    let refused = run(&[
        "run",
        "--from-savepoint",
        savepoint.to_str().unwrap(),
        m.to_str().unwrap(),
    ]);
    assert!(!refused.status.success());
    let message = stderr(&refused);
    assert!(
        message.contains("but the sink committed the output of checkpoint"),
        "{message}"
    );
}

#[test]
fn upserted_totals_converge_after_killed_runs() {
    // Each key's row holds its final count: a count past it is a duplicate.
    let sweep = Sweep::start("postgres", "memory");
    let db = TestDb::new("upsert");
    let w = Workdir::new();
    let m = counts_pipeline(&w, &db, "mode = \"upsert\"\nconflict_columns = [\"k\"]", 40_000);
    db.execute("ALTER TABLE counts ADD PRIMARY KEY (k)");
    for i in 0..crate::checkpoints::kills() {
        crate::checkpoints::run_and_kill(&w, &m, i, 400);
    }
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let got: BTreeMap<String, u64> = table_rows(&db).into_iter().collect();
    sweep.report(Tally::of_counts(&got, &expected_counts()));
}

/// Terminates the pipeline's connections (`pg_terminate_backend`; an
/// exactly-once sink's lock session too, unless `spare_lock`) a few times
/// while it runs; how many it cut. Only connections older than a
/// second: cutting one while the sink opens fails the run (opening is not
/// retried), which is not what this test is about.
fn cut_connections(db: &TestDb, child: &mut std::process::Child, spare_lock: bool) -> usize {
    let spared = if spare_lock {
        "AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')"
    } else {
        ""
    };
    let mut cut = 0;
    while cut < 5 && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(300));
        let n = db.value(&format!(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE datname = '{}' AND starts_with(application_name, 'mailer') \
             AND backend_start < now() - interval '1 second' {spared}",
            db.name
        ));
        cut += n.parse::<usize>().unwrap();
    }
    cut
}

#[test]
fn cut_connections_are_retried_and_nothing_is_lost() {
    for (sink, exact) in [("exactly_once = true", true), ("", false)] {
        let db = TestDb::new("cut");
        let w = Workdir::new();
        let m = counts_pipeline(&w, &db, sink, 15_000);
        let mut child = spawn_run(&m);
        let cut = cut_connections(&db, &mut child, false);
        let out = child.wait_with_output().unwrap();
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        assert!(cut >= 3, "only {cut} connections were cut: {err}");
        assert!(err.contains("retrying on a new connection"), "{err}");
        if exact {
            assert_exactly_once(&db);
        } else {
            let got = table_rows(&db);
            let missing: Vec<_> = expected_rows()
                .into_iter()
                .filter(|e| got.binary_search(e).is_err())
                .collect();
            assert!(
                missing.is_empty(),
                "{} rows lost at least once (the table has {}), the first: {:?}; the run's log:\n{err}",
                missing.len(),
                got.len(),
                &missing[..missing.len().min(20)]
            );
        }
    }
}

/// A connection that dies while its `COPY` commits — after the server
/// reported the rows copied — loses nothing: the commit's failure is seen
/// and the rows are sent again on a new connection. The table's deferred
/// trigger terminates its own connection the first time it runs, which is
/// inside the commit.
#[test]
fn a_connection_lost_while_its_copy_commits_loses_no_rows() {
    let db = TestDb::new("commitcut");
    db.execute(
        "CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric);
         CREATE SEQUENCE cut_once;
         CREATE FUNCTION cut_once() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('cut_once') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
             RETURN NULL;
         END $$;
         CREATE CONSTRAINT TRIGGER cut_at_commit AFTER INSERT ON orders
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION cut_once();",
    );
    let w = Workdir::new();
    w.write(
        "in.jsonl",
        "{\"id\":1,\"customer\":\"a\",\"amount\":2.5}\n{\"id\":2,\"customer\":\"b\",\"amount\":3}\n{\"id\":3,\"customer\":\"c\",\"amount\":4}\n",
    );
    let m = w.write(
        "orders.toml",
        &orders_sink(
            "id = { field = \"id\", type = \"integer\" }\ncustomer = { field = \"customer\", type = \"text\" }\namount = { field = \"amount\", type = \"float\" }",
        ),
    );
    let out = run_with_dsn(&db.dsn(), &["run", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("retrying on a new connection"), "{err}");
    assert_eq!(
        db.rows("SELECT id, customer FROM orders ORDER BY id"),
        [(1, "a"), (2, "b"), (3, "c")]
            .map(|(id, c)| vec![Some(id.to_string()), Some(c.to_owned())])
            .to_vec(),
        "{err}"
    );
}

fn orders_sink(columns: &str) -> String {
    format!(
        r#"
[pipeline]
name = "pg-errors"

[source]
type = "file"
path = "in.jsonl"
format = "json_lines"

[sink]
type = "postgres"
dsn = "${{PG_DSN}}"
table = "orders"
[sink.columns]
{columns}
"#
    )
}

fn run_with_dsn(dsn: &str, args: &[&str]) -> std::process::Output {
    mailer().env("PG_DSN", dsn).args(args).output().unwrap()
}

#[test]
fn a_missing_column_a_wrong_type_and_a_bad_dsn_are_clear_errors() {
    let db = TestDb::new("errors");
    db.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer text NOT NULL, amount numeric)");
    let w = Workdir::new();
    w.write("in.jsonl", "{\"id\":1,\"customer\":\"a\",\"amount\":2.5}\n");

    let missing = w.write(
        "missing.toml",
        &orders_sink(
            "id = { field = \"id\", type = \"integer\" }\ncustomer = { field = \"customer\", type = \"text\" }\ncolour = { field = \"c\", type = \"text\" }",
        ),
    );
    for verb in ["validate", "run"] {
        let out = run_with_dsn(&db.dsn(), &[verb, missing.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1), "{verb}");
        let err = stderr(&out);
        assert!(
            err.contains("column `colour` is not in table `orders` (its columns: amount, customer, id)"),
            "{verb}: {err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }

    let wrong_type = w.write(
        "wrong.toml",
        &orders_sink(
            "id = { field = \"id\", type = \"text\" }\ncustomer = { field = \"customer\", type = \"text\" }",
        ),
    );
    let out = run_with_dsn(&db.dsn(), &["validate", wrong_type.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(
        err.contains("column `id` is `int8` in the table, which does not take text: use type = \"integer\""),
        "{err}"
    );

    let good = w.write(
        "good.toml",
        &orders_sink(
            "id = { field = \"id\", type = \"integer\" }\ncustomer = { field = \"customer\", type = \"text\" }\namount = { field = \"amount\", type = \"float\" }",
        ),
    );
    let password = "Sup3r-Secret-Pw";
    for dsn in [
        format!("postgres://postgres:{password}@127.0.0.1:1/{}", db.name),
        format!(
            "postgres://postgres:{password}@127.0.0.1:5432/no_such_db_{}",
            std::process::id()
        ),
        format!("postgres://postgres:{password}@127.0.0.1:notaport/x"),
    ] {
        for verb in ["validate", "run", "describe"] {
            let out = run_with_dsn(&dsn, &[verb, good.to_str().unwrap()]);
            let all = stderr(&out) + &stdout(&out);
            assert!(!all.contains(password), "{verb} showed the password: {all}");
            assert!(!all.contains("panicked"), "{all}");
            if verb == "run" {
                assert_eq!(out.status.code(), Some(1), "{all}");
                assert!(all.contains("PostgreSQL ("), "{all}");
            }
        }
    }
    let out = run_with_dsn(
        &format!("postgres://postgres:{password}@127.0.0.1:1/{}", db.name),
        &["run", good.to_str().unwrap()],
    );
    let err = stderr(&out);
    assert!(
        err.contains(&format!("127.0.0.1:1/{} as postgres", db.name)),
        "{err}"
    );
    assert!(err.contains("cannot connect"), "{err}");
    let out = run_with_dsn(&db.dsn(), &["run", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        db.rows("SELECT id, customer, amount FROM orders"),
        [[Some("1".into()), Some("a".into()), Some("2.5".into())]]
    );
}

#[test]
fn records_the_mapping_cannot_read_follow_the_failure_policy() {
    let db = TestDb::new("policy");
    db.execute("CREATE TABLE orders (id bigint, customer text)");
    let w = Workdir::new();
    w.write(
        "in.jsonl",
        "{\"id\":1,\"customer\":\"a\"}\n{\"id\":\"two\",\"customer\":\"b\"}\n{\"id\":3,\"customer\":\"c\"}\n",
    );
    let columns =
        "id = { field = \"id\", type = \"integer\" }\ncustomer = { field = \"customer\", type = \"text\" }";
    let text = orders_sink(columns).replace(
        "table = \"orders\"",
        "table = \"orders\"\non_error = \"dead-letter\"",
    ) + "\n[dead_letter]\ntype = \"file\"\npath = \"dead.jsonl\"\nformat = \"json\"\n";
    let m = w.write("dl.toml", &text);
    let out = run_with_dsn(&db.dsn(), &["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        db.value("SELECT string_agg(id::text, ',' ORDER BY id) FROM orders"),
        "1,3"
    );
    let dead = w.read("dead.jsonl");
    assert_eq!(dead.lines().count(), 1, "{dead}");
    assert!(
        dead.contains("column `id`: \\\"two\\\" is not an integer"),
        "{dead}"
    );

    let m = w.write("fail.toml", &orders_sink(columns));
    let out = run_with_dsn(&db.dsn(), &["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("column `id`: \"two\" is not an integer"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn pg_orders_keeps_each_customers_totals() {
    let db = TestDb::new("pgorders");
    db.execute(
        "CREATE TABLE customer_totals (customer text PRIMARY KEY, orders bigint NOT NULL, \
         total double precision NOT NULL, updated_at timestamptz)",
    );
    let w = Workdir::new();
    let text = std::fs::read_to_string(repo().join("pipelines/pg-orders.toml"))
        .unwrap()
        .replace(
            "data/orders.csv",
            &repo().join("pipelines/data/orders.csv").display().to_string(),
        )
        .replace(
            "../plugins/dist/",
            &format!("{}/", repo().join("plugins/dist").display()),
        );
    let m = w.write("pg-orders.toml", &text);
    let out = run_with_dsn(&db.dsn(), &["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut expected: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for line in std::fs::read_to_string(repo().join("pipelines/data/orders.csv"))
        .unwrap()
        .lines()
    {
        let f: Vec<&str> = line.split(',').collect();
        let e = expected.entry(f[1].to_owned()).or_default();
        e.0 += 1;
        e.1 += f[2].parse::<f64>().unwrap();
    }
    let got = db.rows("SELECT customer, orders, total FROM customer_totals ORDER BY customer");
    assert_eq!(got.len(), expected.len());
    for (row, (customer, (orders, total))) in got.iter().zip(&expected) {
        assert_eq!(row[0].as_deref(), Some(customer.as_str()));
        assert_eq!(
            row[1].as_deref().unwrap().parse::<u64>().unwrap(),
            *orders,
            "{customer}"
        );
        let t: f64 = row[2].as_deref().unwrap().parse().unwrap();
        assert!((t - total).abs() < 1e-6, "{customer}: {t} vs {total}");
    }
}

#[test]
fn tls_require_encrypts_and_verify_full_checks_the_certificate() {
    let db = TestDb::new("tls");
    assert_eq!(db.value("SHOW ssl"), "on", "the tests' PostgreSQL serves TLS");
    db.execute("CREATE TABLE orders (id bigint, customer text)");
    let w = Workdir::new();
    w.write("in.jsonl", "{\"id\":1,\"customer\":\"a\"}\n");
    let columns =
        "id = { field = \"id\", type = \"integer\" }\ncustomer = { field = \"customer\", type = \"text\" }";
    let with_tls = |tls: &str| {
        orders_sink(columns).replace(
            "table = \"orders\"",
            &format!("table = \"orders\"\ntls = \"{tls}\""),
        )
    };
    // A row written over TLS records that its connection was encrypted.
    db.execute(
        "CREATE FUNCTION encrypted() RETURNS boolean LANGUAGE sql \
           AS 'SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()'; \
         ALTER TABLE orders ADD COLUMN encrypted boolean DEFAULT encrypted()",
    );
    let m = w.write("require.toml", &with_tls("require"));
    let out = run_with_dsn(&db.dsn(), &["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(db.value("SELECT encrypted FROM orders"), "t");

    // The server's certificate is self-signed: no system root vouches for it.
    let m = w.write("verify.toml", &with_tls("verify-full"));
    let out = run_with_dsn(&db.dsn(), &["run", m.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("certificate verify failed"), "{err}");
}

/// A TCP relay to the server whose connections the test can cut on the
/// client's side only: the server's backend goes on with what it was doing
/// (as behind a broken network) and learns of the cut only when it next
/// reads.
struct Relay {
    /// The test server's URL with the relay's address in place of the
    /// server's.
    url: String,
    clients: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl Relay {
    fn start() -> Self {
        use std::net::{TcpListener, TcpStream};
        let server_url = server();
        let authority = server_url
            .split_once("://")
            .map_or(server_url.as_str(), |(_, a)| a);
        let upstream = authority
            .rsplit_once('@')
            .map_or(authority, |(_, a)| a)
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = server_url.replacen(&upstream, &listener.local_addr().unwrap().to_string(), 1);
        let clients = std::sync::Arc::new(std::sync::Mutex::new(Vec::<TcpStream>::new()));
        let kept = clients.clone();
        std::thread::spawn(move || {
            // The server's ends stay open for the test's life.
            let mut servers = Vec::new();
            for client in listener.incoming() {
                let Ok(client) = client else { return };
                let server = TcpStream::connect(&upstream).unwrap();
                kept.lock().unwrap().push(client.try_clone().unwrap());
                servers.push(server.try_clone().unwrap());
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    });
                }
            }
        });
        Self { url, clients }
    }

    fn dsn(&self, db: &TestDb) -> String {
        format!("{}/{}", self.url, db.name)
    }

    /// Closes every connection made so far, on the client's side.
    fn cut(&self) {
        for c in self.clients.lock().unwrap().drain(..) {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Exactly once, a connection lost while its stage `COPY` is still
/// committing on the server must not let the rows be staged twice: the
/// retry on a new connection has to wait for (or end) the old transaction
/// before it asks whether the rows are staged. The stage's commit sleeps
/// (a deferred trigger, added to the stage as the sink creates it); the
/// test cuts the sink's connection meanwhile, on the client's side only,
/// and holds the table so the rows are moved only after the old commit is
/// over.
#[test]
fn a_stage_commit_still_running_on_a_lost_connection_is_not_staged_twice() {
    let db = TestDb::new("stagerace");
    db.execute(
        "CREATE TABLE orders (id bigint NOT NULL, customer text NOT NULL);
         CREATE SEQUENCE slow_once;
         CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF nextval('slow_once') = 1 THEN PERFORM pg_sleep(3); END IF;
             RETURN NULL;
         END $$;
         CREATE FUNCTION slow_stage() RETURNS event_trigger LANGUAGE plpgsql AS $$
         DECLARE t record;
         BEGIN
             FOR t IN SELECT object_identity FROM pg_event_trigger_ddl_commands()
                      WHERE object_type = 'table' AND object_identity LIKE '%mailer_stage_%' LOOP
                 EXECUTE format('CREATE CONSTRAINT TRIGGER slow_commit AFTER INSERT ON %s
                     DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit()',
                     t.object_identity);
             END LOOP;
         END $$;
         CREATE EVENT TRIGGER slow_stage ON ddl_command_end WHEN TAG IN ('CREATE TABLE AS')
             EXECUTE FUNCTION slow_stage();",
    );
    let relay = Relay::start();
    let w = Workdir::new();
    let ids = 1..=6;
    let lines: String = ids
        .clone()
        .map(|id| format!("{{\"id\":{id},\"customer\":\"c{id}\"}}\n"))
        .collect();
    w.write("in.jsonl", &lines);
    let columns =
        "id = { field = \"id\", type = \"integer\" }\ncustomer = { field = \"customer\", type = \"text\" }";
    let manifest = orders_sink(columns).replace(
        "table = \"orders\"\n",
        "table = \"orders\"\nexactly_once = true\n",
    ) + "\n[checkpoint]\ninterval = \"100ms\"\npath = \"checkpoints\"\n";
    let m = w.write("orders.toml", &manifest);
    let mut child = mailer()
        .env("PG_DSN", relay.dsn(&db))
        .args(["run", m.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let sleeping = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = '{}' AND wait_event = 'PgSleep'",
        db.name
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while db.value(&sleeping) == "0" {
        assert!(
            std::time::Instant::now() < deadline,
            "the stage's commit never started"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before its stage committed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The rows move into the table only after the old commit is over.
    let holder = std::thread::spawn({
        let dsn = db.dsn();
        move || {
            sql(
                &dsn,
                "BEGIN; LOCK TABLE orders IN SHARE MODE; SELECT pg_sleep(4); COMMIT",
            )
        }
    });
    std::thread::sleep(Duration::from_millis(200));
    relay.cut();
    holder.join().unwrap();
    let out = child.wait_with_output().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("retrying on a new connection"), "{err}");
    assert_eq!(
        db.rows("SELECT id FROM orders ORDER BY id"),
        ids.map(|id| vec![Some(id.to_string())]).collect::<Vec<_>>(),
        "{err}"
    );
}
