//! Checkpoints and savepoints in an S3 bucket (moto's server on loopback):
//! runs killed with SIGKILL and restarted on an empty machine each time end
//! with exactly one run's counts; each checkpoint uploads only the files
//! the ones before it did not; a server that stops fails checkpoints, not
//! the pipeline; a savepoint in a bucket restores at another parallelism; a
//! plugin swapped in before a checkpoint comes back with it on a new machine.

use crate::checkpoints::{
    counting_manifest, expected_counts, final_counts, run_and_kill, run_until_savepoint,
};
use crate::support::*;
use mailer::checkpoint::{BucketUrl, S3Settings};
use mailer::connectors::{FileSink, GeneratorSource, SinkFormat};
use mailer::pipeline::Pipeline;
use mailer_test_support::s3::S3Server;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

const BUCKET: &str = "mailer";

/// The generator's keyed Wasm count on RocksDB (see checkpoints.rs) with
/// `checkpoint` as its `[checkpoint]` table (the `[checkpoint.s3]` table of
/// `server` follows it).
fn manifest(
    w: &Workdir,
    server: &S3Server,
    parallelism: usize,
    rate: u64,
    checkpoint: &str,
) -> std::path::PathBuf {
    manifest_on(w, server, "rocksdb", parallelism, rate, checkpoint)
}

/// [`manifest`] on the state `backend`.
fn manifest_on(
    w: &Workdir,
    server: &S3Server,
    backend: &str,
    parallelism: usize,
    rate: u64,
    checkpoint: &str,
) -> std::path::PathBuf {
    counting_manifest(
        w,
        backend,
        parallelism,
        rate,
        &format!("{checkpoint}\n\n{}", server.manifest_table()),
    )
}

/// Removes the local state, checkpoint and plugin store folders: the next
/// run starts as on a new machine, with only the bucket (and the sink's
/// output).
fn empty_the_machine(w: &Workdir) {
    for dir in ["state", "checkpoints", ".mailer"] {
        let _ = std::fs::remove_dir_all(w.path(dir));
    }
}

/// The settings reaching `server`.
fn settings(server: &S3Server) -> S3Settings {
    S3Settings {
        endpoint: Some(server.endpoint()),
        access_key_id: Some(mailer_test_support::s3::ACCESS_KEY_ID.into()),
        secret_access_key: Some(mailer_test_support::s3::SECRET_ACCESS_KEY.into()),
        ..Default::default()
    }
}

/// The metadata of every complete checkpoint under `prefix`, by id.
fn checkpoints_in(server: &S3Server, prefix: &str) -> BTreeMap<u64, mailer::checkpoint::Metadata> {
    let url = BucketUrl::parse(&format!("s3://{BUCKET}/{prefix}"))
        .unwrap()
        .unwrap();
    let store = mailer::checkpoint::RemoteCheckpoints::open(&url, &settings(server)).unwrap();
    let into = tempfile::tempdir().unwrap();
    store
        .ids()
        .into_iter()
        .map(|id| {
            (
                id,
                store
                    .fetch_checkpoint(id, &into.path().join(id.to_string()))
                    .unwrap(),
            )
        })
        .collect()
}

/// The size of each object under `prefix`.
fn object_sizes(server: &S3Server, prefix: &str) -> BTreeMap<String, u64> {
    use futures_util::TryStreamExt;
    let client = settings(server).client(BUCKET).unwrap();
    let prefix = object_store::path::Path::from(prefix);
    mailer::checkpoint::s3::wait_for(async move { client.list(Some(&prefix)).try_collect::<Vec<_>>().await })
        .unwrap()
        .into_iter()
        .map(|m| (m.location.to_string(), m.size))
        .collect()
}

/// Deletes the object `key`.
fn delete_object(server: &S3Server, key: &str) {
    use object_store::ObjectStoreExt;
    let client = settings(server).client(BUCKET).unwrap();
    let path = object_store::path::Path::from(key);
    mailer::checkpoint::s3::wait_for(async move { client.delete(&path).await }).unwrap();
}

