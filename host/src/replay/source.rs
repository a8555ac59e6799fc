//! The source of a replay: the dead letters of one operator, read from a
//! file the dead-letter sink wrote (`format = "json"`) or from its Kafka
//! topic, as the records the operator failed on — their `mailer.error`
//! and `mailer.operator` headers removed.

use crate::batch::Batch;
use crate::connectors::{ConnectorError, Poll, Source};
use crate::failure::{OPERATOR_HEADER, REASON_HEADER};
use crate::pipeline_test::records_file::parse_line;
use crate::record::Record;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What a replay's source read: dead letters of its operator, and of others
/// (passed over).
#[derive(Debug, Default)]
pub struct DeadLetterCounts {
    /// Dead letters of the operator, replayed.
    pub replayed: AtomicU64,
    /// Dead letters of other operators, passed over.
    pub passed_over: AtomicU64,
}

/// The dead letters of a file the dead-letter sink wrote (`format =
/// "json"`), line by line, as they are.
pub struct DeadLetterFile {
    path: PathBuf,
    lines: std::io::Lines<std::io::BufReader<std::fs::File>>,
    line: usize,
}

impl DeadLetterFile {
    /// Reads `path`.
    pub fn open(path: &Path) -> Result<Self, ConnectorError> {
        let file = std::fs::File::open(path).map_err(|e| read_error(path, e))?;
        Ok(Self {
            path: path.to_owned(),
            lines: std::io::BufReader::new(file).lines(),
            line: 0,
        })
    }
}

impl Source for DeadLetterFile {
    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        let mut batch = Vec::new();
        while batch.len() < max.max(1) {
            let Some(line) = self.lines.next() else {
                break;
            };
            self.line += 1;
            let line = line.map_err(|e| read_error(&self.path, e))?;
            if line.trim().is_empty() {
                continue;
            }
            let record = parse_line(&line).map_err(|message| bad_line(&self.path, self.line, message))?;
            batch.push(record.record);
        }
        Ok(match batch.is_empty() {
            true => Poll::End,
            false => Poll::Records(Batch::Records(batch)),
        })
    }
}

/// The dead letters of `operator` among those `inner` reads (a file, a
/// Kafka topic), without their `mailer.error` and `mailer.operator`
/// headers; the others passed over.
pub struct DeadLetterSource {
    inner: Box<dyn Source>,
    operator: String,
    counts: Arc<DeadLetterCounts>,
}

impl DeadLetterSource {
    /// The dead letters of `operator` that `inner` reads, counted in
    /// `counts`.
    pub fn new(inner: Box<dyn Source>, operator: &str, counts: Arc<DeadLetterCounts>) -> Self {
        Self {
            inner,
            operator: operator.to_owned(),
            counts,
        }
    }
}

impl Source for DeadLetterSource {
    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        let batch = match self.inner.poll(max)? {
            Poll::Records(batch) => batch,
            other => return Ok(other),
        };
        let mut kept = Vec::with_capacity(batch.len());
        for mut record in batch.into_records() {
            let mine = operator_of(&record).map(|o| o == self.operator.as_bytes());
            match mine {
                Some(true) => {
                    record
                        .headers
                        .retain(|(name, _)| name != OPERATOR_HEADER && name != REASON_HEADER);
                    self.counts.replayed.fetch_add(1, Ordering::Relaxed);
                    kept.push(record);
                }
                Some(false) => {
                    self.counts.passed_over.fetch_add(1, Ordering::Relaxed);
                }
                None => {
                    return Err(ConnectorError::Unsupported(format!(
                        "a dead letter without a `mailer.operator` header ({}): dead letters name the operator that failed them",
                        crate::failure::preview(&record)
                    )));
                }
            }
        }
        // An empty batch is no end: the inner source may have more.
        Ok(Poll::Records(Batch::Records(kept)))
    }

    fn close(&mut self) -> Result<(), ConnectorError> {
        self.inner.close()
    }
}

/// The operator a dead letter names (its `mailer.operator` header).
fn operator_of(record: &Record) -> Option<&[u8]> {
    record
        .headers
        .iter()
        .find(|(name, _)| name == OPERATOR_HEADER)
        .map(|(_, value)| &value[..])
}

/// The operators the dead letters in `path` name, each with how many it
/// has, in the order first seen.
pub fn operators_in(path: &Path) -> Result<Vec<(String, u64)>, ConnectorError> {
    let file = std::fs::File::open(path).map_err(|e| read_error(path, e))?;
    let mut seen: Vec<(String, u64)> = Vec::new();
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| read_error(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        let record = parse_line(&line)
            .map_err(|message| bad_line(path, i + 1, message))?
            .record;
        let name = operator_of(&record).map_or_else(String::new, |o| String::from_utf8_lossy(o).into_owned());
        match seen.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => *count += 1,
            None => seen.push((name, 1)),
        }
    }
    Ok(seen)
}

fn read_error(path: &Path, source: std::io::Error) -> ConnectorError {
    ConnectorError::Io {
        what: "reading the dead letters",
        path: path.display().to_string(),
        source,
    }
}

fn bad_line(path: &Path, line: usize, message: String) -> ConnectorError {
    ConnectorError::BadInput {
        path: path.display().to_string(),
        line: line as u64,
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record `source` gives until its end.
    fn drain(source: &mut dyn Source) -> Result<Vec<Record>, ConnectorError> {
        let mut all = Vec::new();
        loop {
            match source.poll(10)? {
                Poll::Records(batch) => all.extend(batch.into_records()),
                Poll::Idle => {}
                Poll::End => return Ok(all),
            }
        }
    }

    #[test]
    fn keeps_the_operators_dead_letters_without_their_headers() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dl.jsonl");
        let lines = [
            r#"{"key":"k","value":"bad-1","timestamp":5,"headers":{"h":"x","mailer.error":"boom","mailer.operator":"check"}}"#,
            r#"{"key":null,"value_hex":"ff","timestamp":6,"headers":{"mailer.error":"no","mailer.operator":"other"}}"#,
            "",
            r#"{"key":null,"value":"bad-2","timestamp":7,"headers":{"mailer.error":"boom","mailer.operator":"check"}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        assert_eq!(
            operators_in(&path).unwrap(),
            [("check".into(), 2), ("other".into(), 1)]
        );
        let counts = Arc::new(DeadLetterCounts::default());
        let file = Box::new(DeadLetterFile::open(&path).unwrap());
        let records = drain(&mut DeadLetterSource::new(file, "check", counts.clone())).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].key.as_deref(), Some(&b"k"[..]));
        assert_eq!(&records[0].value[..], b"bad-1");
        assert_eq!(records[0].timestamp, 5);
        assert_eq!(
            records[0].headers,
            [("h".to_owned(), bytes::Bytes::from_static(b"x"))]
        );
        assert!(records[1].headers.is_empty());
        assert_eq!(counts.replayed.load(Ordering::Relaxed), 2);
        assert_eq!(counts.passed_over.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_record_that_is_no_dead_letter_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dl.jsonl");
        std::fs::write(&path, "{\"value\":\"x\"}\n").unwrap();
        let file = Box::new(DeadLetterFile::open(&path).unwrap());
        let err = drain(&mut DeadLetterSource::new(file, "check", Arc::default()))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("a dead letter without a `mailer.operator` header"),
            "{err}"
        );
        std::fs::write(&path, "{\"value\":\"x\"}\nnot json\n").unwrap();
        let err = drain(&mut DeadLetterFile::open(&path).unwrap())
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2: not JSON"), "{err}");
    }
}
