//! `mailer replay`: dead letters fed back into the operator that failed
//! them, once a fix runs there, give exactly the outputs the failures kept
//! from the sinks; what fails again goes to a new dead-letter file.

use crate::support::*;

/// Lines `line-0` … `line-59`, every fifth one `bad-<i>`.
fn input() -> Vec<String> {
    (0..60)
        .map(|i| match i % 5 {
            0 => format!("bad-{i}"),
            _ => format!("line-{i}"),
        })
        .collect()
}

/// The pipeline: the lines -> map `check` running `check` (dead-lettering
/// what it fails on) -> map `shout` (upper case) -> `out.txt`; the dead
/// letters in `dead-letters.jsonl`.
fn pipeline(w: &Workdir, check: &str) -> std::path::PathBuf {
    let file = "type = \"file\"\npath = \"dead-letters.jsonl\"\nformat = \"json\"";
    pipeline_with(w, check, file)
}

/// The pipeline with `dead_letter` as its `[dead_letter]` table's body.
fn pipeline_with(w: &Workdir, check: &str, dead_letter: &str) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "replayed"
batch_size = 8

[source]
type = "file"
path = "in.txt"

[[operators]]
name = "check"
type = "map"
plugin = "{{plugin:{check}}}"
on_error = "dead-letter"

[[operators]]
name = "shout"
type = "map"
plugin = "{{plugin:uppercase}}"

[sink]
type = "file"
path = "out.txt"
format = "value"

[dead_letter]
{dead_letter}
"#
    ))
}

fn sorted_lines(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    lines.sort();
    lines
}

#[test]
fn replayed_dead_letters_give_exactly_the_missing_outputs() {
    let w = Workdir::new();
    w.write("in.txt", &(input().join("\n") + "\n"));
    // `test-error` fails on every `bad` record: 12 dead letters.
    let m = pipeline(&w, "test-error");
    run_to_end(&m, &[]);
    assert_eq!(w.read("out.txt").lines().count(), 48);
    assert_eq!(w.read("dead-letters.jsonl").lines().count(), 12);

    // Replayed while the bug is still there: every one fails again, in the
    // same form (to be replayed later), and the sink gets nothing.
    let replay = |extra: &[&str]| {
        let mut args = vec![
            "replay",
            m.to_str().unwrap(),
            "--dead-letters",
            "dead-letters.jsonl",
        ];
        args.extend(extra);
        mailer().current_dir(w.dir.path()).args(&args).output().unwrap()
    };
    let out = replay(&["--failed-again", "again.jsonl"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("replayed 12 dead letter(s) into operator `check`: 0 record(s) written to the sinks, 12 failed again"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        sorted_lines(&w.read("again.jsonl")),
        sorted_lines(&w.read("dead-letters.jsonl"))
    );
    assert_eq!(w.read("out.txt").lines().count(), 48, "nothing written");

    // The fix (`lowercase` keeps these lines as they are): the replay
    // writes exactly what the failures kept from the sink, through `shout`.
    pipeline(&w, "lowercase");
    let out = replay(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("12 record(s) written to the sinks, 0 failed again (in"),
        "{}",
        stdout(&out)
    );
    assert_eq!(w.read("dead-letters.failed-again.jsonl"), "");
    let expected: Vec<String> = input().iter().map(|l| l.to_uppercase()).collect();
    let mut expected_sorted = expected.clone();
    expected_sorted.sort();
    assert_eq!(
        sorted_lines(&w.read("out.txt")),
        expected_sorted,
        "every line once: none missing, none twice"
    );
}

#[test]
fn dead_letters_in_a_kafka_topic_replay_too() {
    let w = Workdir::new();
    w.write("in.txt", &(input().join("\n") + "\n"));
    let topic = crate::kafka::unique_topic("replay-dead-letters");
    crate::kafka::create_topic(&topic, 2);
    let kafka =
        format!("type = \"kafka\"\nbootstrap_servers = \"${{KAFKA_BOOTSTRAP}}\"\ntopic = \"{topic}\"");
    let m = pipeline_with(&w, "test-error", &kafka);
    run_to_end(&m, &[]);
    assert_eq!(crate::kafka::consume_all(&topic, 2).len(), 12);
    pipeline_with(&w, "lowercase", &kafka);
    let replay = |args: &[&str]| {
        let dead_letters = format!("kafka:{topic}");
        let mut all = vec!["replay", m.to_str().unwrap(), "--dead-letters", &dead_letters];
        all.extend(args);
        mailer().current_dir(w.dir.path()).args(&all).output().unwrap()
    };
    let out = replay(&[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("with --operator"), "{}", stderr(&out));
    let out = replay(&["--operator", "check"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("replayed 12 dead letter(s) into operator `check`: 12 record(s) written to the sinks, 0 failed again"),
        "{}",
        stdout(&out)
    );
    let mut expected: Vec<String> = input().iter().map(|l| l.to_uppercase()).collect();
    expected.sort();
    assert_eq!(sorted_lines(&w.read("out.txt")), expected);
}

#[test]
fn a_replay_that_cannot_be_right_is_refused_with_the_reason() {
    let w = Workdir::new();
    w.write("in.txt", "bad-1\nline-2\n");
    let m = pipeline(&w, "test-error");
    run_to_end(&m, &[]);
    let refused = |args: &[&str]| {
        let mut all = vec![
            "replay",
            m.to_str().unwrap(),
            "--dead-letters",
            "dead-letters.jsonl",
        ];
        all.extend(args);
        let out = mailer().current_dir(w.dir.path()).args(&all).output().unwrap();
        assert!(!out.status.success());
        stderr(&out)
    };
    let err = refused(&["--operator", "nope"]);
    assert!(
        err.contains(
            "cannot replay into operator `nope`: the pipeline has no such operator (it has `check`, `shout`)"
        ),
        "{err}"
    );
    // An operator whose way to the sinks keeps state: a replay would start
    // it empty.
    let keyed = w.manifest_as(
        "keyed.toml",
        &std::fs::read_to_string(&m).unwrap().replace(
            "[[operators]]\nname = \"shout\"",
            "[[operators]]\ntype = \"key_by\"\n\n[[operators]]\nname = \"counts\"\ntype = \"reduce\"\nplugin = \"{plugin:count}\"\n\n[[operators]]\nname = \"shout\"",
        ),
    );
    let out = mailer()
        .current_dir(w.dir.path())
        .args([
            "replay",
            keyed.to_str().unwrap(),
            "--dead-letters",
            "dead-letters.jsonl",
        ])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains(
            "cannot replay into operator `check`: operator `counts` on its way to the sinks keeps keyed state"
        ),
        "{}",
        stderr(&out)
    );
    // Dead letters of two operators: which one is asked for.
    let mut text = w.read("dead-letters.jsonl");
    text.push_str(&text.replace("\"mailer.operator\":\"check\"", "\"mailer.operator\":\"shout\""));
    w.write("two.jsonl", &text);
    let out = mailer()
        .current_dir(w.dir.path())
        .args(["replay", m.to_str().unwrap(), "--dead-letters", "two.jsonl"])
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("name several operators: `check` (1), `shout` (1); choose one with --operator"),
        "{}",
        stderr(&out)
    );
}
