//! A word count built in code with `mailer::Pipeline`: two sources (the
//! lines of a file and generated words) joined by a union, split into words
//! by a native closure, keyed by a native closure, counted by the Wasm
//! `count` plugin (sandboxed, its state kept by the host), formatted by a
//! native closure, and written to two sinks: standard output and a file.
//!
//! Usage: embedded-wordcount <text file> <count plugin (.wasm)> <output file>

use mailer::Pipeline;
use mailer::connectors::{FileFormat, FileSink, FileSource, GeneratorSource, SinkFormat, StdoutSink};
use mailer::record::Record;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [text, plugin, output] = args.as_slice() else {
        return Err("usage: embedded-wordcount <text file> <count plugin (.wasm)> <output file>".into());
    };
    let p = Pipeline::new("embedded-wordcount").batch_size(256);
    let lines = p.source(
        "lines",
        FileSource::open(text.as_ref(), FileFormat::Lines, None, None)?,
    );
    // 100 generated records, values `w0` … `w99`, each a word.
    let generated = p.source(
        "generated",
        GeneratorSource::new(Some(100), None, 0, 1, None).with_value_prefix("w"),
    );
    let words = p.union(&[&lines, &generated]).flat_map("split", |line: Record| {
        let text = String::from_utf8_lossy(&line.value).into_owned();
        text.split_whitespace()
            .map(|w| Record::new(None, w.to_lowercase(), line.timestamp))
            .collect::<Vec<_>>()
    });
    let counts = words
        .key_by(2, |word| word.value.clone())
        .reduce("count", plugin)
        .map("format", |r: Record| {
            let line = format!(
                "{}={}",
                String::from_utf8_lossy(r.key_bytes()),
                String::from_utf8_lossy(&r.value)
            );
            Record::new(r.key.clone(), line, r.timestamp)
        });
    counts.sink("screen", StdoutSink::new(SinkFormat::Value));
    counts.sink(
        "file",
        FileSink::create(output.as_ref(), SinkFormat::Value, false)?,
    );
    let report = p.run()?;
    eprintln!(
        "read {} records, wrote {} in {:.3} s",
        report.source_records,
        report.sink_records,
        report.elapsed.as_secs_f64()
    );
    Ok(())
}
