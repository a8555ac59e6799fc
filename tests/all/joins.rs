//! Joins from manifests: the example pipelines' outputs equal brute-force
//! joins of their data (an interval join; a lookup join as of event time); bad join settings are refused with
//! located errors; a join killed again and again ends with exactly one
//! run's output (both sides' state restored), on both backends; its
//! savepoint restores at another parallelism.

use crate::checkpoints::{kills, run_and_kill_at, run_until_savepoint};
use crate::support::*;
use mailer::connectors::splitmix64;
use serde_json::{Value, json};
use std::path::PathBuf;

fn read_docs(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(repo().join("pipelines/data").join(file)).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `orders-payments.toml`: every order with each payment of its order made
/// 0 to 10 minutes after it, and each order without one alone. Its data
/// are at most 4 s out of order and the watermark trails by 5 s, so
/// nothing is late.
#[test]
fn orders_payments_joins_each_order_with_its_payments_within_ten_minutes() {
    let out = run(&[
        "run",
        repo().join("pipelines/orders-payments.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let orders = read_docs("shop-orders.jsonl");
    let payments = read_docs("shop-payments.jsonl");
    let mut want = Vec::new();
    for o in &orders {
        let t = o["ts"].as_i64().unwrap();
        let paid: Vec<&Value> = payments
            .iter()
            .filter(|p| p["order"] == o["order"])
            .filter(|p| (t..=t + 600_000).contains(&p["ts"].as_i64().unwrap()))
            .collect();
        if paid.is_empty() {
            want.push(json!({"left": o, "right": null}).to_string());
        }
        for p in paid {
            want.push(json!({"left": o, "right": p}).to_string());
        }
    }
    let mut got: Vec<String> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
        .collect();
    got.sort();
    want.sort();
    assert!(want.len() > 40, "the data join and miss: {}", want.len());
    assert_eq!(got, want);
}

/// `orders-enrich.toml`: every order with its customer's row as it was at
/// the order's time (the newest change at or before it), `null` for a
/// customer in no table.
#[test]
fn orders_enrich_joins_each_order_with_its_customer_as_of_the_orders_time() {
    let out = run(&[
        "run",
        repo().join("pipelines/orders-enrich.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let customers = read_docs("shop-customers.jsonl");
    let mut want: Vec<String> = read_docs("shop-orders.jsonl")
        .iter()
        .map(|o| {
            let t = o["ts"].as_i64().unwrap();
            let row = customers
                .iter()
                .filter(|c| c["customer"] == o["customer"] && c["ts"].as_i64().unwrap() <= t)
                .max_by_key(|c| c["ts"].as_i64().unwrap());
            json!({"stream": o, "table": row}).to_string()
        })
        .collect();
    let mut got: Vec<String> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
        .collect();
    got.sort();
    want.sort();
    let tiers = |docs: &[String], who: &str| -> Vec<String> {
        let mut t: Vec<String> = docs
            .iter()
            .map(|d| serde_json::from_str::<Value>(d).unwrap())
            .filter(|d| d["stream"]["customer"] == who)
            .map(|d| d["table"]["tier"].to_string())
            .collect();
        t.dedup();
        t
    };
    assert!(
        tiers(&want, "bob").len() >= 2,
        "the data change a tier mid-stream"
    );
    assert_eq!(got, want);
}

#[test]
fn a_join_needs_two_keyed_sides_of_one_parallelism_and_valid_settings() {
    let w = Workdir::new();
    w.write("a.jsonl", "{\"k\":\"x\",\"ts\":1}\n");
    let manifest = |operators: &str| {
        format!(
            r#"
[pipeline]
name = "bad-join"

[[sources]]
name = "a"
type = "file"
path = "{dir}/a.jsonl"
format = "json_lines"
key_field = "k"

[[sources]]
name = "b"
type = "file"
path = "{dir}/a.jsonl"
format = "json_lines"
key_field = "k"

[[operators]]
name = "ka"
type = "key_by"
input = "a"
parallelism = 2

[[operators]]
name = "kb"
type = "key_by"
input = "b"
parallelism = 2
{operators}
[[sinks]]
name = "out"
type = "stdout"
"#,
            dir = w.path("").display()
        )
    };
    let join = |fields: &str| format!("\n[[operators]]\nname = \"j\"\ntype = \"interval_join\"\n{fields}\n");
    let lookup = |fields: &str| format!("\n[[operators]]\nname = \"j\"\ntype = \"lookup_join\"\n{fields}\n");
    let cases = [
        (
            join("left = \"ka\"\nright = \"b\"\nlower = \"0s\"\nupper = \"1s\""),
            "`interval_join` needs keyed streams: `b` is not keyed",
        ),
        (
            join("left = \"ka\"\nright = \"kb\"\nlower = \"2s\"\nupper = \"1s\""),
            "`lower` (2000 ms) is after `upper` (1000 ms)",
        ),
        (
            join("left = \"ka\"\nright = \"nope\"\nlower = \"0s\"\nupper = \"1s\""),
            "`nope` is neither a source nor an operator before it",
        ),
        (
            join("left = \"ka\"\nright = \"kb\"\nlower = \"-x\"\nupper = \"1s\""),
            "`-x` is not a duration",
        ),
        (
            join("left = \"ka\"\nright = \"kb\"\nlower = \"0s\"\nupper = \"1s\"\nlate = \"side-output\""),
            "needs a `[late_output]` sink",
        ),
        (
            "\n[[operators]]\nname = \"j\"\ntype = \"lookup_join\"\ninput = \"ka\"\ntable = \"kb\"\njoin = \"full\"\n"
                .to_owned(),
            "a `lookup_join` is `inner` or `left`",
        ),
        (
            "\n[[operators]]\nname = \"j\"\ntype = \"lookup_join\"\ninput = \"a\"\ntable = \"kb\"\n".to_owned(),
            "`lookup_join` needs keyed streams: `a` is not keyed",
        ),
        (
            lookup("input = \"ka\"\ntable = \"kb\"\nglobal = true\nas_of = \"event_time\""),
            "a global table is joined as of `latest`",
        ),
        (
            lookup("input = \"ka\"\ntable = \"kb\"\nkey_field = \"k\""),
            "`key_field` is for a global table (`global = true`)",
        ),
        (
            lookup("input = \"ka\"\ntable = \"kb\"\nglobal = true\nmax_rows = 0"),
            "max_rows must be at least 1",
        ),
        (
            lookup("input = \"ka\"\ntable = \"kb\"\nglobal = true\nparallelism = 2"),
            "operators after `key_by` run on its workers",
        ),
    ];
    for (operators, expected) in cases {
        assert_refused(&w.write("bad.toml", &manifest(&operators)), expected, &operators);
    }
    let uneven = manifest(
        "\n[[operators]]\nname = \"j\"\ntype = \"interval_join\"\nleft = \"ka\"\nright = \"kb\"\nlower = \"0s\"\nupper = \"1s\"\n",
    )
    .replacen("parallelism = 2", "parallelism = 3", 1);
    let path = w.write("bad.toml", &uneven);
    let err = stderr(&run(&["validate", path.to_str().unwrap()]));
    assert!(err.contains("keyed over 3 and 2 workers"), "{err}");
}

const CRASH_LINES: u64 = 20_000;
const CRASH_KEYS: u64 = 40;

/// Line `i` of side `seed`: a key mixed from `i` and `seed`, at time
/// `10 i + seed`.
fn side_line(i: u64, seed: u64) -> String {
    let key = splitmix64(i ^ seed) % CRASH_KEYS;
    format!("{{\"k\":\"{key}\",\"i\":{i},\"ts\":{}}}", 10 * i + seed)
}

fn side_lines(seed: u64) -> String {
    (0..CRASH_LINES).map(|i| side_line(i, seed) + "\n").collect()
}

/// How the crash tests join `a` (left, the stream) with `b` (right, the
/// table).
#[derive(Clone, Copy)]
enum Joined {
    /// `interval_join` from 30 ms before to 20 ms after.
    Interval,
    /// `lookup_join` of `b` as a table, as of event time, left.
    Table,
    /// `lookup_join` of the unkeyed `a` with `b` as a global table, left.
    Global,
}

/// The `[[operators]]` tables: the join `j`, and the `key_by`s of `a`
/// and `b` it reads (`ka`, `kb`) unless the table is global.
fn join_operators(how: Joined, parallelism: usize) -> String {
    let key_bys = format!(
        "[[operators]]\nname = \"ka\"\ntype = \"key_by\"\ninput = \"a\"\nparallelism = {parallelism}\n\n[[operators]]\nname = \"kb\"\ntype = \"key_by\"\ninput = \"b\"\nparallelism = {parallelism}\n\n"
    );
    let join = match how {
        Joined::Interval => {
            "type = \"interval_join\"\nleft = \"ka\"\nright = \"kb\"\nlower = \"-30ms\"\nupper = \"20ms\""
                .to_owned()
        }
        Joined::Table => {
            "type = \"lookup_join\"\ninput = \"ka\"\ntable = \"kb\"\nas_of = \"event_time\"\njoin = \"left\""
                .to_owned()
        }
        Joined::Global => {
            return format!(
                "[[operators]]\nname = \"j\"\ntype = \"lookup_join\"\ninput = \"a\"\ntable = \"b\"\nglobal = true\nkey_field = \"k\"\njoin = \"left\"\nparallelism = {parallelism}\n"
            );
        }
    };
    format!("{key_bys}[[operators]]\nname = \"j\"\n{join}\n")
}

/// What the join gives, sorted.
fn crash_expected(how: Joined) -> Vec<String> {
    match how {
        Joined::Interval => interval_expected(),
        Joined::Table => table_expected(),
        Joined::Global => global_expected(),
    }
}

/// Each left record with the last row of its key in all of `b`: a global
/// table is loaded whole before the stream is read.
fn global_expected() -> Vec<String> {
    let key = |i: u64, seed: u64| splitmix64(i ^ seed) % CRASH_KEYS;
    let mut out: Vec<String> = (0..CRASH_LINES)
        .map(|i| {
            let row = (0..CRASH_LINES).rev().find(|&j| key(j, 2) == key(i, 1));
            let table = row.map_or("null".to_owned(), |j| side_line(j, 2));
            format!(r#"{{"stream":{},"table":{table}}}"#, side_line(i, 1))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Each left record with the row of its key valid at its time: the newest
/// right record of that key at or before it (`b`'s line `j` is at `10 j + 2`,
/// so before `a`'s line `i` at `10 i + 1` when `j < i`).
fn table_expected() -> Vec<String> {
    let key = |i: u64, seed: u64| splitmix64(i ^ seed) % CRASH_KEYS;
    let mut out: Vec<String> = (0..CRASH_LINES)
        .map(|i| {
            let row = (0..i).rev().find(|&j| key(j, 2) == key(i, 1));
            let table = row.map_or("null".to_owned(), |j| side_line(j, 2));
            format!(r#"{{"stream":{},"table":{table}}}"#, side_line(i, 1))
        })
        .collect();
    out.sort_unstable();
    out
}

/// Left records (`a`, seed 1) join right ones (`b`, seed 2) of the same key
/// from 30 ms before to 20 ms after them: every pair, sorted.
fn interval_expected() -> Vec<String> {
    let mut pairs = Vec::new();
    for i in 0..CRASH_LINES {
        let t = 10 * i + 1;
        for j in i.saturating_sub(3)..(i + 4).min(CRASH_LINES) {
            let u = 10 * j + 2;
            let same_key = splitmix64(i ^ 1) % CRASH_KEYS == splitmix64(j ^ 2) % CRASH_KEYS;
            if same_key && t <= u + 30 && u <= t + 20 {
                pairs.push(format!(
                    r#"{{"left":{},"right":{}}}"#,
                    side_line(i, 1),
                    side_line(j, 2)
                ));
            }
        }
    }
    pairs.sort_unstable();
    pairs
}

/// Two rate-limited files, each keyed, interval-joined into a file sink
/// (which rewinds on restore), checkpoints every `interval`.
fn crash_manifest(
    w: &Workdir,
    name: &str,
    how: Joined,
    backend: &str,
    parallelism: usize,
    rate: u64,
    interval: &str,
) -> PathBuf {
    let rate = match rate {
        0 => String::new(),
        r => format!("rate = {r}"),
    };
    w.write("a.jsonl", &side_lines(1));
    w.write("b.jsonl", &side_lines(2));
    w.manifest_as(
        &format!("{name}.toml"),
        &format!(
            r#"
[pipeline]
name = "{name}"
batch_size = 100

[[sources]]
name = "a"
type = "file"
path = "a.jsonl"
format = "json_lines"
key_field = "k"
timestamp_field = "ts"
{rate}

[[sources]]
name = "b"
type = "file"
path = "b.jsonl"
format = "json_lines"
key_field = "k"
timestamp_field = "ts"
{rate}

[watermark]
max_out_of_orderness = "10ms"

{operators}
[[sinks]]
name = "out"
type = "file"
path = "joined.txt"
format = "value"

[state]
backend = "{backend}"
path = "state"

[checkpoint]
interval = "{interval}"
path = "checkpoints"
"#,
            operators = join_operators(how, parallelism)
        ),
    )
}

fn assert_exactly_one_run(w: &Workdir, how: Joined, what: &str) {
    one_run_tally(w, how).assert_exactly_once(what);
}

/// The joined pairs against one run's.
fn one_run_tally(w: &Workdir, how: Joined) -> Tally {
    Tally::of_items(
        w.read("joined.txt").lines().map(str::to_owned),
        crash_expected(how),
    )
}

fn join_crash_sweep(how: Joined, backend: &'static str) {
    let sweep = Sweep::start("file", backend);
    let w = Workdir::new();
    let name = format!("join-crash-{backend}");
    let m = crash_manifest(&w, &name, how, backend, 2, 4_000, "100ms");
    let times = 2 * kills();
    let mut resumed = 0;
    for i in 0..times {
        resumed += u64::from(run_and_kill_at(&w.path("checkpoints"), &m, i, 600));
    }
    assert!(resumed + 1 >= times, "only {resumed} of {times} runs resumed");
    let log = run_to_end(&m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    sweep.report(one_run_tally(&w, how));
}

#[test]
fn a_join_killed_20_times_ends_with_exactly_one_runs_output_in_memory() {
    join_crash_sweep(Joined::Interval, "memory");
}

#[test]
fn a_join_killed_20_times_ends_with_exactly_one_runs_output_on_rocksdb() {
    join_crash_sweep(Joined::Interval, "rocksdb");
}

#[test]
fn a_table_join_killed_20_times_ends_with_exactly_one_runs_output_in_memory() {
    join_crash_sweep(Joined::Table, "memory");
}

#[test]
fn a_table_join_killed_20_times_ends_with_exactly_one_runs_output_on_rocksdb() {
    join_crash_sweep(Joined::Table, "rocksdb");
}

#[test]
fn a_global_table_join_killed_20_times_ends_with_exactly_one_runs_output() {
    join_crash_sweep(Joined::Global, "rocksdb");
}

#[test]
fn a_joins_savepoint_restores_at_another_parallelism() {
    let cases = [
        (Joined::Interval, "memory"),
        (Joined::Table, "rocksdb"),
        (Joined::Global, "memory"),
        (Joined::Global, "rocksdb"),
    ];
    for (how, backend) in cases {
        let w = Workdir::new();
        let sp = w.path("sp");
        let m = crash_manifest(&w, "join-rescale", how, backend, 2, 4_000, "1h");
        run_until_savepoint(&w, &["run", m.to_str().unwrap()], &m, &sp);
        let m = crash_manifest(&w, "join-rescale", how, backend, 3, 0, "1h");
        let log = run_to_end(&m, &["--from-savepoint", sp.to_str().unwrap()]);
        assert!(log.contains("resuming from a checkpoint"), "{log}");
        assert_exactly_one_run(&w, how, backend);
    }
}

#[test]
fn describe_shows_which_input_each_stream_of_a_join_feeds() {
    let describe = |name: &str| {
        let out = run(&["describe", repo().join("pipelines").join(name).to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out)
    };
    let text = describe("orders-payments.toml");
    assert!(
        text.contains("reads `orders` as input 0, `payments` as input 1"),
        "{text}"
    );
    assert!(
        text.contains(
            "interval join of input 0 (left) with input 1 (right) from 0 to 600000 ms after it, left"
        ),
        "{text}"
    );
    let text = describe("orders-enrich.toml");
    assert!(
        text.contains("join of input 0 (stream) with the table of input 1 as of event_time, left"),
        "{text}"
    );
}
