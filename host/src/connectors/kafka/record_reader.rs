//! How a Kafka message becomes a record: its size checked, its value read
//! by the source's format, its key and event time taken from JSON fields
//! when the source names them. The Kafka source and cluster mode's source
//! tasks read messages the same way.

use super::config::{KafkaFormat, KafkaSourceSpec};
use super::refusals::raw_record;
use crate::json::field;
use crate::record::Record;
use bytes::Bytes;
use rdkafka::message::{Headers, Message};

/// Reads messages as a Kafka source's settings say.
#[derive(Debug, Clone)]
pub struct RecordReader {
    format: KafkaFormat,
    key_field: Option<String>,
    timestamp_field: Option<String>,
    max_record_bytes: usize,
}

impl RecordReader {
    /// The reader of source `spec`.
    pub fn of(spec: &KafkaSourceSpec) -> Self {
        Self {
            format: spec.format,
            key_field: spec.key_field.clone(),
            timestamp_field: spec.timestamp_field.clone(),
            max_record_bytes: spec.max_record_bytes,
        }
    }

    /// The record of `msg` read by the source's format; or the message as it
    /// is and why it cannot be read.
    pub fn read(&self, msg: &impl Message) -> Result<Record, (Record, String)> {
        let size = msg.key().map_or(0, <[u8]>::len)
            + msg.payload().map_or(0, <[u8]>::len)
            + msg.headers().map_or(0, |h| {
                h.iter()
                    .map(|h| h.key.len() + h.value.map_or(0, <[u8]>::len))
                    .sum()
            });
        if size > self.max_record_bytes {
            // Only its start goes on, standing for it.
            let mut start = raw_record(msg);
            start.value.truncate(1024);
            let reason = format!(
                "topic `{}` partition {} offset {}: {size} bytes, more than `max_record_bytes` ({})",
                msg.topic(),
                msg.partition(),
                msg.offset(),
                self.max_record_bytes
            );
            return Err((start, reason));
        }
        let mut rec = raw_record(msg);
        let bad = |rec: Record, message: String| {
            let reason = format!(
                "topic `{}` partition {} offset {}: {message}",
                msg.topic(),
                msg.partition(),
                msg.offset()
            );
            Err((rec, reason))
        };
        match self.format {
            KafkaFormat::Bytes => {}
            KafkaFormat::String => {
                if let Err(e) = std::str::from_utf8(&rec.value) {
                    return bad(rec, format!("the value is not UTF-8: {e}"));
                }
            }
            // A tombstone (no value) passes as it is: a table deletes its key.
            KafkaFormat::Json if rec.value.is_empty() => {}
            KafkaFormat::Json => {
                let doc: serde_json::Value = match serde_json::from_slice(&rec.value) {
                    Ok(doc) => doc,
                    Err(e) => return bad(rec, format!("the value is not JSON: {e}")),
                };
                if let Some(f) = &self.key_field {
                    rec.key = Some(match field(&doc, f) {
                        Some(serde_json::Value::String(s)) => Bytes::copy_from_slice(s.as_bytes()),
                        Some(v) => Bytes::from(v.to_string()),
                        None => return bad(rec, format!("no field `{f}` for the key")),
                    });
                }
                if let Some(f) = &self.timestamp_field {
                    match field(&doc, f).and_then(serde_json::Value::as_i64) {
                        Some(t) => rec.timestamp = t,
                        None => return bad(rec, format!("field `{f}` is missing or not an integer (ms)")),
                    }
                }
            }
        }
        Ok(rec)
    }
}
