//! The record a plugin sees.

use mailer_wire::{RecordRef, Writer};

/// One record of the stream, owned by the plugin while it handles it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The record's key, if it has one.
    pub key: Option<Vec<u8>>,
    /// The payload.
    pub value: Vec<u8>,
    /// Event time in milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Headers in order; names may repeat.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// A record with this value, no key, timestamp 0 and no headers.
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Self {
            value: value.into(),
            ..Self::default()
        }
    }

    /// The same record with this key.
    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The same record with this event time (ms).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// The key as bytes, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    /// The value as UTF-8 text, or an error naming the problem.
    pub fn value_str(&self) -> crate::Result<&str> {
        std::str::from_utf8(&self.value).map_err(|e| crate::Error::new(format!("value is not UTF-8: {e}")))
    }

    /// The first header with this name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_slice())
    }

    pub(crate) fn from_ref(r: RecordRef<'_>) -> Self {
        Self {
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.to_vec(),
            timestamp: r.timestamp,
            headers: r
                .headers
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v.to_vec()))
                .collect(),
        }
    }

    pub(crate) fn write_to(&self, w: &mut Writer) {
        w.record(
            self.key.as_deref(),
            &self.value,
            self.timestamp,
            self.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        );
    }
}
