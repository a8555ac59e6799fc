//! How sinks that write text render a record.

use crate::json::put_bytes;
use crate::record::Record;
use serde::{Deserialize, Serialize};
use std::io::{self, Write};

/// The text form of a record.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SinkFormat {
    /// `key<TAB>value` per line (an empty key when there is none), as lossy
    /// UTF-8.
    #[default]
    Text,
    /// Only the value per line, as lossy UTF-8.
    Value,
    /// One JSON object per line: `key` (or null), `value`, `timestamp`,
    /// `headers` (name to value); a key or value that is not UTF-8 as
    /// `key_hex` or `value_hex`, header values as lossy UTF-8.
    Json,
}

impl SinkFormat {
    /// Writes one record as one line.
    pub fn write(self, out: &mut impl Write, r: &Record) -> io::Result<()> {
        match self {
            SinkFormat::Text => {
                out.write_all(String::from_utf8_lossy(r.key_bytes()).as_bytes())?;
                out.write_all(b"\t")?;
                out.write_all(String::from_utf8_lossy(&r.value).as_bytes())?;
            }
            SinkFormat::Value => out.write_all(String::from_utf8_lossy(&r.value).as_bytes())?,
            SinkFormat::Json => {
                let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
                let headers: serde_json::Map<String, serde_json::Value> = r
                    .headers
                    .iter()
                    .map(|(n, v)| (n.clone(), lossy(v).into()))
                    .collect();
                let mut doc = serde_json::Map::new();
                match &r.key {
                    Some(key) => put_bytes(&mut doc, "key", key),
                    None => {
                        doc.insert("key".into(), serde_json::Value::Null);
                    }
                }
                put_bytes(&mut doc, "value", &r.value);
                doc.insert("timestamp".into(), r.timestamp.into());
                doc.insert("headers".into(), headers.into());
                serde_json::to_writer(&mut *out, &doc)?;
            }
        }
        out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn text_is_key_tab_value_with_lossy_utf8() {
        let mut out = Vec::new();
        let r = Record::new(Some(Bytes::from_static(b"k\xff")), "v", 0);
        SinkFormat::Text.write(&mut out, &r).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "k\u{fffd}\tv\n");
    }

    #[test]
    fn json_carries_headers() {
        let mut out = Vec::new();
        let mut r = Record::new(None, "v", 3);
        r.headers
            .push(("mailer.error".into(), Bytes::from_static(b"boom")));
        SinkFormat::Json.write(&mut out, &r).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["key"], serde_json::Value::Null);
        assert_eq!(doc["headers"]["mailer.error"], "boom");
        assert_eq!(doc["timestamp"], 3);
    }

    #[test]
    fn json_keeps_bytes_that_are_not_text_as_hex() {
        let mut out = Vec::new();
        let r = Record::new(Some(Bytes::from_static(b"k")), Bytes::from_static(b"\xff\x00"), 0);
        SinkFormat::Json.write(&mut out, &r).unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(doc["key"], "k");
        assert_eq!(doc["value_hex"], "ff00");
        assert!(doc.get("value").is_none());
    }
}
