//! Records: the unit of the stream.

use bytes::Bytes;

/// One record of the stream. Payloads are [`Bytes`], so cloning a record or
/// slicing it out of a plugin's output never copies the payload.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The record's key, if it has one.
    pub key: Option<Bytes>,
    /// The payload.
    pub value: Bytes,
    /// Event time in milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Headers in order; names may repeat.
    pub headers: Vec<(String, Bytes)>,
}

impl Record {
    /// A record with this key and value, event time `timestamp`, no headers.
    pub fn new(key: Option<Bytes>, value: impl Into<Bytes>, timestamp: i64) -> Self {
        Self {
            key,
            value: value.into(),
            timestamp,
            headers: Vec::new(),
        }
    }

    /// The key's bytes, empty when the record has no key.
    pub fn key_bytes(&self) -> &[u8] {
        self.key.as_deref().unwrap_or_default()
    }
}
