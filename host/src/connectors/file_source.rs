//! The `file` source: a bounded file of lines or JSON lines.

use super::rate::RateLimit;
use super::{ConnectorError, Poll, Progress, Source};
use crate::batch::Batch;
use crate::json::field;
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
    line_no: u64,
    /// Bytes read so far.
    offset: u64,
    /// The file's size when opened.
    size: u64,
    line: Vec<u8>,
    /// At most this many records per second, when set.
    rate: Option<RateLimit>,
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
        Ok(Self {
            path: path.to_owned(),
            size,
            reader: BufReader::with_capacity(256 * 1024, file),
            format,
            key_field,
            timestamp_field,
            line_no: 0,
            offset: 0,
            line: Vec::new(),
            rate: None,
        })
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
        let doc: serde_json::Value =
            serde_json::from_slice(&line).map_err(|e| self.bad(format!("not a JSON document: {e}")))?;
        let key = match &self.key_field {
            Some(f) => Some(match field(&doc, f) {
                Some(serde_json::Value::String(s)) => Bytes::copy_from_slice(s.as_bytes()),
                Some(v) => Bytes::from(v.to_string()),
                None => return Err(self.bad(format!("no field `{f}` for the key"))),
            }),
            None => None,
        };
        let timestamp = match &self.timestamp_field {
            Some(f) => field(&doc, f)
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

    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        let max = match self.rate.as_mut() {
            Some(rate) => rate.allow(max),
            None => max,
        };
        if max == 0 {
            return Ok(Poll::Idle);
        }
        let mut batch = Vec::with_capacity(max);
        let now = crate::runtime::now_ms();
        while batch.len() < max {
            self.line.clear();
            let n = self
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|source| ConnectorError::Io {
                    what: "reading",
                    path: self.path.display().to_string(),
                    source,
                })?;
            if n == 0 {
                break;
            }
            self.line_no += 1;
            self.offset += n as u64;
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
}
