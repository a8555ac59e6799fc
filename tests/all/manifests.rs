//! Malformed manifests: each gives its own error, located at file:line:col,
//! saying what is wrong and what was expected.

use crate::support::*;
use mailer::manifest::Manifest;
use mailer::plugin::PluginEngine;

const VALID: &str = r#"[pipeline]
name = "m"

[source]
type = "generator"
count = 10

[[operators]]
name = "up"
type = "map"
plugin = "{plugin:uppercase}"

[sink]
type = "stdout"
"#;

/// Loads and plans `text` as `bad.toml` in a temp folder; the error, as the
/// CLI prints it, with the folder stripped.
fn error_of(text: &str) -> String {
    let w = Workdir::new();
    w.write("garbage.wasm", "not a component");
    let path = w.manifest(text);
    let env = |name: &str| (name == "DATA_DIR").then(|| w.dir.path().display().to_string());
    let text = std::fs::read_to_string(&path).unwrap();
    let bad = w.path("bad.toml");
    let result = Manifest::parse(&bad, text, env).and_then(|m| {
        let engine = PluginEngine::new().unwrap();
        mailer::plan::build(&m, &engine).map(|_| ())
    });
    let err = result.expect_err("the manifest must be refused").to_string();
    err.replace(&format!("{}/", w.dir.path().display()), "")
}

fn with(find: &str, replace: &str) -> String {
    assert!(VALID.contains(find), "{find:?} not in the valid manifest");
    VALID.replacen(find, replace, 1)
}

