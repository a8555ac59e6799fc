//! Hostile plugins: loops, memory and stack exhaustion, leaks, panics,
//! floods of output, malformed batches, and reaching for files, sockets,
//! the environment, the clock and randomness without a grant. The host
//! stays up, the failure policy takes the offending record (dead letters
//! here, with the reason), the event is counted and logged, and every
//! other record goes through. Grants open exactly what they name.

use crate::support::*;

/// What one run did.
struct Ran {
    stderr: String,
    /// The sink's values, in order.
    out: Vec<String>,
    /// The dead letters' (value, reason).
    dead: Vec<(String, String)>,
}

/// Runs `values` (one record each) through operator `hostile` running
/// `plugin` with the extra operator settings `settings`, failed records
/// dead-lettered.
fn run_hostile(plugin: &str, values: &[&str], settings: &str) -> Ran {
    run_in(&Workdir::new(), plugin, values, settings)
}

/// [`run_hostile`] with the manifest in `w` (for grants naming files there).
fn run_in(w: &Workdir, plugin: &str, values: &[&str], settings: &str) -> Ran {
    w.write("in.txt", &(values.join("\n") + "\n"));
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "sandbox"
batch_size = 8

[source]
type = "file"
path = "in.txt"
{keyed}
[[operators]]
name = "hostile"
type = "{kind}"
plugin = "{{plugin:{plugin}}}"
on_error = "dead-letter"
{timeout}
{settings}

[sink]
type = "file"
path = "out.txt"
format = "value"

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"
"#,
        kind = match plugin {
            "hostile-flood" => "flat_map",
            "hostile-state" => "process",
            _ => "map",
        },
        // The deadline the time-bomb tests need, unless a test sets its own.
        timeout = if settings.contains("timeout") {
            ""
        } else {
            "timeout = \"300ms\""
        },
        keyed = if plugin == "hostile-state" {
            "\n[[operators]]\ntype = \"key_by\"\n"
        } else {
            ""
        },
    ));
    let out = run(&["run", m.to_str().unwrap()]);
    let stderr = stderr(&out);
    assert!(out.status.success(), "the host must stay up: {stderr}");
    let dead = dead_letters(w, "dead.jsonl");
    let out = w.read("out.txt").lines().map(str::to_owned).collect();
    Ran { stderr, out, dead }
}

/// `marker` between ordinary records: it alone is dead-lettered with a
/// reason containing `reason`, counted and logged; the rest pass.
fn only_the_marker_fails(marker: &str, reason: &str) {
    let ran = run_hostile("hostile", &["a", marker, "b", "c"], "");
    assert_eq!(ran.out, ["a", "b", "c"], "{marker}: the others pass");
    assert_eq!(ran.dead.len(), 1, "{marker}: {:?}", ran.dead);
    assert_eq!(ran.dead[0].0, marker);
    assert!(
        ran.dead[0].1.contains(reason),
        "{marker}: reason {:?}",
        ran.dead[0].1
    );
    assert_eq!(
        finished_field(&ran.stderr, "dead_lettered"),
        1,
        "{marker}: counted"
    );
    assert!(
        ran.stderr.contains("record dead-lettered") && ran.stderr.contains("operator=hostile"),
        "{marker}: logged with the operator:\n{}",
        ran.stderr
    );
}

#[test]
fn an_endless_loop_is_stopped_at_the_deadline() {
    only_the_marker_fails("loop", "exceeded its deadline of 300ms");
}

#[test]
fn a_memory_bomb_hits_the_memory_limit() {
    only_the_marker_fails("bomb", "plugin trapped");
}

#[test]
fn a_stack_overflow_traps() {
    only_the_marker_fails("stack", "plugin trapped");
}

#[test]
fn a_panic_traps() {
    only_the_marker_fails("panic", "plugin trapped");
}

