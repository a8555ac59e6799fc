//! Backpressure: a sink that cannot keep up blocks the stages before it, back
//! to the source. Memory stays bounded and nothing is dropped.

use crate::support::*;
use std::io::{BufRead, BufReader, Read};
use std::time::Duration;

#[test]
fn a_stalled_sink_bounds_memory_and_loses_nothing() {
    const N: u64 = 1_000_000;
    let w = Workdir::new();
    let manifest = w.manifest(&format!(
        r#"
[pipeline]
name = "backpressure"

[source]
type = "generator"
count = {N}

[[operators]]
type = "map"
plugin = "{{plugin:uppercase}}"

[sink]
type = "stdout"
format = "value"
"#
    ));
    let mut child = spawn_run(&manifest);
    let pid = child.id();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // The sink is writing once the first byte arrives; from then on nobody
    // reads: the pipe fills, the sink blocks, the edges fill, the source stops.
    let mut first = [0u8; 1];
    stdout.read_exact(&mut first).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let early = rss_kib(pid).unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    let late = rss_kib(pid).unwrap();
    assert!(
        late < early + 10 * 1024,
        "RSS grew from {early} KiB to {late} KiB while the sink was stalled"
    );

    let mut lines = 0u64;
    let mut line = String::from_utf8(first.to_vec()).unwrap();
    loop {
        let n = stdout.read_line(&mut line).unwrap();
        if n == 0 {
            break;
        }
        assert_eq!(
            line.trim_end(),
            lines.to_string(),
            "records arrive complete and in order"
        );
        lines += 1;
        line.clear();
    }
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(child.wait().unwrap().success(), "{err}");
    assert_eq!(lines, N, "records in = records out");
    assert_eq!(finished_field(&err, "source_records"), N);
    assert_eq!(finished_field(&err, "sink_records"), N);
}
