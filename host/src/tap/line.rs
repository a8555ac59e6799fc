//! What a tap's stream carries, one JSON object per line: a record
//! (`key`, `value`, `timestamp`, `headers`), how many records this client
//! missed so far (`dropped`), or why the stream ended (`end`). Keys,
//! values and header values that are not UTF-8 come as hex in `key_hex`,
//! `value_hex` and `[name, null, hex]`.

use crate::json::put_bytes;
use crate::record::Record;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A record as a tap line.
pub fn record_line(r: &Record) -> Value {
    let mut line = serde_json::Map::new();
    if let Some(key) = &r.key {
        put_bytes(&mut line, "key", key);
    }
    put_bytes(&mut line, "value", &r.value);
    line.insert("timestamp".into(), r.timestamp.into());
    if !r.headers.is_empty() {
        let headers = r
            .headers
            .iter()
            .map(|(name, value)| match std::str::from_utf8(value) {
                Ok(text) => json!([name, text]),
                Err(_) => json!([name, null, hex::encode(value)]),
            })
            .collect();
        line.insert("headers".into(), Value::Array(headers));
    }
    Value::Object(line)
}

/// One line of a tap's stream, as a client reads it.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub enum TapLine {
    /// Records this client missed so far (it did not keep up).
    Dropped {
        /// How many.
        dropped: u64,
    },
    /// The stream ended.
    End {
        /// Why.
        end: String,
    },
    /// A record leaving the tapped point.
    Record(Value),
}

impl TapLine {
    /// The line as it came: one JSON object.
    pub fn json(&self) -> String {
        serde_json::to_string(self).expect("a tap line serializes")
    }

    /// The line for people: a record as `ts=… key=… value` (and its
    /// headers), the others as `#` comments.
    pub fn text(&self) -> String {
        match self {
            TapLine::Dropped { dropped } => {
                format!("# {dropped} records dropped so far: this tap did not keep up")
            }
            TapLine::End { end } => format!("# end: {end}"),
            TapLine::Record(r) => {
                let field = |name: &str| match (&r[name], &r[format!("{name}_hex")]) {
                    (Value::String(s), _) => Some(s.clone()),
                    (_, Value::String(hex)) => Some(format!("0x{hex}")),
                    _ => None,
                };
                let mut text = format!("ts={}", r["timestamp"]);
                // One record per line, whatever its bytes.
                let printable = |s: &str| -> String {
                    s.chars()
                        .flat_map(|c| match c.is_control() {
                            true => c.escape_default().collect::<Vec<_>>(),
                            false => vec![c],
                        })
                        .collect()
                };
                let field = |name: &str| field(name).map(|s| printable(&s));
                if let Some(key) = field("key") {
                    text.push_str(&format!(" key={key}"));
                }
                text.push(' ');
                text.push_str(&field("value").unwrap_or_default());
                for h in r["headers"].as_array().into_iter().flatten() {
                    let value = match (&h[1], &h[2]) {
                        (Value::String(s), _) => s.clone(),
                        (_, Value::String(hex)) => format!("0x{hex}"),
                        _ => String::new(),
                    };
                    let name = h[0].as_str().unwrap_or_default();
                    text.push_str(&format!(" [{}={}]", printable(name), printable(&value)));
                }
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn parse(v: Value) -> TapLine {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_record_reads_back_as_text_with_its_key_and_headers() {
        let mut r = Record::new(Some(Bytes::from("user-1")), "hello", 42);
        r.headers.push(("trace".into(), Bytes::from("abc")));
        r.headers.push(("raw".into(), Bytes::from_static(&[0xff])));
        let line = record_line(&r);
        assert_eq!(
            line,
            json!({"key": "user-1", "value": "hello", "timestamp": 42,
                   "headers": [["trace", "abc"], ["raw", null, "ff"]]})
        );
        assert_eq!(parse(line.clone()).json(), line.to_string());
        assert_eq!(
            parse(line).text(),
            "ts=42 key=user-1 hello [trace=abc] [raw=0xff]"
        );
    }

    #[test]
    fn bytes_that_are_not_text_come_as_hex() {
        let r = Record::new(None, Bytes::from_static(&[0, 0xfe]), 1);
        assert_eq!(record_line(&r), json!({"value_hex": "00fe", "timestamp": 1}));
        assert_eq!(parse(record_line(&r)).text(), "ts=1 0x00fe");
    }

    #[test]
    fn control_characters_are_escaped_so_a_record_stays_on_its_line() {
        let r = Record::new(None, "a\nb\u{1b}[31m é", 1);
        assert_eq!(parse(record_line(&r)).text(), "ts=1 a\\nb\\u{1b}[31m é");
    }

    #[test]
    fn status_lines_are_comments() {
        assert_eq!(
            parse(json!({"dropped": 7})).text(),
            "# 7 records dropped so far: this tap did not keep up"
        );
        assert_eq!(
            parse(json!({"end": "the pipeline has stopped"})).text(),
            "# end: the pipeline has stopped"
        );
    }
}
