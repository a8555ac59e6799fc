//! The files of a test case: records as text lines (values only) or as
//! JSON lines (`{"key", "value", "timestamp", "headers"}`).

use crate::json::put_bytes;
use crate::record::Record;
use bytes::Bytes;
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Why a case's file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CaseFileError {
    /// The file cannot be read.
    #[error("reading `{path}`: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file cannot be written.
    #[error("writing `{path}`: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not a record.
    #[error("`{path}` line {line}: {message}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// How a file holds its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseFormat {
    /// `.txt`: one value per line, no key, event time 0.
    Text,
    /// `.jsonl`: one JSON object per line.
    JsonLines,
}

/// A file of records: `<dir>/<name>.jsonl` or `<dir>/<name>.txt`, if one
/// exists.
pub fn find(dir: &Path, name: &str) -> Option<(PathBuf, CaseFormat)> {
    [("jsonl", CaseFormat::JsonLines), ("txt", CaseFormat::Text)]
        .into_iter()
        .map(|(ext, format)| (dir.join(format!("{name}.{ext}")), format))
        .find(|(path, _)| path.is_file())
}

/// A record of a case file, as far as the file says: an expected record
/// compares only what its line gives (a text line: the value; a JSON line
/// without `timestamp`: key and value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaseRecord {
    /// The record (key, value, time, headers as given).
    pub record: Record,
    /// Whether the line gives the key.
    pub has_key: bool,
    /// Whether the line gives the event time.
    pub has_timestamp: bool,
}

/// Writes `records` as `<dir>/<name>.txt` (values only) when that file
/// exists, else as `<dir>/<name>.jsonl` (key, value and headers, as
/// [`read`] reads them back).
pub fn write(dir: &Path, name: &str, records: &[Record]) -> Result<(), CaseFileError> {
    let (path, format) =
        find(dir, name).unwrap_or((dir.join(format!("{name}.jsonl")), CaseFormat::JsonLines));
    let mut text = String::new();
    for r in records {
        match format {
            CaseFormat::Text => text.push_str(&String::from_utf8_lossy(&r.value)),
            CaseFormat::JsonLines => text.push_str(&case_line(r).to_string()),
        }
        text.push('\n');
    }
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, text))
        .map_err(|source| CaseFileError::Write { path, source })
}

/// A record as a case's JSON line, without its event time: bytes that are
/// not UTF-8 as `key_hex`/`value_hex`, headers as an object.
fn case_line(r: &Record) -> Value {
    let mut line = serde_json::Map::new();
    if let Some(key) = &r.key {
        put_bytes(&mut line, "key", key);
    }
    put_bytes(&mut line, "value", &r.value);
    if !r.headers.is_empty() {
        let headers = r
            .headers
            .iter()
            .map(|(name, v)| (name.clone(), String::from_utf8_lossy(v).into_owned().into()))
            .collect();
        line.insert("headers".into(), Value::Object(headers));
    }
    Value::Object(line)
}

/// Reads the records of `path`.
pub fn read(path: &Path, format: CaseFormat) -> Result<Vec<CaseRecord>, CaseFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| CaseFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let lines = text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty());
    match format {
        CaseFormat::Text => Ok(lines
            .map(|(_, l)| CaseRecord {
                record: Record::new(None, l.to_owned(), 0),
                has_key: false,
                has_timestamp: false,
            })
            .collect()),
        CaseFormat::JsonLines => lines
            .map(|(i, l)| {
                parse_line(l).map_err(|message| CaseFileError::Line {
                    path: path.to_owned(),
                    line: i + 1,
                    message,
                })
            })
            .collect(),
    }
}

/// One JSON line: `value` (a string as it is, any other JSON as its text),
/// `key` (a string), `timestamp` (ms), `headers` (an object of strings).
pub(crate) fn parse_line(line: &str) -> Result<CaseRecord, String> {
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let Value::Object(fields) = v else {
        return Err("a record is a JSON object: {\"key\": …, \"value\": …, \"timestamp\": …}".into());
    };
    let mut record = Record::default();
    let (mut has_key, mut has_timestamp) = (false, false);
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("key", Value::Null) => has_key = true,
            ("key", Value::String(k)) => {
                record.key = Some(Bytes::from(k));
                has_key = true;
            }
            ("value", Value::String(s)) => record.value = Bytes::from(s),
            ("key_hex", Value::String(h)) => {
                record.key = Some(Bytes::from(
                    hex::decode(&h).map_err(|e| format!("`key_hex`: {e}"))?,
                ));
                has_key = true;
            }
            ("value_hex", Value::String(h)) => {
                record.value = Bytes::from(hex::decode(&h).map_err(|e| format!("`value_hex`: {e}"))?);
            }
            ("value", other) => record.value = Bytes::from(other.to_string()),
            ("timestamp", Value::Number(n)) if n.is_i64() => {
                record.timestamp = n.as_i64().expect("checked");
                has_timestamp = true;
            }
            ("headers", Value::Object(headers)) => {
                for (h, v) in headers {
                    let Value::String(v) = v else {
                        return Err(format!("header `{h}` must be a string"));
                    };
                    record.headers.push((h, Bytes::from(v)));
                }
            }
            ("key", _) => return Err("`key` must be a string (or null)".into()),
            ("timestamp", _) => return Err("`timestamp` must be a whole number of ms".into()),
            ("headers", _) => return Err("`headers` must be an object of strings".into()),
            (other, _) => {
                return Err(format!(
                    "unknown field `{other}`: a record has `key` (or `key_hex`), `value` (or `value_hex`), `timestamp` and `headers`"
                ));
            }
        }
    }
    Ok(CaseRecord {
        record,
        has_key,
        has_timestamp,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_line_gives_what_it_names_and_refuses_the_rest() {
        let r = parse_line(r#"{"key":"k","value":{"n":1},"timestamp":5,"headers":{"h":"v"}}"#).unwrap();
        assert_eq!(r.record.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(&r.record.value[..], br#"{"n":1}"#);
        assert_eq!(r.record.timestamp, 5);
        assert_eq!(r.record.headers, vec![("h".to_owned(), Bytes::from("v"))]);
        assert!(r.has_key && r.has_timestamp);
        let r = parse_line(r#"{"value":"plain"}"#).unwrap();
        assert!(!r.has_key && !r.has_timestamp);
        assert_eq!(&r.record.value[..], b"plain");
        assert_eq!(
            parse_line(r#"{"vaule":"x"}"#).unwrap_err(),
            "unknown field `vaule`: a record has `key` (or `key_hex`), `value` (or `value_hex`), `timestamp` and `headers`"
        );
        assert!(parse_line("[1]").is_err());
    }

    #[test]
    fn what_update_writes_reads_back_the_same() {
        let mut r = Record::new(
            Some(Bytes::from_static(&[0xff, 1])),
            Bytes::from_static(&[0, 0xfe]),
            7,
        );
        r.headers.push(("mailer.error".into(), Bytes::from("bad")));
        let back = parse_line(&case_line(&r).to_string()).unwrap();
        assert_eq!(back.record.key, r.key);
        assert_eq!(back.record.value, r.value);
        assert_eq!(back.record.headers, r.headers);
        assert!(back.has_key && !back.has_timestamp);
    }
}
