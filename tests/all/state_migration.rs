//! State migrations: a process plugin that changed the shape of its state
//! (a higher state version with `migrate`) is swapped in while the
//! pipeline runs; each key's state is brought to the new shape when the
//! key is next handled, exactly once, through crashes; going back to an
//! older state version is refused unless forced.

use crate::support::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const RECORDS: u64 = 200_000;

/// Generator (`RECORDS` at 20k/s over 50k keys) -> key_by -> process
/// `counts` running `plugin` on 2 workers -> `out.txt`, with checkpoints
/// every 200 ms and the admin API at `addr`.
fn counting(w: &Workdir, plugin: &str, addr: &str) -> std::path::PathBuf {
    counting_at(
        w,
        plugin,
        addr,
        &format!("count = {RECORDS}\nrate = 20000\nkeys = 50000"),
    )
}

/// [`counting`] with the generator's settings `generator`.
fn counting_at(w: &Workdir, plugin: &str, addr: &str, generator: &str) -> std::path::PathBuf {
    counting_with(w, plugin, addr, generator, ("", ""))
}

/// [`counting_at`] with `extra` settings of the operator and of `[admin]`.
fn counting_with(
    w: &Workdir,
    plugin: &str,
    addr: &str,
    generator: &str,
    (operator, admin): (&str, &str),
) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "migrate"
batch_size = 256

[source]
type = "generator"
{generator}

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "counts"
type = "process"
plugin = "{plugin}"
{operator}

[sink]
type = "file"
path = "out.txt"
format = "value"
append = true

[checkpoint]
interval = "200ms"
path = "checkpoints"

[admin]
listen = "{addr}"
token = "${{MAILER_ADMIN_TOKEN}}"
{admin}
"#
    ))
}