/// Kills the counting pipeline on `backend`, checkpointed to the bucket,
/// `2 * kills()` times (20 unless `MAILER_SOAK_KILLS` says), each run on
/// an empty machine, then runs it to its end on one more.
fn s3_crash_sweep(backend: &'static str) {
    let sweep = Sweep::start("file", backend).checkpoints_in_s3();
    let server = S3Server::start(BUCKET);
    let w = Workdir::new();
    let m = manifest_on(
        &w,
        &server,
        backend,
        2,
        40_000,
        "interval = \"100ms\"\npath = \"s3://mailer/crash\"\nlocal_path = \"checkpoints\"",
    );
    let kills = 2 * crate::checkpoints::kills();
    let mut resumed = 0;
    for i in 0..kills {
        empty_the_machine(&w);
        resumed += u64::from(run_and_kill(&w, &m, i, 800));
    }
    assert_eq!(
        resumed,
        kills - 1,
        "every run after the first resumes from the bucket"
    );
    empty_the_machine(&w);
    let log = run_to_end(&m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert!(!log.contains(mailer_test_support::s3::SECRET_ACCESS_KEY), "{log}");
    sweep.report(Tally::of_counts(&final_counts(&w), &expected_counts()));
}

#[test]
fn killed_runs_restarted_on_empty_machines_resume_from_the_bucket_and_count_exactly_once_on_rocksdb() {
    s3_crash_sweep("rocksdb");
}

#[test]
fn killed_runs_restarted_on_empty_machines_resume_from_the_bucket_and_count_exactly_once_in_memory() {
    s3_crash_sweep("memory");
}

#[test]
fn each_checkpoint_uploads_only_the_files_the_ones_before_it_did_not() {
    let server = S3Server::start(BUCKET);
    server.enable_versioning(BUCKET);
    let w = Workdir::new();
    // 10 s of input, a checkpoint every 500 ms, none pruned.
    let m = manifest(
        &w,
        &server,
        2,
        20_000,
        "interval = \"500ms\"\nkeep = 100\npath = \"s3://mailer/inc\"\nlocal_path = \"checkpoints\"",
    );
    let log = run_to_end(&m, &[]);
    assert_eq!(finished_field(&log, "failed_checkpoints"), 0, "{log}");
    assert_eq!(final_counts(&w), expected_counts());
    let checkpoints = checkpoints_in(&server, "inc");
    assert!(checkpoints.len() >= 5, "{} checkpoints: {log}", checkpoints.len());
    // Every file was written once, whatever number of checkpoints list it.
    let versions = server.versions(BUCKET, "inc/files/");
    let rewritten: Vec<_> = versions.iter().filter(|(_, n)| **n > 1).collect();
    assert!(rewritten.is_empty(), "written more than once: {rewritten:?}");
    let digests = |m: &mailer::checkpoint::Metadata| -> BTreeSet<String> {
        m.snapshots
            .iter()
            .flat_map(|s| s.digests.values().cloned())
            .collect()
    };
    let listed: BTreeSet<String> = checkpoints.values().flat_map(digests).collect();
    let stored: BTreeSet<String> = versions
        .keys()
        .map(|k| k.trim_start_matches("inc/files/").to_owned())
        .collect();
    assert_eq!(
        stored, listed,
        "the bucket holds exactly the files the checkpoints list"
    );
    // Later checkpoints share files with the one before: each uploads less
    // than it lists.
    let mut before = BTreeSet::new();
    let mut shared = 0;
    for m in checkpoints.values() {
        let now = digests(m);
        shared += now.intersection(&before).count();
        before = now;
    }
    assert!(shared > 0, "no checkpoint shares a file with the one before");
    let uploads: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("checkpoint complete"))
        .filter_map(|l| l.split("uploaded_bytes=").nth(1))
        .map(|v| {
            v.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(uploads.len(), checkpoints.len(), "{log}");
    // What the checkpoints say they uploaded is what the bucket holds
    // (besides the prefix's lease, which no checkpoint counts).
    let stored_bytes: u64 = object_sizes(&server, "inc")
        .iter()
        .filter(|(key, _)| key.as_str() != "inc/_lease.json")
        .map(|(_, size)| size)
        .sum();
    assert_eq!(uploads.iter().sum::<u64>(), stored_bytes);

    // A file of the newest checkpoint lost: a new machine refuses to resume
    // rather than take an older checkpoint on its own.
    let (&newest, metadata) = checkpoints.last_key_value().unwrap();
    let lost = metadata.snapshots[0].digests.values().next().unwrap();
    delete_object(&server, &format!("inc/files/{lost}"));
    empty_the_machine(&w);
    let out = run(&["run", m.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&format!("reading checkpoint {newest}, the newest"))
            && err.contains("--from-checkpoint"),
        "{err}"
    );
}

#[test]
fn a_plugin_swapped_in_before_a_checkpoint_runs_again_on_an_empty_machine_from_the_bucket() {
    let server = S3Server::start(BUCKET);
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let m = manifest(
        &w,
        &server,
        2,
        20_000,
        "interval = \"200ms\"\npath = \"s3://mailer/swapped\"\nlocal_path = \"checkpoints\"",
    );
    let text = std::fs::read_to_string(&m).unwrap();
    let admin = format!("\n[admin]\nlisten = \"{addr}\"\ntoken = \"${{MAILER_ADMIN_TOKEN}}\"\n");
    std::fs::write(&m, text + &admin).unwrap();
    let mut child = spawn_with_token(&m, &[]);
    wait_for(&addr);
    wait_for_new_checkpoint(&w.path("checkpoints"));
    let by_ten = std::fs::read(plugin("count-by-ten")).unwrap();
    let swapped = mailer_plugin(&m, &["swap", "counts", plugin("count-by-ten").to_str().unwrap()]);
    assert!(swapped.status.success(), "{}", stderr(&swapped));
    // Until a checkpoint in the bucket records the swap (the local folder
    // is renamed into place after the upload).
    let records_swap = || {
        let id = std::fs::read_to_string(w.path("checkpoints/LATEST")).unwrap();
        let id: u64 = id.trim().parse().unwrap();
        let metadata = w.path(&format!("checkpoints/chk-{id:020}/_metadata.json"));
        std::fs::read_to_string(metadata).is_ok_and(|m| m.contains("manifest_digest"))
    };
    while !records_swap() {
        wait_for_new_checkpoint(&w.path("checkpoints"));
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the run ended before the kill"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let before_restart = w.read("out.txt").lines().count();

    // Another machine: no state, no checkpoints, no plugin store; only the
    // bucket prefix (and the sink's file).
    empty_the_machine(&w);
    let out = spawn_with_token(&m, &[]).wait_with_output().unwrap();
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("resuming from a checkpoint")
            && log.contains("resuming with the plugin swapped in before the checkpoint"),
        "{log}"
    );
    // Per key: steps of one (the manifest's count), then steps of ten (the
    // swapped-in version) from the switch on, through the restart; every
    // record counted once.
    let lines = crate::checkpoints::count_lines(&w);
    assert!(lines.len() > before_restart, "the restarted run wrote nothing");
    let mut last: BTreeMap<&str, u64> = BTreeMap::new();
    let mut switched: BTreeMap<&str, u64> = BTreeMap::new();
    for (i, (key, count)) in lines.iter().enumerate() {
        let before = last.insert(key, *count).unwrap_or(0);
        match count - before {
            1 => assert!(
                !switched.contains_key(key.as_str()),
                "line {i}: a step of one after the switch"
            ),
            10 => {
                switched.entry(key).or_insert(before);
            }
            step => panic!("line {i}: step {step}"),
        }
        if i >= before_restart {
            assert!(
                switched.contains_key(key.as_str()),
                "line {i}: the restarted run counts in ones"
            );
        }
    }
    for (key, n) in expected_counts() {
        let at_switch = switched.get(key.as_str()).copied().unwrap_or(n);
        assert_eq!(last[key.as_str()], at_switch + 10 * (n - at_switch), "key {key}");
    }
    // The swapped-in component came from the bucket, beside the checkpoint
    // that named it, into the new machine's plugin store.
    let digest = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&by_ten));
    assert!(
        object_sizes(&server, "swapped/files").contains_key(&format!("swapped/files/{digest}")),
        "the bucket holds the swapped-in plugin"
    );
    let stored = w.path(&format!(".mailer/crash-rocksdb/plugins/{digest}.wasm"));
    assert_eq!(std::fs::read(stored).unwrap(), by_ten);
}

