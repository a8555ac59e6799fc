//! Hostile plugins written as raw WebAssembly (`tests/hostile`): what no SDK
//! would let a plugin do. Whatever they try, the host stays up, its peak
//! memory stays within the bound docs/plugins.md states, and only the
//! records that set them off fail.

use crate::support::*;
use mailer_hostile::Misdeed;

/// The budget of each hostile operator's instance (`memory_limit_mb`).
const MEMORY_LIMIT_MB: u64 = 16;

/// The peak resident memory of a debug `mailer` running small pipelines,
/// with room to spare: what the bound adds plugin budgets to.
const BASELINE_MIB: u64 = 150;

/// The bound docs/plugins.md states for `instances` plugin instances:
/// the baseline plus four times `memory_limit_mb` each.
fn bound_kib(instances: u64) -> u64 {
    (BASELINE_MIB + instances * 4 * MEMORY_LIMIT_MB) << 10
}

/// A manifest running `in.txt` through one operator per misdeed (keyed by
/// value for a process plugin), failed records dead-lettered.
fn manifest(w: &Workdir, misdeeds: &[Misdeed]) -> std::path::PathBuf {
    let mut operators = String::new();
    for m in misdeeds {
        let path = m.write_to(w.dir.path()).unwrap();
        if m.world() == "process" {
            operators.push_str("[[operators]]\ntype = \"key_by\"\n\n");
        }
        operators.push_str(&format!(
            "[[operators]]\nname = \"{}\"\ntype = \"{}\"\nplugin = \"{}\"\n\
             on_error = \"dead-letter\"\nmemory_limit_mb = {MEMORY_LIMIT_MB}\ntimeout = \"5s\"\n\n",
            m.name(),
            m.world(),
            path.display()
        ));
    }
    w.manifest(&format!(
        r#"
[pipeline]
name = "raw-hostile"
batch_size = 8

[source]
type = "file"
path = "in.txt"

{operators}
[sink]
type = "file"
path = "out.txt"
format = "value"

[dead_letter]
type = "file"
path = "dead.jsonl"
format = "json"
"#
    ))
}

#[test]
fn a_table_grown_to_the_maximum_a_lying_length_and_a_log_flood_fail_only_their_records() {
    let w = Workdir::new();
    w.write("in.txt", "a\n!grow\nb\n#length\nc\n%flood\nd\n");
    let m = manifest(&w, &[Misdeed::TableGrow, Misdeed::BatchLength, Misdeed::LogFlood]);
    let (out, peak_kib) = run_with_peak_rss(&["run", m.to_str().unwrap()]);
    let stderr = stderr(&out);
    assert!(out.status.success(), "the host must stay up: {stderr}");
    assert_eq!(w.read("out.txt"), "a\nb\nc\n%flood\nd\n", "the others pass");
    let dead = dead_letters(&w, "dead.jsonl");
    let values: Vec<&str> = dead.iter().map(|(v, _)| v.as_str()).collect();
    assert_eq!(values, ["!grow", "#length"], "{dead:?}");
    assert!(
        dead[0].1.contains("4294967296 elements of table") && dead[0].1.contains("memory_limit_mb"),
        "{dead:?}"
    );
    assert!(dead[1].1.contains("out of bounds"), "{dead:?}");
    assert!(
        stderr.contains("dropped=99900") && stderr.contains("operator=log-flood"),
        "a flood is cut at 100 lines and the rest counted:\n{stderr}"
    );
    eprintln!("peak RSS {peak_kib} KiB");
    assert!(
        peak_kib < bound_kib(3),
        "peak RSS {peak_kib} KiB, bound {} KiB",
        bound_kib(3)
    );
}

#[test]
fn components_creating_many_instances_or_memories_are_refused_at_start() {
    for (misdeed, cause) in [
        (Misdeed::ManyInstances, "instance count too high"),
        (Misdeed::ManyMemories, "memory_limit_mb"),
    ] {
        let w = Workdir::new();
        w.write("in.txt", "a\n");
        let m = manifest(&w, &[misdeed]);
        let (out, peak_kib) = run_with_peak_rss(&["run", m.to_str().unwrap()]);
        let stderr = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}: a clear refusal: {stderr}",
            misdeed.name()
        );
        assert!(stderr.contains(cause), "{}: {stderr}", misdeed.name());
        eprintln!("{}: peak RSS {peak_kib} KiB", misdeed.name());
        assert!(
            peak_kib < bound_kib(1),
            "{}: peak RSS {peak_kib} KiB",
            misdeed.name()
        );
    }
}

#[test]
fn a_plugin_writing_state_in_an_endless_loop_fails_its_record_within_the_bound() {
    let w = Workdir::new();
    w.write("in.txt", "a\n$loop\nb\n");
    let m = manifest(&w, &[Misdeed::StateLoop]);
    let (out, peak_kib) = run_with_peak_rss(&["run", m.to_str().unwrap()]);
    let stderr = stderr(&out);
    assert!(out.status.success(), "the host must stay up: {stderr}");
    let dead = dead_letters(&w, "dead.jsonl");
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].0, "$loop");
    assert!(dead[0].1.contains("wrote more than 16 MiB of state"), "{dead:?}");
    assert_eq!(finished_field(&stderr, "source_records"), 3, "{stderr}");
    assert!(
        peak_kib < bound_kib(1),
        "peak RSS {peak_kib} KiB, bound {} KiB",
        bound_kib(1)
    );
}
