//! Graceful shutdown (C3): SIGTERM in the middle of a bounded file run stops
//! the source and drains: every record read reaches the sink.

use crate::support::*;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

#[test]
fn sigterm_drains_every_record_read_to_the_sink() {
    const LINES: usize = 200_000;
    let w = Workdir::new();
    let input: Vec<String> = (0..LINES).map(|i| format!("line-{i}")).collect();
    w.write("in.txt", &(input.join("\n") + "\n"));
    let manifest = w.manifest(
        r#"
[pipeline]
name = "drain"

[source]
type = "file"
path = "in.txt"

[[operators]]
type = "map"
plugin = "{plugin:uppercase}"

[sink]
type = "stdout"
format = "value"
"#,
    );
    let mut child = spawn_run(&manifest);
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut out = Vec::new();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    out.push(line.trim_end().to_owned());
    // Stall the sink so the run is surely mid-way, then ask it to stop.
    std::thread::sleep(Duration::from_millis(300));
    sigterm(&child);
    for l in stdout.lines() {
        out.push(l.unwrap());
    }
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(child.wait().unwrap().success(), "{err}");

    let read = finished_field(&err, "source_records") as usize;
    assert!(err.contains("drained=true"), "{err}");
    assert!(
        read > 0 && read < LINES,
        "stopped mid-way: read {read} of {LINES}"
    );
    assert_eq!(out.len(), read, "every record read reached the sink");
    let expected: Vec<String> = input[..read].iter().map(|l| l.to_uppercase()).collect();
    assert_eq!(out, expected);
}
