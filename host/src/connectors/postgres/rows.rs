//! How a record becomes a row: each column's value taken from the record
//! and written in PostgreSQL's `COPY` text format (tab-separated, `\N` for
//! NULL, backslash escapes).

use super::config::{ColumnSpec, ColumnType, RecordPart};
use crate::json::Picker;
use crate::record::Record;
use serde_json::Value;
use std::collections::BTreeMap;

/// Where a column's value comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum From {
    /// The `n`th field the mapping picks from the value's JSON.
    Field(usize),
    Part(RecordPart),
}

/// The columns of a table and how each is filled from a record.
#[derive(Debug, Clone)]
pub struct RowMapping {
    columns: Vec<(String, From, ColumnType)>,
    /// The fields read from the value's JSON, when a column has one.
    fields: Option<Picker>,
}

impl RowMapping {
    /// The mapping of the manifest's `columns` (each has a `field` or a
    /// `from`; the manifest's validation checks that).
    pub fn new(columns: &BTreeMap<String, ColumnSpec>) -> Self {
        let mut paths = Vec::new();
        let columns: Vec<_> = columns
            .iter()
            .map(|(name, c)| {
                let from = match (&c.field, c.from) {
                    (Some(f), _) => {
                        paths.push(f.as_str());
                        From::Field(paths.len() - 1)
                    }
                    (None, Some(part)) => From::Part(part),
                    (None, None) => From::Part(RecordPart::Value),
                };
                (name.clone(), from, c.kind)
            })
            .collect();
        let fields = (!paths.is_empty()).then(|| Picker::new(&paths));
        Self { columns, fields }
    }

    /// Appends `rec` as one row (ending in a newline), with `extra` as a last
    /// column when it is not empty; or says why the record has no row (and
    /// appends nothing).
    pub fn append_row(&self, rec: &Record, extra: &str, out: &mut Vec<u8>) -> Result<(), String> {
        let start = out.len();
        let result = self.write_row(rec, extra, out);
        if result.is_err() {
            out.truncate(start);
        }
        result
    }

    fn write_row(&self, rec: &Record, extra: &str, out: &mut Vec<u8>) -> Result<(), String> {
        let fields = match &self.fields {
            Some(picker) => picker
                .pick(&rec.value)
                .map_err(|e| format!("the value is not JSON: {e}"))?,
            None => Vec::new(),
        };
        for (i, (name, from, kind)) in self.columns.iter().enumerate() {
            if i > 0 {
                out.push(b'\t');
            }
            let value = match from {
                From::Field(n) => match &fields[*n] {
                    None | Some(Value::Null) => None,
                    Some(v) => Some(json_text(v, *kind)),
                },
                From::Part(RecordPart::Timestamp) => Some(timestamp_text(rec.timestamp, *kind)),
                From::Part(RecordPart::Key) => rec.key.as_ref().map(|k| bytes_text(k, *kind, "key")),
                From::Part(RecordPart::Value) => Some(bytes_text(&rec.value, *kind, "value")),
            };
            match value {
                None => out.extend_from_slice(b"\\N"),
                Some(Ok(text)) => escape(&text, out).map_err(|e| format!("column `{name}`: {e}"))?,
                Some(Err(e)) => return Err(format!("column `{name}`: {e}")),
            }
        }
        if !extra.is_empty() {
            out.push(b'\t');
            out.extend_from_slice(extra.as_bytes());
        }
        out.push(b'\n');
        Ok(())
    }
}

/// The text of a JSON value as a column of type `kind`.
fn json_text(v: &Value, kind: ColumnType) -> Result<String, String> {
    match (kind, v) {
        (ColumnType::Jsonb, v) => Ok(v.to_string()),
        (_, Value::String(s)) => text_as(s, kind),
        (ColumnType::Text, v) => Ok(v.to_string()),
        (ColumnType::Integer | ColumnType::Timestamp, Value::Number(n)) => match n.as_i64() {
            Some(i) if kind == ColumnType::Timestamp => Ok(rfc3339_millis(i)),
            Some(i) => Ok(i.to_string()),
            None => n
                .as_u64()
                .filter(|_| kind == ColumnType::Integer)
                .map(|u| u.to_string())
                .ok_or_else(|| format!("{n} is not a whole number")),
        },
        (ColumnType::Float, Value::Number(n)) => Ok(n.to_string()),
        (ColumnType::Boolean, Value::Bool(b)) => Ok(if *b { "t" } else { "f" }.to_owned()),
        (kind, v) => Err(format!("{v} is not {}", kind.described())),
    }
}

/// Text (a string field, a key, a value) as a column of type `kind`.
fn text_as(s: &str, kind: ColumnType) -> Result<String, String> {
    let ok = match kind {
        ColumnType::Text => true,
        ColumnType::Integer => s.parse::<i64>().is_ok(),
        ColumnType::Float => s.parse::<f64>().is_ok_and(f64::is_finite),
        ColumnType::Boolean => matches!(s, "true" | "false"),
        ColumnType::Timestamp => {
            return match s.parse::<i64>() {
                Ok(ms) => Ok(rfc3339_millis(ms)),
                // PostgreSQL reads the time; one it cannot read fails the write.
                Err(_) if !s.is_empty() => Ok(s.to_owned()),
                Err(_) => Err("an empty string is not a timestamp".to_owned()),
            };
        }
        ColumnType::Jsonb => serde_json::from_str::<serde::de::IgnoredAny>(s).is_ok(),
    };
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!("{s:?} is not {}", kind.described()))
    }
}

