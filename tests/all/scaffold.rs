//! `mailer new-plugin`: each language's project passes its own test, builds
//! to a component, and that component runs as a map in a pipeline.

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

fn new_plugin(w: &Workdir, lang: &str, name: &str) -> PathBuf {
    let out = run(&[
        "new-plugin",
        "--lang",
        lang,
        "--dir",
        w.dir.path().to_str().unwrap(),
        name,
    ]);
    assert!(out.status.success(), "{lang}: {}", stderr(&out));
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

#[test]
fn a_new_rust_plugin_tests_builds_and_runs() {
    let w = Workdir::new();
    let dir = new_plugin(&w, "rust", "shout");
    // The build shares the workspace's target folder (its dependencies are
    // built there already).
    sh(&dir, "cargo test --quiet");
    sh(&dir, "cargo build --quiet --release --target wasm32-wasip2");
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| dir.join("target"), PathBuf::from);
    runs_as_a_map(&w, &target.join("wasm32-wasip2/release/shout.wasm"));
}

#[test]
fn a_new_python_plugin_tests_builds_and_runs() {
    let w = Workdir::new();
    let dir = new_plugin(&w, "python", "shout-py");
    sh(&dir, "python3 -m unittest --quiet");
    sh(&dir, "./build.sh");
    runs_as_a_map(&w, &dir.join("shout-py.wasm"));
}

#[test]
fn a_new_javascript_plugin_tests_builds_and_runs() {
    let w = Workdir::new();
    let dir = new_plugin(&w, "js", "shout-js");
    sh(&dir, "npm test --silent");
    // The toolchain `just plugins` installed, instead of `npm install`.
    std::os::unix::fs::symlink(tools().join("js/node_modules"), dir.join("node_modules")).unwrap();
    sh(&dir, "npm run build --silent");
    runs_as_a_map(&w, &dir.join("shout-js.wasm"));
}

#[test]
fn a_bad_name_or_an_existing_folder_is_refused() {
    let w = Workdir::new();
    let out = run(&["new-plugin", "--dir", w.dir.path().to_str().unwrap(), "Bad_Name"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("is not a plugin name"), "{}", stderr(&out));
    new_plugin(&w, "rust", "twice");
    let out = run(&["new-plugin", "--dir", w.dir.path().to_str().unwrap(), "twice"]);
    assert!(stderr(&out).contains("already exists"), "{}", stderr(&out));
}