#[test]
fn fuel_stops_a_loop_before_the_deadline() {
    // 50 million instructions end long before the 300 ms deadline.
    let ran = run_hostile("hostile", &["a", "loop", "b"], "fuel = 50_000_000");
    assert_eq!(ran.out, ["a", "b"]);
    assert_eq!(ran.dead.len(), 1);
    assert!(ran.dead[0].1.contains("ran out of its fuel"), "{:?}", ran.dead);
    assert_eq!(
        finished_field(&ran.stderr, "plugin_timeouts"),
        2,
        "the batch call, then the record's"
    );
}

#[test]
fn a_slow_leak_across_calls_ends_in_a_fresh_instance() {
    // Each record keeps 1 MiB more; at 16 MiB the instance traps, its
    // batch is retried on a fresh one, and nothing is lost.
    let values: Vec<&str> = std::iter::repeat_n("leak", 60).collect();
    let ran = run_hostile("hostile", &values, "memory_limit_mb = 16");
    assert_eq!(ran.out.len(), 60, "every record went through: {:?}", ran.dead);
    // After a trap the count starts again: the leaked memory went with the
    // old instance.
    let counts: Vec<u64> = ran
        .out
        .iter()
        .map(|v| v["leaked:".len()..].parse().unwrap())
        .collect();
    assert!(counts.windows(2).any(|w| w[1] < w[0]), "{counts:?}");
    assert!(counts.iter().all(|&c| c < 16), "{counts:?}");
    assert!(finished_field(&ran.stderr, "plugin_traps") >= 1, "counted");
    assert!(
        ran.stderr.contains("batch call failed") && ran.stderr.contains("operator=hostile"),
        "logged:\n{}",
        ran.stderr
    );
}

#[test]
fn files_sockets_and_the_environment_are_denied_without_a_grant() {
    let ran = run_hostile(
        "hostile",
        &[
            "file:/etc/passwd",
            "write:/tmp/mailer-hostile",
            "env:HOME",
            "socket:127.0.0.1:5432",
        ],
        "",
    );
    assert_eq!(ran.out.len(), 4, "{:?}", ran.dead);
    for (value, probe) in ran.out.iter().zip(["file", "write", "env", "socket"]) {
        assert!(value.starts_with("denied"), "{probe}: {value}");
    }
    assert!(!std::path::Path::new("/tmp/mailer-hostile").exists());
}

#[test]
fn the_clock_is_frozen_and_randomness_fixed_without_a_grant() {
    let ran = run_hostile("hostile", &["clock", "random"], "");
    assert_eq!(ran.out[0], "clock:0");
    let again = run_hostile("hostile", &["random"], "");
    assert_eq!(
        ran.out[1], again.out[0],
        "no randomness: every run draws the same"
    );
    let random = |settings| run_hostile("hostile", &["random"], settings).out[0].clone();
    let granted = "grants = { random = true }";
    assert_ne!(random(granted), random(granted), "granted: real randomness");
    let granted = run_hostile("hostile", &["clock"], "grants = { clocks = true }");
    let secs: u64 = granted.out[0]["clock:".len()..].parse().unwrap();
    assert!(secs > 1_700_000_000, "the real clock: {secs}");
}

#[test]
fn grants_open_a_directory_read_only_and_named_variables() {
    // SAFETY: the variable is only read by the child process.
    unsafe { std::env::set_var("MAILER_TEST_GRANTED", "granted-value") };
    let probes = [
        "file:/data/hello.txt",
        "write:/data/new.txt",
        "env:MAILER_TEST_GRANTED",
        "env:HOME",
        "file:/etc/passwd",
    ];
    let settings = r#"grants = { dir = "shared", env = ["MAILER_TEST_GRANTED"] }"#;
    let w = Workdir::new();
    std::fs::create_dir(w.path("shared")).unwrap();
    std::fs::write(w.path("shared/hello.txt"), "hello").unwrap();
    let ran = run_in(&w, "hostile", &probes, settings);
    assert_eq!(ran.out[0], "read:5", "the granted folder is readable");
    assert!(
        ran.out[1].starts_with("denied"),
        "but not writable: {}",
        ran.out[1]
    );
    assert!(!w.path("shared/new.txt").exists());
    assert_eq!(ran.out[2], "env:granted-value");
    assert_eq!(ran.out[3], "denied", "only the named variables");
    assert!(ran.out[4].starts_with("denied"), "nothing beyond the folder");
}