fn bytes_text(b: &[u8], kind: ColumnType, what: &str) -> Result<String, String> {
    let s = std::str::from_utf8(b).map_err(|e| format!("the {what} is not UTF-8: {e}"))?;
    text_as(s, kind)
}

fn timestamp_text(ms: i64, kind: ColumnType) -> Result<String, String> {
    match kind {
        ColumnType::Timestamp => Ok(rfc3339_millis(ms)),
        ColumnType::Integer | ColumnType::Float | ColumnType::Text => Ok(ms.to_string()),
        other => Err(format!("the timestamp cannot be {}", other.described())),
    }
}

/// Milliseconds since 1970 as `YYYY-MM-DDTHH:MM:SS.mmmZ` (proleptic
/// Gregorian, any year PostgreSQL takes).
pub fn rfc3339_millis(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (
        in_day / 3_600_000,
        in_day / 60_000 % 60,
        in_day / 1000 % 60,
        in_day % 1000,
    );
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Writes `s` escaped for `COPY … FROM STDIN` text format.
fn escape(s: &str, out: &mut Vec<u8>) -> Result<(), String> {
    for b in s.bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0 => return Err("PostgreSQL text cannot hold a NUL character".to_owned()),
            b => out.push(b),
        }
    }
    Ok(())
}

/// The row of `rec` without its newline.
#[cfg(test)]
fn row_of(mapping: &RowMapping, rec: &Record) -> Result<String, String> {
    let mut out = Vec::new();
    mapping.append_row(rec, "", &mut out)?;
    out.pop();
    Ok(String::from_utf8(out).unwrap())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn mapping(toml_text: &str) -> RowMapping {
        let columns: BTreeMap<String, ColumnSpec> = toml::from_str(toml_text).unwrap();
        RowMapping::new(&columns)
    }

    fn rec(key: Option<&str>, value: &str, ts: i64) -> Record {
        Record::new(
            key.map(|k| Bytes::copy_from_slice(k.as_bytes())),
            value.to_owned(),
            ts,
        )
    }

    #[test]
    fn fields_key_and_time_become_escaped_columns_in_name_order() {
        let m = mapping(
            r#"
            a_customer = { field = "customer.id", type = "text" }
            b_total = { field = "total", type = "float" }
            c_count = { field = "n", type = "integer" }
            d_paid = { field = "paid", type = "boolean" }
            e_at = { from = "timestamp", type = "timestamp" }
            f_doc = { field = "customer", type = "jsonb" }
            g_key = { from = "key", type = "text" }
            h_missing = { field = "nope", type = "integer" }
            "#,
        );
        let r = rec(
            Some("k1"),
            r#"{"customer":{"id":"a\tb\\c"},"total":12.5,"n":3,"paid":true}"#,
            1_700_000_000_123,
        );
        assert_eq!(
            row_of(&m, &r).unwrap(),
            "a\\tb\\\\c\t12.5\t3\tt\t2023-11-14T22:13:20.123Z\t{\"id\":\"a\\\\tb\\\\\\\\c\"}\tk1\t\\N"
        );
    }

    #[test]
    fn wrong_types_and_bad_json_are_refused_with_the_column() {
        let m = mapping(r#"n = { field = "n", type = "integer" }"#);
        assert_eq!(
            row_of(&m, &rec(None, r#"{"n":"x"}"#, 0)).unwrap_err(),
            r#"column `n`: "x" is not an integer"#
        );
        assert_eq!(
            row_of(&m, &rec(None, r#"{"n":1.5}"#, 0)).unwrap_err(),
            "column `n`: 1.5 is not a whole number"
        );
        assert!(
            row_of(&m, &rec(None, "nope", 0))
                .unwrap_err()
                .starts_with("the value is not JSON")
        );
        let b = mapping(r#"b = { field = "b", type = "boolean" }"#);
        assert_eq!(
            row_of(&b, &rec(None, r#"{"b":1}"#, 0)).unwrap_err(),
            "column `b`: 1 is not a boolean"
        );
        let mut out = b"kept\n".to_vec();
        assert!(b.append_row(&rec(None, r#"{"b":1}"#, 0), "", &mut out).is_err());
        assert_eq!(out, b"kept\n", "a refused record appends nothing");
    }

    #[test]
    fn numbers_in_strings_and_keys_are_read_as_their_type_and_extra_comes_last() {
        let m = mapping(
            r#"
            k = { from = "key", type = "integer" }
            v = { from = "value", type = "jsonb" }
            "#,
        );
        let mut out = Vec::new();
        m.append_row(&rec(Some("42"), r#"{"x":1}"#, 0), "7", &mut out)
            .unwrap();
        assert_eq!(out, b"42\t{\"x\":1}\t7\n");
        assert!(
            m.append_row(&rec(Some("x"), "1", 0), "", &mut Vec::new())
                .is_err()
        );
    }

    #[test]
    fn times_before_and_after_1970_and_leap_days() {
        assert_eq!(rfc3339_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339_millis(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(rfc3339_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_millis(4_107_542_400_000), "2100-03-01T00:00:00.000Z");
    }
}
