//! The dashboard of a running pipeline in headless Chromium (Debian's
//! `chromium`, which `just test` installs): every stage of the plan in the
//! graph, a throughput chart that moves, nothing loaded from beyond
//! loopback. A screenshot is kept under `<target>/test-artifacts/`.

use crate::support::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Generator (10 keys) -> `case` (uppercase) -> key_by over 2 workers ->
/// `counts` -> file, with the admin server on `port`.
fn watched_pipeline(w: &Workdir, port: u16) -> PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "watched"
batch_size = 128

[source]
type = "generator"
keys = 10
rate = 20000

[[operators]]
name = "case"
type = "map"
plugin = "{{plugin:uppercase}}"

{KEYED_COUNT}

[sink]
type = "file"
path = "out.txt"
format = "value"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
listen = "127.0.0.1:{port}"
"#
    ))
}

/// Chromium, headless, allowed to resolve nothing but loopback.
fn chromium(profile: &Path) -> Command {
    assert!(
        Path::new(CHROMIUM).is_file(),
        "{CHROMIUM} is missing: `just test` installs Debian's chromium"
    );
    let mut c = Command::new(CHROMIUM);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-background-networking",
        "--disable-gpu",
        "--no-first-run",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--virtual-time-budget=5000",
    ])
    .arg(format!("--user-data-dir={}", profile.display()));
    c
}

/// The page's DOM after its script ran for a few (virtual) seconds.
fn dump_dom(profile: &Path, url: &str) -> String {
    let out = chromium(profile).arg("--dump-dom").arg(url).output().unwrap();
    assert!(out.status.success(), "chromium: {}", stderr(&out));
    stdout(&out)
}

/// The value of attribute `attr` of the element with id `id`.
fn attribute(dom: &str, id: &str, attr: &str) -> String {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no #{id} in {dom}"));
    let tag = &dom[dom[..start].rfind('<').unwrap()..];
    let tag = &tag[..tag.find('>').unwrap()];
    let from = tag
        .find(&format!("{attr}=\""))
        .unwrap_or_else(|| panic!("no {attr} in {tag}"))
        + attr.len()
        + 2;
    tag[from..from + tag[from..].find('"').unwrap()].to_owned()
}

fn artifacts() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo().join("target"), PathBuf::from);
    let dir = target.join("test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_dashboard_shows_every_stage_and_live_throughput_in_chromium() {
    let w = Workdir::new();
    let port = free_port();
    let mut child = spawn_manifest(&watched_pipeline(&w, port));
    let addr = format!("127.0.0.1:{port}");
    wait_for(&addr);
    let url = format!("http://{addr}/");
    let profile = w.path("chromium-profile");

    let first = dump_dom(&profile, &url);
    for stage in ["source", "stage-1", "keyed-2", "sink"] {
        assert!(
            first.contains(&format!("data-stage=\"{stage}\"")),
            "stage {stage} is not in the graph:\n{first}"
        );
    }
    for (from, to) in [("source", "stage-1"), ("stage-1", "keyed-2"), ("keyed-2", "sink")] {
        let edge = format!("data-from=\"{from}\" data-to=\"{to}\"");
        assert!(first.contains(&edge), "no edge {from} -> {to}");
    }
    assert!(first.contains("counts"), "the operators are named");
    assert!(first.contains("uppercase"), "the plugins are listed");
    let before: u64 = attribute(&first, "throughput", "data-records").parse().unwrap();
    let rate = attribute(&first, "throughput", "data-values");
    assert!(!rate.is_empty(), "the chart has samples");

    std::thread::sleep(std::time::Duration::from_millis(1500));
    let second = dump_dom(&profile, &url);
    let after: u64 = attribute(&second, "throughput", "data-records").parse().unwrap();
    assert!(
        after > before,
        "the throughput chart moved: {before} then {after}"
    );

    let shot = artifacts().join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(&profile)
        .arg("--window-size=1280,1000")
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(out.status.success(), "chromium: {}", stderr(&out));
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG"), "a PNG at {}", shot.display());

    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

#[test]
fn the_dashboard_loads_nothing_from_beyond_loopback() {
    let w = Workdir::new();
    let port = free_port();
    let mut child = spawn_manifest(&watched_pipeline(&w, port));
    let addr = format!("127.0.0.1:{port}");
    wait_for(&addr);
    for asset in ["", "dashboard.js", "dashboard.css"] {
        let (status, body) = get_text(&format!("http://{addr}/{asset}"), None);
        assert_eq!(status, 200, "/{asset}");
        // The only absolute address is the SVG namespace, a name that is
        // never fetched.
        let outside: Vec<&str> = body
            .match_indices("http")
            .map(|(i, _)| &body[i..(i + 40).min(body.len())])
            .filter(|u| u.starts_with("http://") || u.starts_with("https://"))
            .filter(|u| !u.starts_with("http://www.w3.org/2000/svg"))
            .collect();
        assert!(outside.is_empty(), "/{asset} refers to {outside:?}");
    }
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

/// Two generators -> union -> key_by -> `counts` -> two file sinks: every
/// source, stage and sink in the graph, each at its own place, with the
/// union's and the fan-out's edges.
#[test]
fn the_dashboard_draws_a_graph_with_a_union_and_a_fan_out() {
    let w = Workdir::new();
    let port = free_port();
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "watched-graph"
batch_size = 128

[[sources]]
name = "left"
type = "generator"
keys = 10
rate = 10000

[[sources]]
name = "right"
type = "generator"
keys = 10
rate = 10000

[[operators]]
type = "key_by"
inputs = ["left", "right"]
parallelism = 2

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[[sinks]]
name = "first"
type = "file"
path = "first.txt"

[[sinks]]
name = "second"
type = "file"
path = "second.txt"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
listen = "127.0.0.1:{port}"
"#
    ));
    let mut child = spawn_manifest(&m);
    let addr = format!("127.0.0.1:{port}");
    wait_for(&addr);
    let dom = dump_dom(&w.path("chromium-profile"), &format!("http://{addr}/"));
    let mut places = Vec::new();
    for stage in ["left", "right", "keyed-1", "first", "second"] {
        let at = dom
            .find(&format!("data-stage=\"{stage}\""))
            .unwrap_or_else(|| panic!("stage {stage} is not in the graph:\n{dom}"));
        let tag = &dom[at..at + dom[at..].find('>').unwrap()];
        places.push(tag[tag.find("transform=").unwrap()..].to_owned());
    }
    places.sort();
    places.dedup();
    assert_eq!(places.len(), 5, "two stages drawn at one place: {places:?}");
    for (from, to) in [
        ("left", "keyed-1"),
        ("right", "keyed-1"),
        ("keyed-1", "first"),
        ("keyed-1", "second"),
    ] {
        let edge = format!("data-from=\"{from}\" data-to=\"{to}\"");
        assert!(dom.contains(&edge), "no edge {from} -> {to}:\n{dom}");
    }
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}