/// The metadata of the newest checkpoint, once it is not `before`.
fn next_checkpoint(w: &Workdir, before: Option<u64>) -> (u64, serde_json::Value) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let id = std::fs::read_to_string(w.path("checkpoints/LATEST"))
            .ok()
            .and_then(|id| id.trim().parse::<u64>().ok());
        if let Some(id) = id
            && Some(id) != before
        {
            let text = w.read(&format!("checkpoints/chk-{id:020}/_metadata.json"));
            return (id, serde_json::from_str(&text).unwrap());
        }
        assert!(Instant::now() < deadline, "no new checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state versions each worker's snapshot of `counts` recorded.
fn state_versions(metadata: &serde_json::Value) -> Vec<serde_json::Value> {
    metadata["snapshots"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["operator"] == "counts")
        .map(|s| s["state_versions"].clone())
        .collect()
}

#[test]
fn a_counter_moved_to_a_json_state_counts_every_key_exactly_through_a_sigkill_mid_migration() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let m = counting(&w, "{plugin:counter-v1}", &addr);
    let mut child = spawn_with_token(&m, &[]);
    wait_for(&addr);
    let (mut id, _) = next_checkpoint(&w, None);
    let v2 = plugin("counter-v2");
    let swapped = mailer_plugin(&m, &["swap", "counts", v2.to_str().unwrap()]);
    assert!(swapped.status.success(), "{}", stderr(&swapped));
    // Until a checkpoint holds keys of both versions, then SIGKILL.
    let mid_migration = serde_json::json!({"current": 2, "unmarked": 1});
    loop {
        let (next, metadata) = next_checkpoint(&w, Some(id));
        id = next;
        if state_versions(&metadata).iter().all(|v| *v == mid_migration) {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let out = spawn_with_token(&m, &[]).wait_with_output().unwrap();
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert!(
        log.contains("each key is migrated when first handled"),
        "the restarted run goes on migrating: {log}"
    );
    // Per key: 1, 2, 3, … in order, the first version's lines before the
    // second's; every record counted once.
    let mut last: BTreeMap<String, (u64, bool)> = BTreeMap::new();
    let mut continued = 0;
    let text = w.read("out.txt");
    for (i, line) in text.lines().enumerate() {
        let mut fields = line.split('\t');
        let key = fields.next().unwrap().to_owned();
        let count: u64 = fields.next().unwrap().parse().unwrap();
        let v2 = match fields.next() {
            None => false,
            Some("v2") => true,
            Some(other) => panic!("line {i}: {other}"),
        };
        let (before, was_v2) = last.insert(key.clone(), (count, v2)).unwrap_or((0, false));
        assert_eq!(
            count,
            before + 1,
            "line {i}: key {key} counted {before} then {count}"
        );
        assert!(!was_v2 || v2, "line {i}: key {key} back to the first version");
        if v2 && !was_v2 && before > 0 {
            continued += 1;
        }
    }
    assert_eq!(text.lines().count() as u64, RECORDS, "each record once");
    assert_eq!(last.values().map(|(c, _)| c).sum::<u64>(), RECORDS);
    assert!(
        continued > 1_000,
        "keys counted by the first version went on in the second: {continued}"
    );
}

#[test]
fn an_older_state_version_is_refused_unless_forced() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let m = counting(&w, "{plugin:counter-v2}", &addr);
    let mut child = spawn_with_token(&m, &[]);
    wait_for(&addr);
    let (_, metadata) = next_checkpoint(&w, None);
    assert!(
        state_versions(&metadata)
            .iter()
            .all(|v| *v == serde_json::json!({"current": 2, "unmarked": 2})),
        "{metadata}"
    );
    let v1 = plugin("counter-v1");
    let refused = mailer_plugin(&m, &["swap", "counts", v1.to_str().unwrap()]);
    assert!(!refused.status.success());
    let said = stderr(&refused);
    assert!(
        said.contains("declares state version 1, below the running version's 2") && said.contains("--force"),
        "{said}"
    );
    let store = w.path(".mailer/migrate/plugins");
    let kept = std::fs::read_dir(&store).map_or(0, |d| d.count());
    assert_eq!(kept, 0, "the refused version left the plugin store");
    sigterm(&child);
    assert!(child.wait().unwrap().success());

    // Restarting the state with the older version.
    let m = counting(&w, "{plugin:counter-v1}", &addr);
    let out = spawn_with_token(&m, &[]).wait_with_output().unwrap();
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains("holds state at state version 2")
            && said.contains("declares state version 1")
            && said.contains("mailer run --force"),
        "{said}"
    );
    // Forced, it starts, and the older version reads state it cannot
    // parse: the record fails (`on_error` is `fail`).
    let out = spawn_with_token(&m, &["--force"]).wait_with_output().unwrap();
    let said = stderr(&out);
    assert!(
        said.contains("(forced)") && said.contains("pipeline started"),
        "{said}"
    );
    assert!(!out.status.success(), "{said}");
}

#[test]
fn an_eager_migration_by_a_swap_migrates_the_keys_no_record_comes_to() {
    eager_migration(true);
}

#[test]
fn an_eager_migration_at_a_restart_migrates_the_keys_no_record_comes_to() {
    eager_migration(false);
}