#[test]
fn plugin_output_and_log_calls_go_to_the_log_with_the_operator() {
    let ran = run_hostile("hostile", &["print", "log"], "");
    assert_eq!(ran.out, ["printed", "logged"]);
    let warning = ran
        .stderr
        .lines()
        .find(|l| l.contains("hostile warns through the log import"))
        .unwrap_or_else(|| panic!("no log line in:\n{}", ran.stderr));
    assert!(
        warning.contains("WARN") && warning.contains("operator=hostile"),
        "{warning}"
    );
    for stream in ["stdout", "stderr"] {
        let line = ran
            .stderr
            .lines()
            .find(|l| l.contains(&format!("hostile says hello on {stream}")))
            .unwrap_or_else(|| panic!("no {stream} line in:\n{}", ran.stderr));
        assert!(
            line.contains("operator=hostile") && line.contains(&format!("stream=\"{stream}\"")),
            "{line}"
        );
    }
}

#[test]
fn a_call_writing_gigabytes_of_state_fails_alone_within_the_memory_limit() {
    let ran = run_hostile(
        "hostile-state",
        &["a", "state-bomb", "b"],
        // The memory limit must stop the call, however slow the machine:
        // a deadline far beyond the few milliseconds 16 MiB take.
        "memory_limit_mb = 16\ncall = \"record\"\ntimeout = \"30s\"",
    );
    assert_eq!(ran.out, ["1", "2"], "the other records are counted");
    assert_eq!(ran.dead.len(), 1, "{:?}", ran.dead);
    let (value, reason) = &ran.dead[0];
    assert_eq!(value, "state-bomb");
    assert!(reason.contains("wrote more than 16 MiB of state"), "{reason}");
}

#[test]
fn a_plugin_flooding_its_log_gets_100_lines_a_call_and_the_rest_counted() {
    // One call per record: the second call has a budget of its own.
    let ran = run_hostile("hostile", &["log-flood", "log"], "call = \"record\"");
    assert_eq!(ran.out, ["flooded", "logged"]);
    let flooded = ran
        .stderr
        .lines()
        .filter(|l| l.contains("hostile floods the log"))
        .count();
    assert_eq!(flooded, 100, "lines of the flooding call");
    let dropped = ran
        .stderr
        .lines()
        .find(|l| l.contains("plugin log lines past 100 per call were dropped"))
        .unwrap_or_else(|| panic!("no drop warning in:\n{}", ran.stderr));
    assert!(
        dropped.contains("dropped=9900") && dropped.contains("operator=hostile"),
        "{dropped}"
    );
    // The next call logs again.
    assert!(ran.stderr.contains("hostile warns through the log import"));
}

#[test]
fn an_enormous_output_is_refused_for_its_record_only() {
    let ran = run_hostile("hostile-flood", &["a", "flood:3", "flood:200000", "b"], "");
    assert_eq!(ran.out, ["a", "flood:3", "flood:3", "flood:3", "b"]);
    assert_eq!(ran.dead.len(), 1);
    assert_eq!(ran.dead[0].0, "flood:200000");
    assert!(
        ran.dead[0].1.contains(
            "200000 records from one input record or timer, more than max_outputs_per_record (10000)"
        ),
        "{:?}",
        ran.dead
    );
    let lower = run_hostile("hostile-flood", &["flood:3"], "max_outputs_per_record = 2");
    assert_eq!(lower.dead.len(), 1, "the limit is the operator's");
}

#[test]
fn malformed_batches_fail_only_the_records_that_caused_them() {
    let markers = ["garbage", "short", "huge", "trailing"];
    let mut values = vec!["a"];
    for m in markers {
        values.extend([m, "x"]);
    }
    let ran = run_hostile("hostile-malformed", &values, "");
    assert_eq!(ran.out, ["a", "x", "x", "x", "x"]);
    let dead: Vec<&str> = ran.dead.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(dead, markers);
    assert!(
        ran.dead.iter().all(|(_, r)| r.contains("malformed batch")),
        "{:?}",
        ran.dead
    );
}