#[test]
fn the_valid_manifest_is_accepted() {
    let w = Workdir::new();
    let path = w.manifest(VALID);
    let out = run(&["validate", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn each_malformed_manifest_gets_its_own_located_error() {
    let up_plugin = "plugin = \"{plugin:uppercase}\"";
    let mut cases: Vec<(String, &str)> = vec![
        (with("name = \"m\"", "name = \"m"), "bad.toml:2:"),
        (
            with("[pipeline]", "[pipelin]"),
            "bad.toml:1:2: unknown field `pipelin`, expected one of",
        ),
        (
            with("name = \"m\"", "name = \"m\"\nnmae = 1"),
            "bad.toml:3:1: unknown field `nmae`, expected one of `name`, `edge_capacity`",
        ),
        (
            with("name = \"m\"", "edge_capacity = 5"),
            "bad.toml:1:1: missing field `name`",
        ),
        (
            with("name = \"m\"", "name = \"m\"\nedge_capacity = \"big\""),
            "bad.toml:3:17: invalid type: string \"big\", expected usize",
        ),
        (
            with("type = \"generator\"", "type = \"kafkaa\""),
            "unknown variant `kafkaa`, expected one of `generator`, `file`, `kafka`",
        ),
        (
            with(up_plugin, "plugn = \"x.wasm\""),
            "unknown field `plugn`, expected one of `name`, `plugin`",
        ),
        (with(up_plugin, ""), "missing field `plugin`"),
        (
            with(up_plugin, &format!("{up_plugin}\ntimeout = \"soon\"")),
            "bad.toml:12:11: invalid value: string \"soon\", expected a duration",
        ),
        (
            with(up_plugin, "plugin = \"nope.wasm\""),
            "bad.toml:11:1: plugin file `nope.wasm` (`nope.wasm`) does not exist; build it first (`./build.sh` or `npm run build` in a Python or JavaScript plugin's project, `cargo build --release --target wasm32-wasip2` in a Rust one), or correct the path (a relative path is read from the manifest's folder)",
        ),
        (
            with(up_plugin, "plugin = \"{plugin:count}\""),
            "bad.toml:11:1: plugin `",
        ),
        (
            with(up_plugin, "plugin = \"garbage.wasm\""),
            "bad.toml:11:1: plugin `garbage.wasm` is not a valid WebAssembly component",
        ),
        (
            with("name = \"m\"", "name = \"m\"\nedge_capacity = 0"),
            "bad.toml:3:1: edge_capacity must be at least 1 (records)",
        ),
        (
            with("name = \"m\"", "name = \"m\"\nbatch_size = 0"),
            "bad.toml:3:1: batch_size 0 is out of range: expected 1 to 65536 records",
        ),
        (
            with(
                "name = \"m\"",
                "name = \"m\"\nedge_capacity = 100\nbatch_size = 200",
            ),
            "bad.toml:4:1: batch_size 200 is larger than edge_capacity 100",
        ),
        (
            with("[sink]", "[checkpoint]\nkeep = 0\n\n[sink]"),
            "bad.toml:14:1: keep must be at least 1",
        ),
        (
            with(
                "[sink]",
                "[state]\nbackend = \"rocksdb\"\ncache_mb = 70000\n\n[sink]",
            ),
            "bad.toml:15:1: cache_mb 70000 is out of range: expected 0 (no cache) to 65536",
        ),
        (
            with(
                "[sink]",
                "[state]\nbackend = \"rocksdb\"\nblock_cache_mb = 0\n\n[sink]",
            ),
            "bad.toml:15:1: block_cache_mb 0 is out of range: expected 1 to 65536",
        ),
        (
            with("name = \"m\"", "name = \"my pipeline\""),
            "bad.toml:2:1: pipeline name `my pipeline` is invalid",
        ),
        (
            with("type = \"map\"", "type = \"reduce\""),
            "bad.toml:10:1: `reduce` needs a keyed stream: add an operator with `type = \"key_by\"` before it",
        ),
        (
            with(
                "[sink]",
                "[[operators]]\ntype = \"key_by\"\nparallelism = 0\n\n[sink]",
            ),
            "bad.toml:15:1: key_by parallelism 0 is out of range: expected 1 to max_parallelism (128)",
        ),
        (
            with("[sink]", "[[operators]]\ntype = \"key_by\"\n\n[sink]"),
            "bad.toml:14:1: `key_by` is the last operator",
        ),
        (
            with(
                "[[operators]]",
                "[[operators]]\ntype = \"key_by\"\n\n[[operators]]\nparallelism = 2",
            ),
            "bad.toml:12:1: operators after `key_by` run on its workers",
        ),
        (
            with(up_plugin, &format!("{up_plugin}\non_error = \"dead-letter\"")),
            "bad.toml:12:1: `on_error = \"dead-letter\"` needs a `[dead_letter]` sink",
        ),
        (
            with(up_plugin, &format!("{up_plugin}\non_error = \"ignore\"")),
            "bad.toml:12:12: unknown variant `ignore`, expected one of `fail`, `skip`, `dead-letter`",
        ),
        (
            with(
                "[sink]",
                &format!("[[operators]]\nname = \"up\"\ntype = \"map\"\n{up_plugin}\n\n[sink]"),
            ),
            "bad.toml:14:1: operator name `up` is used twice",
        ),
        (
            with(
                "type = \"generator\"\ncount = 10",
                "type = \"file\"\npath = \"${DATA_DIR}/missing.txt\"",
            ),
            "bad.toml:6:1: source file `${DATA_DIR}/missing.txt` does not exist",
        ),
        (
            with(
                "type = \"generator\"\ncount = 10",
                "type = \"file\"\npath = \"${NOT_SET}/in.txt\"",
            ),
            "bad.toml:6:1: environment variable `NOT_SET` is not set",
        ),
        (
            with("count = 10", "count = 10\nkeys = 0"),
            "bad.toml:7:1: generator `keys` must be at least 1",
        ),
        (
            with(
                "type = \"stdout\"",
                "type = \"file\"\npath = \"no/such/dir/out.txt\"",
            ),
            "bad.toml:15:1: the folder of sink file `no/such/dir/out.txt` (`no/such/dir`) does not exist",
        ),
    ];
    let builtin = |op: &str| with("[sink]", &format!("[[operators]]\n{op}\n\n[sink]"));
    cases.extend([
        (builtin("type = \"key_by\"\n\n[[operators]]\ntype = \"window\"\nwindow = \"tumbling\""), "bad.toml:18:1: a tumbling window needs `size` (e.g. \"1m\")"),
        (builtin("type = \"key_by\"\n\n[[operators]]\ntype = \"window\"\nwindow = \"session\"\ngap = \"1s\"\nsize = \"1m\""), "bad.toml:20:1: `size` does not apply to a session window"),
        (builtin("type = \"field_filter\"\nfield = \"a\"\nop = \"regex\"\nvalue = \"(\""), "bad.toml:17:1: invalid regex `(`"),
        (builtin("type = \"aggregate\""), "bad.toml:14:1: `aggregate` needs a keyed stream"),
        (builtin("type = \"sample\"\nevery = 0"), "bad.toml:15:1: `every` is 0: keep 1 record in how many?"),
        (builtin("type = \"process\"\nplugin = \"{plugin:card-declines}\""), "bad.toml:14:1: `process` needs a keyed stream"),
        (
            with(up_plugin, &format!("{up_plugin}\nstate_ttl = {{ n = \"1s\" }}")),
            "bad.toml:12:1: `state_ttl` is for `process` and `co_process` operators",
        ),
        (
            builtin("type = \"key_by\"\n\n[[operators]]\ntype = \"process\"\nplugin = \"{plugin:card-declines}\"\nstate_ttl = { declines = \"0s\" }"),
            "bad.toml:19:1: the time-to-live of state `declines` is zero",
        ),
        (
            builtin("type = \"key_by\"\n\n[[operators]]\ntype = \"window\"\nwindow = \"tumbling\"\nsize = \"1m\"\nplugin = \"{plugin:bench-count-sum}\"\naggregates = [\"sum\"]"),
            "a window with a `plugin` computes its result in the plugin: remove `aggregates`",
        ),
        (
            builtin("type = \"key_by\"\n\n[[operators]]\ntype = \"window\"\nwindow = \"tumbling\"\nsize = \"1m\"\nplugin = \"{plugin:uppercase}\""),
            "implements the `map` world, but operator `window` is a `window` operator",
        ),
    ]);
    assert!(cases.len() >= 15);
    let mut seen = std::collections::HashSet::new();
    for (text, expected) in &cases {
        let err = error_of(text);
        assert!(err.starts_with("bad.toml:"), "not located: {err}");
        assert!(
            err.contains(expected),
            "expected {expected:?}\n     got {err:?}\nin:\n{text}"
        );
        assert!(seen.insert(err.clone()), "two cases gave the same error: {err}");
    }
}

/// A typo that would do nothing is not an error, but it is not silent:
/// `validate` warns of a `state_ttl` name the plugin never uses and of a
/// `project` field no record of the file has, and a run counts and warns
/// of the field too.
#[test]
fn fields_and_state_names_that_match_nothing_are_warned_of() {
    let w = Workdir::new();
    let lines: String = (0..20)
        .map(|i| {
            let card = i % 3;
            format!(
                "{{\"card\":\"c{card}\",\"status\":\"declined\",\"amount\":{i},\"ts\":{}}}\n",
                i * 1000
            )
        })
        .collect();
    w.write("declines.jsonl", &lines);
    let path = w.manifest(
        r#"
[pipeline]
name = "typos"

[source]
type = "file"
path = "declines.jsonl"
format = "json_lines"
timestamp_field = "ts"

[[operators]]
name = "slim"
type = "project"
fields = ["card", "status", "amuont"]

[[operators]]
type = "key_by"
field = "card"

[[operators]]
name = "flag"
type = "process"
plugin = "{plugin:card-declines}"
state_ttl = { declines = "1h", flaged = "1h" }

[sink]
type = "file"
path = "out.txt"
"#,
    );
    let out = run(&["validate", path.to_str().unwrap()]);
    assert!(out.status.success(), "warnings are no errors: {}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning: operator `flag`: `state_ttl` names `flaged`, a state its plugin never uses (it uses `declines`, `flagged`)"),
        "{err}"
    );
    assert!(!err.contains("names `declines`"), "{err}");
    assert!(
        err.contains("warning: operator `slim`: none of the first 20 records of")
            && err.contains("has the field `amuont`"),
        "{err}"
    );
    assert!(!err.contains("field `card`"), "{err}");

    let out = run(&["run", path.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    assert!(log.contains("state_ttl` names `flaged`"), "{log}");
    assert!(
        log.contains("no record read so far has these fields") && log.contains("`amuont`"),
        "{log}"
    );
}

#[test]
fn a_plugin_of_the_wrong_world_is_refused_before_the_pipeline_starts() {
    let w = Workdir::new();
    let path = w.manifest(&VALID.replace("uppercase", "count"));
    for command in ["validate", "run"] {
        let out = run(&[command, path.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains("implements the `reduce` world, but operator `up` is a `map` operator"),
            "{err}"
        );
        assert!(err.contains("pipeline.toml:11:1: "), "{err}");
        assert!(!err.contains("pipeline started"), "{err}");
    }
}

#[test]
fn secrets_never_appear_in_errors_or_describe() {
    let w = Workdir::new();
    w.write("in.txt", "x\n");
    let path = w.manifest(
        r#"[pipeline]
name = "s"

[source]
type = "file"
path = "${SECRET_DIR}/in.txt"

[sink]
type = "file"
path = "${SECRET_DIR}/missing/out.txt"
"#,
    );
    let secret = w.dir.path().display().to_string();
    let out = mailer()
        .env("SECRET_DIR", &secret)
        .args(["validate", path.to_str().unwrap()])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(
        err.contains("the folder of sink file `${SECRET_DIR}/missing/out.txt`"),
        "{err}"
    );
    assert!(
        !err.replace(path.to_str().unwrap(), "").contains(&secret),
        "{err}"
    );
}

/// A `sample` in a whole run keeps exactly the records its hash picks (on
/// two workers, out of a union of two files), each once.
#[test]
fn a_sample_keeps_exactly_the_records_its_hash_picks() {
    use mailer::operators::sample::keeps;
    use mailer::record::Record;
    let w = Workdir::new();
    let mut lines = Vec::new();
    for file in ["a", "b"] {
        let text: String = (0..2_000)
            .map(|i| format!("{{\"k\":\"{file}{}\",\"i\":{i}}}\n", i % 13))
            .collect();
        w.write(&format!("{file}.jsonl"), &text);
        lines.extend(text.lines().map(str::to_owned));
    }
    let m = w.manifest(
        r#"
[pipeline]
name = "sampled"

[[sources]]
name = "a"
type = "file"
path = "a.jsonl"
format = "json_lines"
key_field = "k"

[[sources]]
name = "b"
type = "file"
path = "b.jsonl"
format = "json_lines"
key_field = "k"

[[operators]]
type = "sample"
inputs = ["a", "b"]
every = 7
seed = 3
parallelism = 2

[sink]
type = "file"
path = "out.txt"
"#,
    );
    run_to_end(&m, &[]);
    let mut expected: Vec<String> = lines
        .iter()
        .filter_map(|line| {
            let doc: serde_json::Value = serde_json::from_str(line).unwrap();
            let key = doc["k"].as_str().unwrap().to_owned();
            let record = Record::new(Some(key.clone().into()), line.clone(), 0);
            keeps(&record, 7, 3).then(|| format!("{key}\t{line}"))
        })
        .collect();
    expected.sort();
    let out = w.read("out.txt");
    let mut got: Vec<&str> = out.lines().collect();
    got.sort();
    assert!(
        (4_000 / 7 * 8 / 10..4_000 / 7 * 12 / 10).contains(&expected.len()),
        "the model keeps {} of 4000",
        expected.len()
    );
    assert_eq!(got, expected);
}

/// A `${VAR}` in the plugin of a branch is filled from the environment
/// like every other (it was passed on as written), and an unset one is
/// refused naming the variable.
#[test]
fn a_branch_plugin_path_may_come_from_the_environment() {
    let w = Workdir::new();
    let path = w.manifest(
        r#"[pipeline]
name = "v"

[source]
type = "generator"
count = 10

[[operators]]
name = "route"
type = "branch"

[[operators.branches]]
name = "long"
plugin = "${BRANCH_PLUGIN}"

[[sinks]]
name = "long"
input = "route.long"
type = "stdout"

[[sinks]]
name = "rest"
input = "route.default"
type = "blackhole"
"#,
    );
    let validate = |value: Option<&std::path::Path>| {
        let mut command = mailer();
        match value {
            Some(v) => command.env("BRANCH_PLUGIN", v),
            None => command.env_remove("BRANCH_PLUGIN"),
        };
        command
            .args(["validate", path.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = validate(Some(&plugin("drop-short")));
    assert!(out.status.success(), "{}", stderr(&out));
    let out = validate(None);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("BRANCH_PLUGIN"), "{}", stderr(&out));
}
