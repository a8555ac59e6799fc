//! `mailer new-plugin`: each language's project passes its own test, builds
//! to a component, and that component runs as a map in a pipeline; a
//! project of every world passes its own test in each language, and its
//! pipeline its case (built in Rust).

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where `scripts/plugin-toolchains` put componentize-py and componentize-js.
fn tools() -> PathBuf {
    std::env::var_os("MAILER_TOOLS").map_or_else(
        || PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/mailer-tools"),
        PathBuf::from,
    )
}

/// Every world `--world` takes, and the records its project's test case
/// expects of the sink.
const WORLDS: [(&str, usize); 9] = [
    ("map", 3),
    ("filter", 3),
    ("flat-map", 6),
    ("reduce", 7),
    ("process", 3),
    ("co-process", 4),
    ("join", 7),
    ("window", 4),
    ("aggregate", 4),
];

/// `mailer new-plugin` in `w` (of `world`, or the default one); the
/// project's folder.
fn new_plugin(w: &Workdir, lang: &str, world: Option<&str>, name: &str) -> PathBuf {
    let mut args = vec![
        "new-plugin",
        "--lang",
        lang,
        "--dir",
        w.dir.path().to_str().unwrap(),
    ];
    if let Some(world) = world {
        args.extend(["--world", world]);
    }
    args.push(name);
    let out = run(&args);
    assert!(out.status.success(), "{lang} {world:?}: {}", stderr(&out));
    let dir = PathBuf::from(stdout(&out).trim());
    assert_eq!(dir, w.path(name));
    dir
}

/// Runs `cmd` in `dir` with the plugin tools on the PATH; it must succeed.
fn sh(dir: &Path, cmd: &str) {
    let path = format!(
        "{}:{}:{}",
        tools().join("python/bin").display(),
        tools().join("js/node_modules/.bin").display(),
        std::env::var("PATH").unwrap()
    );
    let out = Command::new("sh")
        .arg("-c")
        .arg(cmd)
        .current_dir(dir)
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{cmd}` in {}:\n{}\n{}",
        dir.display(),
        stdout(&out),
        stderr(&out)
    );
}

/// Runs `component` as a map over three lines; its output is upper case.
fn runs_as_a_map(w: &Workdir, component: &Path) {
    w.write("in.txt", "one\ntwo\nthree\n");
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "scaffolded"

[source]
type = "file"
path = "in.txt"

[[operators]]
type = "map"
plugin = "{}"
memory_limit_mb = 256

[sink]
type = "file"
path = "out.txt"
format = "value"
"#,
        component.display()
    ));
    let out = run(&["run", m.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(w.read("out.txt"), "ONE\nTWO\nTHREE\n");
}

/// The project's own pipeline passes its own case (`mailer test`), the
/// sink getting `records` records.
fn passes_its_case(dir: &Path, records: usize) {
    let out = mailer()
        .current_dir(dir)
        .args(["test", "pipeline.toml"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}: {}{}",
        dir.display(),
        stdout(&out),
        stderr(&out)
    );
    let count = format!("sink: {records} records");
    assert!(
        stdout(&out).contains(&count),
        "{}: {}",
        dir.display(),
        stdout(&out)
    );
}

/// Builds the Rust project in `dir`, crate `krate`, to a component; its
/// path. The build shares the workspace's target folder (its dependencies
/// are built there already), so the component is also copied where the
/// project's pipeline looks for it.
fn build_rust(dir: &Path, krate: &str) -> PathBuf {
    sh(dir, "cargo build --quiet --release --target wasm32-wasip2");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| dir.join("target"), PathBuf::from);
    let component = target.join(format!("wasm32-wasip2/release/{krate}.wasm"));
    let local = dir.join(format!("target/wasm32-wasip2/release/{krate}.wasm"));
    if local != component {
        std::fs::create_dir_all(local.parent().unwrap()).unwrap();
        std::fs::copy(&component, &local).unwrap();
    }
    component
}

#[test]
fn a_new_rust_plugin_tests_builds_and_runs() {
    let w = Workdir::new();
    // The default world is a map.
    let dir = new_plugin(&w, "rust", None, "shout");
    sh(&dir, "cargo test --quiet");
    let component = build_rust(&dir, "shout");
    runs_as_a_map(&w, &component);
    passes_its_case(&dir, 3);
}

#[test]
fn a_new_python_plugin_tests_builds_and_runs() {
    let w = Workdir::new();
    let dir = new_plugin(&w, "python", Some("map"), "shout-py");
    sh(&dir, "python3 -m unittest --quiet");
    sh(&dir, "./build.sh");
    runs_as_a_map(&w, &dir.join("shout-py.wasm"));
    passes_its_case(&dir, 3);
}

#[test]
fn a_new_javascript_plugin_tests_builds_and_runs() {
    let w = Workdir::new();
    let dir = new_plugin(&w, "js", None, "shout-js");
    sh(&dir, "npm test --silent");
    // The toolchain `just plugins` installed, instead of `npm install`.
    std::os::unix::fs::symlink(tools().join("js/node_modules"), dir.join("node_modules")).unwrap();
    sh(&dir, "npm run build --silent");
    runs_as_a_map(&w, &dir.join("shout-js.wasm"));
    passes_its_case(&dir, 3);
}

/// A project of every world passes its own tests in each language (on its
/// world's harness in Python and JavaScript). The Rust ones are also
/// built, and each one's pipeline passes its case, so every world's
/// pipeline and case are checked; building the Python and JavaScript ones
/// (up to a minute each) is left to the map tests above.
#[test]
fn a_new_plugin_of_every_world_passes_its_own_tests() {
    let w = Workdir::new();
    for (world, records) in WORLDS {
        let dir = new_plugin(&w, "python", Some(world), &format!("py-{world}"));
        sh(&dir, "python3 -m unittest --quiet");
        assert_eq!(
            std::fs::read_to_string(dir.join("world")).unwrap().trim(),
            wit_world(world)
        );
        let dir = new_plugin(&w, "js", Some(world), &format!("js-{world}"));
        sh(&dir, "node test.mjs");
        let name = format!("rs-{world}");
        let dir = new_plugin(&w, "rust", Some(world), &name);
        sh(&dir, "cargo test --quiet");
        build_rust(&dir, &name.replace('-', "_"));
        passes_its_case(&dir, records);
    }
}

/// The WIT world of `--world`'s `world`, as a Python or JavaScript project
/// names it.
fn wit_world(world: &str) -> &str {
    match world {
        "map" => "map-plugin",
        other => other,
    }
}

#[test]
fn a_bad_name_or_an_existing_folder_is_refused() {
    let w = Workdir::new();
    let out = run(&["new-plugin", "--dir", w.dir.path().to_str().unwrap(), "Bad_Name"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not a plugin name"), "{}", stderr(&out));
    new_plugin(&w, "rust", None, "twice");
    let out = run(&["new-plugin", "--dir", w.dir.path().to_str().unwrap(), "twice"]);
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
}
