//! Failure policies with plugins that trap, return errors, or loop forever:
//! the host stays up, `fail` stops with a precise error, `skip` drops exactly
//! the failing records, `dead-letter` sends exactly them with their reasons.

use crate::support::*;

struct Case {
    plugin: &'static str,
    marker: &'static str,
    reason: &'static str,
}

const CASES: [Case; 3] = [
    Case {
        plugin: "test-trap",
        marker: "trap",
        reason: "plugin trapped",
    },
    Case {
        plugin: "test-error",
        marker: "bad",
        reason: "is bad",
    },
    Case {
        plugin: "test-loop",
        marker: "loop",
        reason: "exceeded its deadline of 200ms",
    },
];

fn input(marker: &str) -> Vec<String> {
    (0..40)
        .map(|i| {
            if i % 8 == 3 {
                format!("{marker}-{i}")
            } else {
                format!("ok-{i}")
            }
        })
        .collect()
}

fn run_case(case: &Case, policy: &str, call: &str) -> (Workdir, std::process::Output) {
    let w = Workdir::new();
    w.write("in.txt", &(input(case.marker).join("\n") + "\n"));
    let manifest = w.manifest(&format!(
        r#"
[pipeline]
name = "policies"
batch_size = 16

[source]
type = "file"
path = "in.txt"

[[operators]]
name = "guarded"
type = "map"
plugin = "{{plugin:{plugin}}}"
on_error = "{policy}"
call = "{call}"
timeout = "200ms"

[sink]
type = "file"
path = "out.txt"
format = "value"

[dead_letter]
type = "file"
path = "dlq.jsonl"
format = "json"
"#,
        plugin = case.plugin
    ));
    let out = run(&["run", manifest.to_str().unwrap()]);
    (w, out)
}

fn split(marker: &str) -> (Vec<String>, Vec<String>) {
    input(marker).into_iter().partition(|l| !l.contains(marker))
}

#[test]
fn skip_drops_exactly_the_failing_records() {
    for case in &CASES {
        for call in ["batch", "record"] {
            let (w, out) = run_case(case, "skip", call);
            assert!(out.status.success(), "{} {call}: {}", case.plugin, stderr(&out));
            let (good, _) = split(case.marker);
            let written: Vec<String> = w.read("out.txt").lines().map(str::to_owned).collect();
            assert_eq!(written, good, "{} {call}", case.plugin);
            assert_eq!(w.read("dlq.jsonl"), "", "{} {call}", case.plugin);
        }
    }
}

#[test]
fn dead_letter_holds_exactly_the_failing_records_with_reasons() {
    for case in &CASES {
        let (w, out) = run_case(case, "dead-letter", "batch");
        assert!(out.status.success(), "{}: {}", case.plugin, stderr(&out));
        let (good, bad) = split(case.marker);
        let written: Vec<String> = w.read("out.txt").lines().map(str::to_owned).collect();
        assert_eq!(written, good, "{}", case.plugin);
        let dead: Vec<serde_json::Value> = w
            .read("dlq.jsonl")
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let values: Vec<&str> = dead.iter().map(|d| d["value"].as_str().unwrap()).collect();
        assert_eq!(values, bad, "{}", case.plugin);
        for d in &dead {
            let reason = d["headers"]["mailer.error"].as_str().unwrap();
            assert!(reason.contains(case.reason), "{}: reason {reason:?}", case.plugin);
            assert_eq!(d["headers"]["mailer.operator"], "guarded");
        }
        assert_eq!(finished_field(&stderr(&out), "dead_lettered"), bad.len() as u64);
    }
}

#[test]
fn fail_stops_the_pipeline_naming_operator_record_and_reason() {
    for case in &CASES {
        let (w, out) = run_case(case, "fail", "batch");
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: exits with an error, not a crash",
            case.plugin
        );
        let err = stderr(&out);
        let first_bad = format!("{}-3", case.marker);
        let expected = format!("operator `guarded` failed on record value=\"{first_bad}\": ");
        assert!(err.contains(&expected), "{}: {err}", case.plugin);
        assert!(err.contains(case.reason), "{}: {err}", case.plugin);
        // Records before the failing one were delivered, none after it.
        let written: Vec<String> = w.read("out.txt").lines().map(str::to_owned).collect();
        assert!(written.len() <= 3, "{}: {written:?}", case.plugin);
        assert!(written.iter().all(|l| l.starts_with("ok-")));
    }
}