/// 5000 keys counted by the first version, then a trickle of records (few
/// keys come back) counted by the second, which migrates every key
/// eagerly: swapped in while the pipeline runs (`by_swap`), or named by the
/// manifest at a restart.
fn eager_migration(by_swap: bool) {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let bounded = "count = 20000\nkeys = 5000";
    let m = counting_at(&w, "{plugin:counter-v1}", &addr, bounded);
    let out = spawn_with_token(&m, &[]).wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let trickle = "count = 100000000\nrate = 50\nkeys = 5000";
    let (m, mut running) = match by_swap {
        true => {
            let m = counting_at(&w, "{plugin:counter-v1}", &addr, trickle);
            let running = Running(spawn_with_token(&m, &[]));
            wait_for(&addr);
            let v2 = plugin("counter-v2");
            let swapped = mailer_plugin(
                &m,
                &["swap", "--migrate", "eager", "counts", v2.to_str().unwrap()],
            );
            assert!(swapped.status.success(), "{}", stderr(&swapped));
            (m, running)
        }
        false => {
            let m = counting_at(&w, "{plugin:counter-v2}", &addr, trickle);
            let running = Running(spawn_with_token(&m, &["--migrate", "eager"]));
            wait_for(&addr);
            (m, running)
        }
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut states: Vec<String> = Vec::new();
    while Instant::now() < deadline {
        let scan = mailer()
            .env("MAILER_ADMIN_TOKEN", TOKEN)
            .args(["state", "scan"])
            .arg(&m)
            .args(["counts", "--limit", "10000"])
            .output()
            .unwrap();
        assert!(scan.status.success(), "{}", stderr(&scan));
        let scan: serde_json::Value = serde_json::from_slice(&scan.stdout).unwrap();
        states = scan["keys"]
            .as_array()
            .unwrap()
            .iter()
            .map(|k| k["state"]["count"].as_str().unwrap().to_owned())
            .collect();
        if states.iter().all(|s| s.starts_with('{')) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    sigterm(&running.0);
    assert!(running.0.wait().unwrap().success());
    // (Of 5000 keys, about e^-4 of them got none of the 20000 records.)
    assert!(states.len() > 4800, "the keys counted: {}", states.len());
    let counters: Vec<serde_json::Value> = states
        .iter()
        .map(|s| serde_json::from_str(s).unwrap_or_else(|_| panic!("not migrated: {s}")))
        .collect();
    let total: u64 = counters.iter().map(|c| c["count"].as_u64().unwrap()).sum();
    assert!(
        total >= 20_000,
        "the counts went on from the first version's: {total}"
    );
    let untouched = counters.iter().filter(|c| c["last_seen"] == -1).count();
    assert!(
        untouched > 4000,
        "keys no record came to since were migrated too: {untouched} of {}",
        states.len()
    );
}

#[test]
fn a_failing_migration_fails_the_keys_records_and_a_fixed_version_migrates_them() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let manifest = |generator: &str| {
        let generator = format!("{generator}\nkeys = 500");
        let operator = r#"on_error = "skip""#;
        let admin = "probation_records = 200\nrollback_failure_share = 0.1";
        counting_with(&w, "{plugin:counter-v1}", &addr, &generator, (operator, admin))
    };
    let m = manifest("count = 20000");
    let out = spawn_with_token(&m, &[]).wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest("count = 100000000\nrate = 2000");
    // Its log (a line per failed record) into a file: a pipe nobody reads
    // while it runs would fill and stop it.
    let mut child = mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .arg("run")
        .arg(&m)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(w.path("run.log")).unwrap())
        .spawn()
        .unwrap();
    wait_for(&addr);
    let swap = |name: &str| {
        let file = plugin(name);
        let swapped = mailer_plugin(&m, &["swap", "counts", file.to_str().unwrap()]);
        assert!(swapped.status.success(), "{}", stderr(&swapped));
    };
    swap("counter-v2-broken");
    std::thread::sleep(Duration::from_millis(1500));
    swap("counter-v2");
    std::thread::sleep(Duration::from_millis(1500));
    sigterm(&child);
    let status = child.wait().unwrap();
    let log = w.read("run.log");
    assert!(status.success(), "{log}");
    assert!(
        log.contains(
            "migrating state `count` from state version 1 to 2: cannot read state `count` of state version 1"
        ),
        "the failed records say why: {log}"
    );
    assert!(
        log.contains("the automatic rollback failed") && log.contains("below the running version's 2"),
        "the failing version is not rolled back onto state it may have migrated: {log}"
    );
    // No record counted by the broken version; the fixed one went on from
    // the first version's counts.
    let mut last: BTreeMap<String, (u64, bool)> = BTreeMap::new();
    for (i, line) in w.read("out.txt").lines().enumerate() {
        let fields: Vec<&str> = line.split('\t').collect();
        assert!(fields.get(2) != Some(&"broken"), "line {i}: {line}");
        let (key, count) = (fields[0].to_owned(), fields[1].parse::<u64>().unwrap());
        let v2 = fields.get(2) == Some(&"v2");
        let (before, _) = last.insert(key.clone(), (count, v2)).unwrap_or((0, false));
        assert_eq!(
            count,
            before + 1,
            "line {i}: key {key} counted {before} then {count}"
        );
    }
    let continued = last.values().filter(|(count, v2)| *v2 && *count > 1).count();
    assert!(
        continued > 400,
        "keys migrated by the fixed version: {continued} of 500"
    );
}
