//! The admin API of a running pipeline: a bearer token on every request,
//! loopback only by default, plugin swaps through it (refused when the new
//! version does not fit, the pipeline running on unaffected).

use crate::support::*;
use std::time::{Duration, Instant};

/// Starts an endless generator (10k records/s) -> `uppercase` map -> file
/// pipeline with the admin API at `listen` (its default when `None`).
fn start(w: &Workdir, listen: Option<&str>) -> Running {
    start_with(w, listen, "{plugin:uppercase}")
}

fn start_with(w: &Workdir, listen: Option<&str>, plugin: &str) -> Running {
    spawn_manifest(&w.manifest(&case_pipeline(listen, plugin)))
}

/// Generator -> map `case` running `plugin` -> `out.txt` (values only), with
/// the admin API at `listen` (its default when `None`).
fn case_pipeline(listen: Option<&str>, plugin: &str) -> String {
    let listen = listen.map_or(String::new(), |l| format!("listen = \"{l}\""));
    format!(
        r#"
[pipeline]
name = "admin"
batch_size = 256

[source]
type = "generator"
rate = 10000
value_prefix = "Order"

[[operators]]
name = "case"
type = "map"
plugin = "{plugin}"

[sink]
type = "file"
path = "out.txt"
format = "value"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
{listen}
"#
    )
}

fn post(url: &str, content_type: &str, body: &[u8]) -> (u16, serde_json::Value) {
    let mut res = agent()
        .post(url)
        .header("Authorization", &format!("Bearer {TOKEN}"))
        .header("Content-Type", content_type)
        .send(body)
        .unwrap();
    (
        res.status().as_u16(),
        res.body_mut().read_json().unwrap_or_default(),
    )
}

#[test]
fn swaps_through_the_api_need_the_token_and_switch_once() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = start(&w, Some(&addr));
    wait_for(&addr);
    let api = format!("http://{addr}/api");

    assert_eq!(get(&format!("{api}/operators"), None).0, 401, "no token");
    assert_eq!(
        get(&format!("{api}/operators"), Some("wrong-token-0123456789")).0,
        401,
        "wrong token"
    );
    let (status, operators) = get(&format!("{api}/operators"), Some(TOKEN));
    assert_eq!(status, 200);
    assert_eq!(operators[0]["name"], "case");
    assert_eq!(operators[0]["world"], "map");
    assert_eq!(operators[0]["plugin"]["name"], "uppercase");
    assert_eq!(
        operators[0]["plugin"]["version"], "0.1.0",
        "from the plugin's Cargo.toml"
    );
    let (_, pipelines) = get(&format!("{api}/pipelines"), Some(TOKEN));
    assert_eq!(pipelines[0]["name"], "admin", "{pipelines}");
    assert_eq!(pipelines[0]["operators"], operators);

    // A plugin of another world is refused; nothing changes.
    let other_world = std::fs::read(plugin("drop-short")).unwrap();
    let (status, refused) = post(
        &format!("{api}/operators/case/swap"),
        "application/wasm",
        &other_world,
    );
    assert_eq!(status, 422, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("world"), "{refused}");
    let (status, _) = post(
        &format!("{api}/operators/nope/swap"),
        "application/wasm",
        &other_world,
    );
    assert_eq!(status, 404);
    // The API reads no file of the host, and says nothing of any.
    for path in ["/etc/passwd", "/dev/zero", "/nonexistent"] {
        let body = serde_json::json!({ "path": path }).to_string();
        let (status, refused) = post(
            &format!("{api}/operators/case/swap"),
            "application/json",
            body.as_bytes(),
        );
        assert_eq!(status, 415, "{path}: {refused}");
        let message = refused["error"].as_str().unwrap();
        assert!(!message.contains(path) && !message.contains("0x72"), "{message}");
    }

    let bytes = std::fs::read(plugin("lowercase")).unwrap();
    let (status, swap) = post(&format!("{api}/operators/case/swap"), "application/wasm", &bytes);
    assert_eq!(status, 202, "{swap}");
    let (_, history) = get(&format!("{api}/swaps"), Some(TOKEN));
    assert_eq!(history.as_array().unwrap().len(), 1, "{history}");
    assert_eq!(history[0]["to"], swap["to"]);

    std::thread::sleep(Duration::from_millis(500));
    let (_, history) = get(&format!("{api}/swaps"), Some(TOKEN));
    assert_eq!(history[0]["status"], "applied", "{history}");
    assert_eq!(history[0]["applied_workers"], history[0]["workers"], "{history}");
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    let lines: Vec<String> = w.read("out.txt").lines().map(str::to_owned).collect();
    let numbers: Vec<u64> = lines.iter().map(|l| l[5..].parse().unwrap()).collect();
    assert!(
        numbers.iter().copied().eq(0..lines.len() as u64),
        "each record once, in order"
    );
    let switch = lines
        .iter()
        .position(|l| l.starts_with("order"))
        .expect("a switch");
    assert!(switch > 0);
    assert!(lines[..switch].iter().all(|l| l.starts_with("ORDER")));
    assert!(lines[switch..].iter().all(|l| l.starts_with("order")));
    // The uploaded version is kept by digest for a restart.
    let digest = swap["to"].as_str().unwrap();
    assert!(w.path(&format!(".mailer/admin/plugins/{digest}.wasm")).is_file());
}

