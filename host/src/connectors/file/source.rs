//! The `file` source: a bounded file of lines or JSON lines.

use crate::batch::Batch;
use crate::connectors::rate::RateLimit;
use crate::connectors::{ConnectorError, Poll, Progress, Source};
use crate::failure::FailureHandler;
use crate::json::Picker;
use crate::record::Record;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{BufRead, BufReader, Seek};
use std::path::{Path, PathBuf};

/// How the lines of a file become records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FileFormat {
    /// Each line is a record's value (without its line ending); no key.
    #[default]
    Lines,
    /// Each line is a JSON document; the value is the line, and the key and
    /// event time may be taken from fields.
    JsonLines,
}

/// Reads a file line by line.
pub struct FileSource {
    path: PathBuf,
    reader: BufReader<File>,
    format: FileFormat,
    key_field: Option<String>,
    timestamp_field: Option<String>,
    /// Reads `key_field` and `timestamp_field` (in that order, those set).
    fields: Picker,
    line_no: u64,
    /// Bytes read so far.
    offset: u64,
    /// The file's size when opened.
    size: u64,
    line: Vec<u8>,
    /// At most this many records per second, when set.
    rate: Option<RateLimit>,
    /// The longest line read as a record, and where longer ones go.
    max_record_bytes: usize,
    rejects: Option<FailureHandler>,
}

impl FileSource {
    /// Opens `path`. For JSON lines, `key_field` and `timestamp_field` are
    /// dotted paths (`customer.id`) into each document.
    pub fn open(
        path: &Path,
        format: FileFormat,
        key_field: Option<String>,
        timestamp_field: Option<String>,
    ) -> Result<Self, ConnectorError> {
        let file = File::open(path).map_err(|source| ConnectorError::Io {
            what: "opening",
            path: path.display().to_string(),
            source,
        })?;
        let size = file.metadata().map_or(0, |m| m.len());
        let fields = Picker::new(&key_field.iter().chain(&timestamp_field).collect::<Vec<_>>());
        Ok(Self {
            path: path.to_owned(),
            size,
            reader: BufReader::with_capacity(256 * 1024, file),
            format,
            key_field,
            timestamp_field,
            fields,
            line_no: 0,
            offset: 0,
            line: Vec::new(),
            rate: None,
            max_record_bytes: usize::MAX,
            rejects: None,
        })
    }

    /// The same source reading lines of at most `max` bytes as records; a
    /// longer line (only its start is kept in memory) goes to `rejects`.
    pub fn with_max_record_bytes(mut self, max: usize, rejects: FailureHandler) -> Self {
        self.max_record_bytes = max;
        self.rejects = Some(rejects);
        self
    }

    /// A line longer than `max_record_bytes`, its first KiB standing for it,
    /// through the failure policy.
    fn too_long(&self, length: u64, now: i64) -> Result<(), ConnectorError> {
        let what = format!(
            "{length} bytes, more than `max_record_bytes` ({})",
            self.max_record_bytes
        );
        let Some(rejects) = &self.rejects else {
            return Err(self.bad(what));
        };
        let start = Bytes::copy_from_slice(&self.line[..self.line.len().min(1024)]);
        let reason = format!("`{}` line {}: {what}", self.path.display(), self.line_no);
        crate::connectors::refuse(rejects, Record::new(None, start, now), &reason).map_err(|_| self.bad(what))
    }

    /// The same source reading at most `per_second` records per second (a
    /// file replayed as a stream).
    pub fn with_rate(mut self, per_second: Option<u64>) -> Self {
        self.rate = RateLimit::new(per_second);
        self
    }

    fn bad(&self, message: String) -> ConnectorError {
        ConnectorError::BadInput {
            path: self.path.display().to_string(),
            line: self.line_no,
            message,
        }
    }

    fn json_record(&self, line: Bytes, now: i64) -> Result<Record, ConnectorError> {
        let mut picked = self
            .fields
            .pick(&line)
            .map_err(|e| self.bad(format!("not a JSON document: {e}")))?
            .into_iter();
        let key = match &self.key_field {
            Some(f) => Some(match picked.next().flatten() {
                Some(serde_json::Value::String(s)) => Bytes::from(s),
                Some(v) => Bytes::from(v.to_string()),
                None => return Err(self.bad(format!("no field `{f}` for the key"))),
            }),
            None => None,
        };
        let timestamp = match &self.timestamp_field {
            Some(f) => picked
                .next()
                .flatten()
                .as_ref()
                .and_then(serde_json::Value::as_i64)
                .ok_or_else(|| self.bad(format!("field `{f}` is missing or not an integer (ms)")))?,
            None => now,
        };
        Ok(Record::new(key, line, timestamp))
    }
}

