//! `mailer tap`: the records leaving a source or an operator of a running
//! pipeline, through the admin API; a client that stops reading holds back
//! nothing.

use crate::support::*;
use mailer::connectors::splitmix64;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// Endless generator (10 keys, at `rate`/s) -> map `case` (uppercase) ->
/// `out.txt`, admin API at `admin`.
fn manifest(w: &Workdir, admin: &str, rate: u64) -> std::path::PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "tapped"
batch_size = 64

[source]
type = "generator"
rate = {rate}
keys = 10
seed = 0
value_prefix = "Order"

[[operators]]
name = "case"
type = "map"
plugin = "{{plugin:uppercase}}"

[sink]
type = "file"
path = "out.txt"
format = "value"

[admin]
token = "${{MAILER_ADMIN_TOKEN}}"
listen = "{admin}"
"#
    ))
}

fn tap(m: &std::path::Path, args: &[&str]) -> Vec<String> {
    let out = mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .arg("tap")
        .arg(m)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).lines().map(str::to_owned).collect()
}

/// The generator's number of a value `<prefix><g>`.
fn number(value: &str, prefix: &str) -> u64 {
    value.strip_prefix(prefix).unwrap().parse().unwrap()
}

#[test]
fn a_tap_prints_exactly_the_records_leaving_an_operator_or_a_source() {
    let w = Workdir::new();
    let admin = format!("127.0.0.1:{}", free_port());
    let m = manifest(&w, &admin, 2000);
    let _run = spawn_manifest(&m);
    wait_for(&admin);

    // 25 records leaving `case`, consecutive, each exactly the generator's
    // record uppercased, then the end.
    let lines = tap(&m, &["case", "--limit", "25", "--format", "json"]);
    assert_eq!(lines.len(), 26, "{lines:#?}");
    let records: Vec<serde_json::Value> = lines[..25]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let first = number(records[0]["value"].as_str().unwrap(), "ORDER");
    for (i, r) in records.iter().enumerate() {
        let g = first + i as u64;
        assert_eq!(r["value"], format!("ORDER{g}"), "{r}");
        assert_eq!(r["key"], (splitmix64(g) % 10).to_string(), "{r}");
        assert_eq!(r["timestamp"], g, "{r}");
    }
    assert_eq!(lines[25], r#"{"end":"the limit was reached"}"#);

    // One in ten records read by the source, as text.
    let lines = tap(&m, &["source", "--limit", "5", "--sample", "1/10"]);
    assert_eq!(lines.len(), 6, "{lines:#?}");
    let mut numbers = Vec::new();
    for line in &lines[..5] {
        let fields: Vec<&str> = line.split(' ').collect();
        let g = number(fields[2], "Order");
        assert_eq!(fields[0], format!("ts={g}"), "{line}");
        assert_eq!(fields[1], format!("key={}", splitmix64(g) % 10), "{line}");
        numbers.push(g);
    }
    let steps: Vec<u64> = numbers.windows(2).map(|p| p[1] - p[0]).collect();
    assert_eq!(steps, vec![10; 4], "{lines:#?}");
    assert_eq!(lines[5], "# end: the limit was reached");

    // Names that are no tap point, and bad samples, are refused clearly.
    let out = mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .args(["tap", m.to_str().unwrap(), "cse"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no source or operator is named `cse`; tap one of: case, source"),
        "{}",
        stderr(&out)
    );
    let out = run(&["tap", m.to_str().unwrap(), "case", "--sample", "1/0"]);
    assert!(stderr(&out).contains("`1/0` is no sample"), "{}", stderr(&out));
}

#[test]
fn a_tap_that_stops_reading_drops_records_and_stalls_nothing() {
    let w = Workdir::new();
    let admin = format!("127.0.0.1:{}", free_port());
    // An endless source: the run lasts until the test stops it, so however
    // slow the machine, the pipeline still runs when the client reads again.
    let m = manifest(&w, &admin, 100_000);
    let mut pipeline = spawn_manifest(&m);
    let mut log = pipeline.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut text = String::new();
        log.read_to_string(&mut text).unwrap();
        text
    });
    wait_for(&admin);

    // A client that asks and then reads nothing until 400 000 records
    // passed (tens of MB of tap lines: more than its buffer and the
    // sockets' hold): the pipeline goes on without it.
    let mut client = std::net::TcpStream::connect(&admin).unwrap();
    write!(
        client,
        "GET /api/tap/case HTTP/1.1\r\nHost: {admin}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(180);
    let written = || std::fs::read_to_string(w.path("out.txt")).unwrap_or_default();
    while written().lines().count() < 400_000 {
        assert!(Instant::now() < deadline, "the pipeline stalled");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Once it reads again, it is told what it missed.
    client.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut seen = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    while !String::from_utf8_lossy(&seen).contains(r#"{"dropped":"#) {
        assert!(Instant::now() < deadline, "no `dropped` line");
        let n = client.read(&mut buf).unwrap();
        assert!(n > 0, "the tap ended without saying what it dropped");
        seen.extend_from_slice(&buf[..n]);
    }
    // Then it stops reading for good, and the pipeline drains when asked:
    // every record the source read is in the sink.
    sigterm(&pipeline);
    let status = pipeline.wait().unwrap();
    let log = log.join().unwrap();
    assert!(status.success(), "{log}");
    let read = finished_field(&log, "source_records");
    assert!(read >= 400_000, "{log}");
    assert_eq!(finished_field(&log, "sink_records"), read, "{log}");
    assert_eq!(w.read("out.txt").lines().count() as u64, read);
    drop(client);
}