/// The address this machine uses to reach other hosts, if it has one.
fn outward_ip() -> Option<std::net::IpAddr> {
    let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    s.connect("192.0.2.1:9").ok()?;
    let ip = s.local_addr().ok()?.ip();
    (!ip.is_loopback() && !ip.is_unspecified()).then_some(ip)
}

#[test]
fn by_default_the_api_listens_on_loopback_only() {
    let w = Workdir::new();
    let mut child = start(&w, None);
    wait_for("127.0.0.1:9464");
    if let Some(ip) = outward_ip() {
        assert!(
            std::net::TcpStream::connect((ip, 9464)).is_err(),
            "the admin API answers on {ip}"
        );
    }
    sigterm(&child);
    assert!(child.wait().unwrap().success());
}

const COUNTED: u64 = 200_000;

/// A generator (200k records at 20k/s, 5 keys) -> key_by -> `count` reduce -> file
/// pipeline with checkpoints every `interval` and the admin API on a free
/// port; its manifest and the API's address.
fn counting(w: &Workdir, interval: &str) -> (std::path::PathBuf, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let m = w.manifest(&format!(
        r#"
[pipeline]
name = "swap-kill"
batch_size = 256

[source]
type = "generator"
count = {COUNTED}
rate = 20000
keys = 5

{KEYED_COUNT}
[sink]
type = "file"
path = "out.txt"
append = true

[checkpoint]
interval = "{interval}"
path = "checkpoints"

[admin]
listen = "{addr}"
token = "${{MAILER_ADMIN_TOKEN}}"
"#
    ));
    (m, addr)
}

fn latest(w: &Workdir) -> Option<String> {
    std::fs::read_to_string(w.path("checkpoints/LATEST")).ok()
}

/// Waits until the newest checkpoint is no longer `before`.
fn next_checkpoint(w: &Workdir, before: Option<String>) -> Option<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = latest(w);
        if now.is_some() && now != before {
            return now;
        }
        assert!(Instant::now() < deadline, "no new checkpoint");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Swaps `counts` to `count-by-ten` in a running pipeline, kills it with