impl Source for FileSource {
    fn progress(&self) -> Option<Progress> {
        Some(Progress {
            records: self.line_no,
            records_total: None,
            bytes: Some(self.offset),
            bytes_total: Some(self.size),
        })
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "offset": self.offset, "line": self.line_no })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let (Some(offset), Some(line)) = (position["offset"].as_u64(), position["line"].as_u64()) else {
            return Err(ConnectorError::Unsupported(format!(
                "not a file position: {position}"
            )));
        };
        self.reader
            .seek(std::io::SeekFrom::Start(offset))
            .map_err(|source| ConnectorError::Io {
                what: "seeking",
                path: self.path.display().to_string(),
                source,
            })?;
        self.offset = offset;
        self.line_no = line;
        if let Some(rate) = self.rate.as_mut() {
            rate.restart();
        }
        Ok(())
    }

    /// Read up to the size the file had when it opened.
    fn caught_up(&self) -> bool {
        self.offset >= self.size
    }

    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        let max = match self.rate.as_mut() {
            Some(rate) => rate.allow(max),
            None => max,
        };
        if max == 0 {
            return Ok(Poll::Idle);
        }
        let mut batch = Vec::with_capacity(max);
        let now = crate::clock::now_ms();
        while batch.len() < max {
            self.line.clear();
            let (n, length) = read_line_capped(&mut self.reader, &mut self.line, self.max_record_bytes)
                .map_err(|source| ConnectorError::Io {
                    what: "reading",
                    path: self.path.display().to_string(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            self.line_no += 1;
            self.offset += n;
            if length > self.max_record_bytes as u64 {
                self.too_long(length, now)?;
                continue;
            }
            let mut end = self.line.len();
            if self.line[..end].ends_with(b"\n") {
                end -= 1;
                if self.line[..end].ends_with(b"\r") {
                    end -= 1;
                }
            }
            let line = Bytes::copy_from_slice(&self.line[..end]);
            batch.push(match self.format {
                FileFormat::Lines => Record::new(None, line, now),
                FileFormat::JsonLines => self.json_record(line, now)?,
            });
        }
        Ok(if batch.is_empty() {
            Poll::End
        } else {
            Poll::Records(Batch::Records(batch))
        })
    }
}

/// Reads one line (through its `\n`) into `line`, keeping at most its
/// first `cap` bytes and its ending: the bytes it took in the file (0 at
/// the end), and its length without the line ending.
fn read_line_capped(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<(u64, u64)> {
    let (mut taken, mut ended) = (0u64, false);
    while !ended {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let chunk = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                ended = true;
                &buf[..=i]
            }
            None => buf,
        };
        let keep = chunk.len().min(cap.saturating_add(2).saturating_sub(line.len()));
        line.extend_from_slice(&chunk[..keep]);
        let n = chunk.len();
        reader.consume(n);
        taken += n as u64;
    }
    let ending = if ended && line.ends_with(b"\r\n") {
        2
    } else {
        u64::from(ended)
    };
    Ok((taken, taken - ending))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn source(content: &str, format: FileFormat, key: Option<&str>, ts: Option<&str>) -> FileSource {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(content.as_bytes()).unwrap();
        let s = FileSource::open(f.path(), format, key.map(Into::into), ts.map(Into::into)).unwrap();
        drop(f.into_temp_path().keep());
        s
    }

    #[test]
    fn lines_strip_line_endings_and_keep_empty_lines() {
        let mut s = source("a\r\n\nlast", FileFormat::Lines, None, None);
        let Poll::Records(b) = s.poll(10).unwrap() else {
            panic!()
        };
        let b = b.into_records();
        let values: Vec<_> = b.iter().map(|r| r.value.clone()).collect();
        assert_eq!(values, ["a", "", "last"]);
        assert!(matches!(s.poll(10).unwrap(), Poll::End));
    }

    #[test]
    fn json_lines_take_key_and_time_from_fields() {
        let mut s = source(
            "{\"c\":{\"id\":\"x\"},\"t\":42}\n",
            FileFormat::JsonLines,
            Some("c.id"),
            Some("t"),
        );
        let Poll::Records(b) = s.poll(10).unwrap() else {
            panic!()
        };
        let b = b.into_records();
        assert_eq!(b[0].key.as_deref(), Some(&b"x"[..]));
        assert_eq!(b[0].timestamp, 42);
    }

    #[test]
    fn bad_json_names_file_and_line() {
        let mut s = source("{}\nnope\n", FileFormat::JsonLines, None, None);
        let e = s.poll(10).unwrap_err().to_string();
        assert!(e.contains("line 2: not a JSON document"), "{e}");
    }

    #[test]
    fn a_line_longer_than_the_cap_is_skipped_whole_and_only_its_start_is_kept() {
        let long = "x".repeat(100_000);
        let text = format!("ab\r\n{long}\nc");
        let mut reader = std::io::BufReader::with_capacity(4096, text.as_bytes());
        let mut line = Vec::new();
        assert_eq!(read_line_capped(&mut reader, &mut line, 10).unwrap(), (4, 2));
        line.clear();
        assert_eq!(
            read_line_capped(&mut reader, &mut line, 10).unwrap(),
            (100_001, 100_000)
        );
        assert!(line.len() <= 12, "{} bytes kept", line.len());
        line.clear();
        assert_eq!(read_line_capped(&mut reader, &mut line, 10).unwrap(), (1, 1));
        assert_eq!(line, b"c");

        let skip = FailureHandler::new(
            "source",
            crate::failure::FailurePolicy::Skip,
            None,
            Default::default(),
        );
        let mut s = source(&format!("a\n{long}\nb\n"), FileFormat::Lines, None, None)
            .with_max_record_bytes(1000, skip.clone());
        let Poll::Records(b) = s.poll(10).unwrap() else {
            panic!()
        };
        let values: Vec<_> = b.into_records().iter().map(|r| r.value.clone()).collect();
        assert_eq!(values, ["a", "b"]);
        assert_eq!(skip.stats().skipped.load(std::sync::atomic::Ordering::Relaxed), 1);

        let fail = FailureHandler::new(
            "source",
            crate::failure::FailurePolicy::Fail,
            None,
            Default::default(),
        );
        let mut s =
            source(&format!("{long}\n"), FileFormat::Lines, None, None).with_max_record_bytes(1000, fail);
        let e = s.poll(10).unwrap_err().to_string();
        assert!(
            e.contains("line 1: 100000 bytes, more than `max_record_bytes` (1000)"),
            "{e}"
        );
    }
}