#[test]
fn a_second_instance_on_the_same_prefix_is_refused_and_the_first_ones_checkpoints_restore() {
    let server = S3Server::start(BUCKET);
    let w = Workdir::new();
    let m = manifest(
        &w,
        &server,
        2,
        20_000,
        "interval = \"200ms\"\npath = \"s3://mailer/shared\"\nlocal_path = \"checkpoints\"",
    );
    // The same pipeline from another folder of its own (another machine):
    // only the bucket prefix is shared.
    let text = std::fs::read_to_string(&m).unwrap();
    let second_text = text
        .replace("local_path = \"checkpoints\"", "local_path = \"checkpoints-2\"")
        .replace("path = \"state\"", "path = \"state-2\"")
        .replace("path = \"out.txt\"", "path = \"out-2.txt\"");
    assert_ne!(second_text, text);
    let second = w.manifest_as("second.toml", &second_text);

    let mut first = spawn_run(&m);
    wait_for_new_checkpoint(&w.path("checkpoints"));
    let out = run(&["run", second.to_str().unwrap()]);
    let err = stderr(&out);
    assert!(
        !out.status.success(),
        "a second instance ran beside the first: {err}"
    );
    assert!(
        err.contains("s3://mailer/shared")
            && err.contains("shared/_lease.json")
            && err.contains(&format!("process {}", first.id())),
        "the refusal names the prefix and the holder: {err}"
    );
    assert!(
        !w.path("out-2.txt").exists() || std::fs::read_to_string(w.path("out-2.txt")).unwrap().is_empty(),
        "the refused instance wrote output"
    );

    // The first goes on: its later checkpoints are whole in the bucket.
    for _ in 0..3 {
        wait_for_new_checkpoint(&w.path("checkpoints"));
    }
    assert!(first.try_wait().unwrap().is_none(), "the first run stopped");
    first.kill().unwrap();
    let killed = first.wait_with_output().unwrap();
    assert!(
        !stderr(&killed).contains("checkpoint failed"),
        "{}",
        stderr(&killed)
    );

    // A new machine resumes from the killed run's newest checkpoint (its
    // lease names a process that is gone) and ends with exactly one
    // run's counts.
    empty_the_machine(&w);
    let log = run_to_end(&m, &[]);
    assert!(
        log.contains("resuming from a checkpoint") && log.contains("took over the lease"),
        "{log}"
    );
    assert_eq!(final_counts(&w), expected_counts());
    // A clean stop releases the lease: the next instance need not wait.
    let lease = read_object(&server, "shared/_lease.json");
    assert!(lease.contains("\"released\": true"), "{lease}");
}