/// SIGKILL (after a checkpoint recorded the swap, or before one could),
/// runs it again to its end, and returns the per-key steps of the final
/// run's lines and the sum of the final counts.
fn swap_then_kill(checkpointed: bool) -> (Vec<u64>, u64, u64) {
    let w = Workdir::new();
    let (m, addr) = counting(&w, if checkpointed { "200ms" } else { "3s" });
    let mut child = spawn_with_token(&m, &[]);
    wait_for(&addr);
    let first = next_checkpoint(&w, None);
    let bytes = std::fs::read(plugin("count-by-ten")).unwrap();
    let (status, swap) = post(
        &format!("http://{addr}/api/operators/counts/swap"),
        "application/wasm",
        &bytes,
    );
    assert_eq!(status, 202, "{swap}");
    if checkpointed {
        // Until a checkpoint records the swap.
        let mut newest = first;
        let records_swap = |id: &str| {
            let id: u64 = id.trim().parse().unwrap();
            let metadata = w.path(&format!("checkpoints/chk-{id:020}/_metadata.json"));
            std::fs::read_to_string(metadata).is_ok_and(|m| m.contains("manifest_digest"))
        };
        while !records_swap(newest.as_deref().unwrap()) {
            newest = next_checkpoint(&w, newest);
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let before_restart = w.read("out.txt").lines().count();
    let (m, _) = counting(&w, "200ms");
    let out = spawn_with_token(&m, &[]).wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("resuming from a checkpoint"),
        "{}",
        stderr(&out)
    );
    let lines = crate::checkpoints::count_lines(&w);
    // The first switch to steps of ten, in the first run's output: records
    // before it counted one each.
    let mut last: std::collections::BTreeMap<&str, u64> = Default::default();
    let mut switch = None;
    for (i, (k, c)) in lines[..before_restart].iter().enumerate() {
        let before = last.insert(k, *c).unwrap_or(0);
        if c - before == 10 && switch.is_none() {
            switch = Some(i as u64);
        }
    }
    let mut steps = Vec::new();
    let mut finals: std::collections::BTreeMap<&str, u64> = Default::default();
    for (k, c) in &lines[before_restart..] {
        if let Some(prev) = finals.insert(k, *c) {
            steps.push(c - prev);
        }
    }
    let total = finals.values().sum();
    (steps, total, switch.unwrap_or(COUNTED))
}

#[test]
fn a_restart_after_a_checkpointed_swap_runs_the_new_version_with_exact_state() {
    let (steps, total, switch) = swap_then_kill(true);
    assert!(switch < COUNTED, "the swap took effect before the kill");
    assert!(steps.iter().all(|&s| s == 10), "the restarted run counts in tens");
    assert_eq!(
        total,
        switch + 10 * (COUNTED - switch),
        "each record counted once"
    );
}

#[test]
fn a_restart_before_the_swap_was_checkpointed_runs_the_old_version_with_exact_state() {
    let (steps, total, _) = swap_then_kill(false);
    assert!(steps.iter().all(|&s| s == 1), "the restarted run counts in ones");
    assert_eq!(total, COUNTED, "each record counted once");
}

fn cli(args: &[&str]) -> serde_json::Value {
    let out = mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "mailer {args:?}: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_cli_lists_swaps_rolls_back_and_reloads() {
    let w = Workdir::new();
    std::fs::copy(plugin("uppercase"), w.path("case.wasm")).unwrap();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = start_with(&w, Some(&addr), "case.wasm");
    wait_for(&addr);
    let m = w.path("pipeline.toml");
    let m = m.to_str().unwrap();
    let pause = || std::thread::sleep(Duration::from_millis(300));

    let listed = cli(&["plugin", "list", m]);
    let operator = &listed["pipelines"][0]["operators"][0];
    assert_eq!(operator["name"], "case", "{listed}");
    assert_eq!(operator["plugin"]["name"], "uppercase", "{listed}");
    // A component of another world is refused in the user's terms: their
    // file, what fits the running operator; the store keeps nothing.
    let filter = plugin("drop-short");
    let out = mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .args(["plugin", "swap", m, "case", filter.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let refused = stderr(&out);
    assert!(
        refused.contains(&format!("`{}` implements the filter world", filter.display())),
        "{refused}"
    );
    assert!(
        refused.contains("a swap keeps the running operator's world, map: build the new version as a map plugin; to run a filter plugin instead, change the operator's `type` to `filter`"),
        "{refused}"
    );
    assert!(!refused.contains(".mailer"), "{refused}");
    let stored = || {
        std::fs::read_dir(w.path(".mailer/admin/plugins"))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    assert_eq!(stored(), 0, "the refused component is not kept");
    pause();
    let swapped = cli(&["plugin", "swap", m, "case", plugin("lowercase").to_str().unwrap()]);
    assert_eq!(stored(), 1);
    pause();
    let back = cli(&["plugin", "rollback", m, "case"]);
    assert_eq!(back["rollback"], true, "{back}");
    assert_eq!(back["to"], swapped["from"], "back to the first version");
    let previous = &cli(&["plugin", "list", m])["pipelines"][0]["operators"][0]["previous"];
    assert_eq!(previous[0]["name"], "lowercase", "{previous}");
    assert_eq!(previous[0]["rolled_back"], true, "{previous}");
    let nothing = mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .args(["plugin", "rollback", m, "case"])
        .output()
        .unwrap();
    assert!(
        stderr(&nothing).contains("nothing to roll back to"),
        "a rollback never returns to a rolled-back version: {}",
        stderr(&nothing)
    );
    pause();
    std::fs::copy(plugin("lowercase"), w.path("case.wasm")).unwrap();
    let reloaded = cli(&["plugin", "reload", m]);
    assert_eq!(reloaded.as_array().unwrap().len(), 1, "{reloaded}");
    assert_eq!(
        cli(&["plugin", "reload", m]),
        serde_json::json!([]),
        "nothing changed since"
    );
    let history = cli(&["plugin", "list", m])["swaps"].clone();
    assert_eq!(history.as_array().unwrap().len(), 3, "{history}");
    pause();
    sigterm(&child);
    assert!(child.wait().unwrap().success());
    let mut log = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut log).unwrap();
    assert_eq!(
        log.matches("plugin swap applied on every worker").count(),
        3,
        "each swap logged once applied:\n{log}"
    );

    // Upper, lower, upper, lower: one switch per swap, in order.
    let text = w.read("out.txt");
    let mut runs: Vec<bool> = Vec::new();
    for line in text.lines() {
        let upper = line.starts_with("ORDER");
        if runs.last() != Some(&upper) {
            runs.push(upper);
        }
    }
    assert_eq!(runs, [true, false, true, false]);
}

/// `GET /api/swaps/{id}` through the CLI, once the shadow compared at
/// least `compared` records.
fn shadow_after(m: &str, id: u64, compared: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let swap = cli(&["plugin", "show", m, &id.to_string()]);
        if swap["shadow"]["compared"].as_u64().unwrap_or(0) >= compared {
            return swap;
        }
        assert!(
            Instant::now() < deadline,
            "the shadow compares too little: {swap}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_shadow_reports_exactly_the_records_its_version_gets_wrong_and_is_promoted_on_request() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let mut child = start(&w, Some(&addr));
    wait_for(&addr);
    let m = w.path("pipeline.toml");
    let m = m.to_str().unwrap();
    let buggy = plugin("uppercase-mangled");
    let buggy = buggy.to_str().unwrap();

    // A version that mangles one record in a hundred, as a shadow.
    let started = cli(&["plugin", "swap", "--shadow", m, "case", buggy]);
    let id = started["id"].as_u64().unwrap();
    assert_eq!(started["shadow"]["state"], "running", "{started}");
    let swap = shadow_after(m, id, 3000);
    let shadow = &swap["shadow"];
    let (compared, mismatches) = (
        shadow["compared"].as_u64().unwrap(),
        shadow["mismatches"].as_u64().unwrap(),
    );
    assert_eq!(shadow["failures"], 0, "{shadow}");
    // The records compared are consecutive: those ending in a multiple of
    // 100 in any run of `compared` of them.
    assert!(
        mismatches == compared / 100 || mismatches == compared / 100 + 1,
        "{mismatches} mismatches of {compared}: {shadow}"
    );
    let first = shadow["first_mismatches"].as_array().unwrap();
    assert_eq!(first.len(), 20.min(mismatches as usize));
    let base: u64 = first[0]["input"]["value"].as_str().unwrap()["Order".len()..]
        .parse()
        .unwrap();
    for (i, triple) in first.iter().enumerate() {
        let n = base + 100 * i as u64;
        assert_eq!(n % 100, 0);
        assert_eq!(triple["input"]["value"], format!("Order{n}"), "{triple}");
        assert_eq!(triple["current"]["value"], format!("ORDER{n}"), "{triple}");
        let reversed: String = format!("ORDER{n}").chars().rev().collect();
        assert_eq!(triple["shadow"]["value"], reversed, "{triple}");
    }
    assert!(shadow["shadow_us_per_record"].as_f64().unwrap() > 0.0);

    // Aborted: it stops comparing; another shadow may start.
    let aborted = cli(&["plugin", "abort", m, "case"]);
    assert_eq!(aborted["shadow"]["state"], "aborted", "{aborted}");
    std::thread::sleep(Duration::from_millis(300));
    let after = cli(&["plugin", "show", m, &id.to_string()])["shadow"]["compared"].clone();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        cli(&["plugin", "show", m, &id.to_string()])["shadow"]["compared"],
        after
    );

    // Promoted: the shadow's version becomes the operator's.
    let second = cli(&[
        "plugin",
        "swap",
        "--shadow",
        "--shadow-share",
        "0.5",
        m,
        "case",
        buggy,
    ]);
    let second_id = second["id"].as_u64().unwrap();
    assert_eq!(second["shadow"]["share"], 0.5);
    shadow_after(m, second_id, 500);
    let promoted = cli(&["plugin", "promote", m, "case"]);
    assert_eq!(promoted["rollback"], false, "{promoted}");
    assert_eq!(promoted["to"], second["to"], "{promoted}");
    let show = cli(&["plugin", "show", m, &second_id.to_string()]);
    assert_eq!(show["shadow"]["state"], "promoted", "{show}");
    std::thread::sleep(Duration::from_millis(500));
    sigterm(&child);
    assert!(child.wait().unwrap().success());

    // The pipeline's output was the current version's until the promote:
    // every record once, none mangled before it, some after.
    let lines: Vec<String> = w.read("out.txt").lines().map(str::to_owned).collect();
    let switch = lines
        .iter()
        .position(|l| !l.starts_with("ORDER"))
        .expect("mangled records after the promote");
    for (n, line) in lines[..switch].iter().enumerate() {
        assert_eq!(line, &format!("ORDER{n}"));
    }
    assert!(switch as u64 > base + compared, "nothing mangled while shadowing");
}

#[test]
fn a_new_version_failing_its_probation_is_rolled_back_automatically() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    // Every value holds `bad`: `test-error` fails on each; `skip` drops them.
    let text = case_pipeline(Some(&addr), "{plugin:uppercase}")
        .replace("value_prefix = \"Order\"", "value_prefix = \"bad-\"")
        .replace("[sink]", "on_error = \"skip\"\n\n[sink]")
        + "probation_records = 200\nrollback_failure_share = 0.25\n";
    let mut child = spawn_manifest(&w.manifest(&text));
    wait_for(&addr);
    let api = format!("http://{addr}/api");
    let bytes = std::fs::read(plugin("test-error")).unwrap();
    let (status, swap) = post(&format!("{api}/operators/case/swap"), "application/wasm", &bytes);
    assert_eq!(status, 202, "{swap}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let history = loop {
        let (_, history) = get(&format!("{api}/swaps"), Some(TOKEN));
        if history.as_array().unwrap().len() == 2 {
            break history;
        }
        assert!(Instant::now() < deadline, "no automatic rollback: {history}");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(history[1]["rollback"], true, "{history}");
    assert_eq!(history[1]["automatic"], true, "{history}");
    assert_eq!(history[1]["to"], swap["from"], "back to the version before");
    std::thread::sleep(Duration::from_millis(300));
    sigterm(&child);
    assert!(child.wait().unwrap().success());

    let numbers: Vec<u64> = w
        .read("out.txt")
        .lines()
        .map(|l| l["BAD-".len()..].parse().unwrap())
        .collect();
    let last = *numbers.last().unwrap();
    let failed = last + 1 - numbers.len() as u64;
    assert!(
        failed > 50,
        "the new version failed more than the share allowed: {failed}"
    );
    assert!(failed < 2_000, "and was rolled back soon: {failed}");
    assert!(numbers.windows(2).all(|w| w[0] < w[1]), "in order, none twice");
}

#[test]
fn requests_addressed_to_another_host_are_refused_and_answers_carry_security_headers() {
    let w = Workdir::new();
    let addr = format!("127.0.0.1:{}", free_port());
    let _child = start(&w, Some(&addr));
    wait_for(&addr);
    // What a DNS-rebinding page would send: its own name, this address.
    for path in ["/", "/metrics", "/api/operators"] {
        let res = agent()
            .get(&format!("http://{addr}{path}"))
            .header("Host", "evil.example:80")
            .header("Authorization", &format!("Bearer {TOKEN}"))
            .call()
            .unwrap();
        assert_eq!(res.status().as_u16(), 421, "{path}");
    }
    let res = agent()
        .get(&format!("http://{addr}/"))
        .header("Host", &format!("localhost:{}", addr.rsplit(':').next().unwrap()))
        .call()
        .unwrap();
    assert_eq!(res.status().as_u16(), 200);
    let headers = res.headers();
    assert_eq!(headers["x-content-type-options"], "nosniff");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'self'") && csp.contains("frame-ancestors 'none'"),
        "{csp}"
    );
}