/// The text of the object `key`.
fn read_object(server: &S3Server, key: &str) -> String {
    use object_store::ObjectStoreExt;
    let client = settings(server).client(BUCKET).unwrap();
    let path = object_store::path::Path::from(key);
    let bytes =
        mailer::checkpoint::s3::wait_for(async move { client.get(&path).await?.bytes().await }).unwrap();
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn a_stopped_server_fails_checkpoints_while_the_pipeline_goes_on_and_nothing_is_lost() {
    let server = S3Server::start(BUCKET);
    let w = Workdir::new();
    let m = manifest(
        &w,
        &server,
        2,
        20_000,
        "interval = \"200ms\"\ntolerable_failures = 1000\npath = \"s3://mailer/stop\"\nlocal_path = \"checkpoints\"\n",
    );
    // Requests give up fast, so a checkpoint fails while the server is away.
    let text = std::fs::read_to_string(&m).unwrap().replace(
        "[checkpoint.s3]\n",
        "[checkpoint.s3]\nrequest_timeout = \"500ms\"\nmax_retries = 1\n",
    );
    std::fs::write(&m, text).unwrap();
    let child = spawn_run(&m);
    wait_for_new_checkpoint(&w.path("checkpoints"));
    server.pause();
    std::thread::sleep(Duration::from_secs(3));
    server.resume();
    let out = child.wait_with_output().unwrap();
    let log = stderr(&out);
    assert!(out.status.success(), "{log}");
    assert!(finished_field(&log, "failed_checkpoints") >= 1, "{log}");
    let last_failure = log
        .rfind("checkpoint failed")
        .expect("a failed checkpoint is logged");
    assert!(
        log[last_failure..].contains("checkpoint complete"),
        "checkpoints complete again once the server is back: {log}"
    );
    assert_eq!(final_counts(&w), expected_counts());
    // A new machine resumes from the bucket: the input is done, and nothing
    // is counted twice.
    empty_the_machine(&w);
    let log = run_to_end(&m, &[]);
    assert!(log.contains("resuming from a checkpoint"), "{log}");
    assert_eq!(final_counts(&w), expected_counts());
}

#[test]
fn a_savepoint_in_a_bucket_restores_at_another_parallelism_on_an_empty_machine() {
    let server = S3Server::start(BUCKET);
    let w = Workdir::new();
    // Only the savepoint (and the final checkpoint of the stop) is taken.
    let local = "interval = \"1h\"\npath = \"checkpoints\"";
    let m = manifest(&w, &server, 1, 20_000, local);
    let target = "s3://mailer/savepoints/sp1";
    run_until_savepoint(&w, &["run", m.to_str().unwrap()], &m, target);

    empty_the_machine(&w);
    let m = manifest(&w, &server, 3, 20_000, local);
    let log = run_to_end(&m, &["--from-savepoint", target]);
    assert!(log.contains("downloading the savepoint"), "{log}");
    assert_eq!(final_counts(&w), expected_counts());
}

#[test]
fn bucket_settings_the_manifest_gets_wrong_are_refused_where_they_are() {
    let w = Workdir::new();
    let cases = [
        ("path = \"gs://b/p\"", "`gs://` is not supported"),
        ("path = \"s3:///p\"", "names no bucket"),
        (
            "path = \"c\"\nlocal_path = \"l\"",
            "`local_path` is the staging folder",
        ),
        (
            "path = \"s3://b/p\"\n\n[checkpoint.s3]\nendpoint = \"127.0.0.1:9000\"",
            "is not a URL",
        ),
        (
            "path = \"s3://b/p\"\n\n[checkpoint.s3]\nconcurrency = 0",
            "concurrency 0 is out of range",
        ),
        (
            "path = \"s3://b/p\"\n\n[checkpoint.s3]\nsecret = \"x\"",
            "unknown field `secret`",
        ),
    ];
    for (i, (checkpoint, expected)) in cases.into_iter().enumerate() {
        let m = w.manifest_as(
            &format!("bad-{i}.toml"),
            &format!(
                "[pipeline]\nname = \"p\"\n\n[source]\ntype = \"generator\"\ncount = 1\n\n[sink]\ntype = \"stdout\"\n\n[checkpoint]\n{checkpoint}\n"
            ),
        );
        assert_refused(&m, expected, checkpoint);
    }
}

#[test]
fn describe_names_the_bucket_and_never_a_credential() {
    let w = Workdir::new();
    let m = w.manifest(
        "[pipeline]\nname = \"p\"\n\n[source]\ntype = \"generator\"\ncount = 1\n\n[sink]\ntype = \"stdout\"\n\n[checkpoint]\npath = \"s3://b/p\"\n\n[checkpoint.s3]\nendpoint = \"http://127.0.0.1:9\"\naccess_key_id = \"${TEST_KEY_ID}\"\nsecret_access_key = \"${TEST_SECRET}\"\n",
    );
    let out = mailer()
        .env("TEST_KEY_ID", "AKIDEXAMPLE1")
        .env("TEST_SECRET", "s3cr3t-value")
        .args(["describe", m.to_str().unwrap()])
        .output()
        .unwrap();
    let (text, log) = (stdout(&out), stderr(&out));
    assert!(out.status.success(), "{log}");
    assert!(
        text.contains("checkpoints: every 10s to s3://b/p (written first into"),
        "{text}"
    );
    for shown in [&text, &log] {
        assert!(
            !shown.contains("AKIDEXAMPLE1") && !shown.contains("s3cr3t-value"),
            "{shown}"
        );
    }
}

#[test]
fn a_pipeline_built_in_code_checkpoints_to_a_bucket_and_another_machine_resumes_from_it() {
    let server = S3Server::start(BUCKET);
    let dir = tempfile::tempdir().unwrap();
    let run = |local: &str| {
        let p = Pipeline::new("built")
            .checkpoints(dir.path().join(local), Duration::from_millis(50))
            .checkpoints_to_bucket("s3://mailer/built", settings(&server));
        p.source("numbers", GeneratorSource::new(Some(20_000), Some(5), 0, 1, None))
            .key_by_record_key(2)
            .reduce_with("sums", |acc, r| {
                let before: u64 = acc.map_or(0, |a| std::str::from_utf8(a).unwrap().parse().unwrap());
                let n: u64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
                (before + n).to_string().into_bytes()
            })
            .sink(
                "out",
                FileSink::create(&dir.path().join("out"), SinkFormat::Text, true).unwrap(),
            );
        p.run().unwrap()
    };
    let first = run("here");
    assert_eq!(first.source_records, 20_000);
    assert!(first.checkpoints_completed >= 1);
    assert!(!checkpoints_in(&server, "built").is_empty());
    // Another machine (another local folder) resumes from the bucket: at the
    // end of the input, so it reads nothing again.
    let second = run("there");
    assert_eq!(second.source_records, 0);
}
