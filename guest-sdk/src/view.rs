//! A record borrowed from the batch it arrived in: no copy of its bytes.

use crate::Record;
use mailer_wire::{Headers, RecordRef};

/// A record as the host sent it, borrowed: its key, value and headers point
/// into the batch. A `filter` or `reduce` function that takes a
/// `RecordView` reads each record where it lies, without the copy into an
/// owned [`Record`]; [`to_record`](Self::to_record) makes one when needed.
#[derive(Debug, Clone, Copy)]
pub struct RecordView<'a> {
    key: Option<&'a [u8]>,
    value: &'a [u8],
    timestamp: i64,
    headers: HeadersOf<'a>,
}

/// Where a view's headers are.
#[derive(Debug, Clone, Copy)]
enum HeadersOf<'a> {
    /// Still encoded, in the batch.
    Wire(Headers<'a>),
    /// Those of an owned record.
    Owned(&'a [(String, Vec<u8>)]),
}

impl<'a> RecordView<'a> {
    /// The key as bytes, if any.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The value's bytes.
    pub fn value(&self) -> &'a [u8] {
        self.value
    }

    /// Event time in milliseconds since the Unix epoch.
    pub fn timestamp(&self) -> i64 {
        self.timestamp
    }

    /// The value as UTF-8 text, or an error naming the problem.
    pub fn value_str(&self) -> crate::Result<&'a str> {
        std::str::from_utf8(self.value).map_err(|e| crate::Error::new(format!("value is not UTF-8: {e}")))
    }

    /// The value as a decimal integer (ASCII digits with an optional sign),
    /// parsed straight from the bytes.
    pub fn value_i64(&self) -> crate::Result<i64> {
        crate::parse_i64(self.value).ok_or_else(|| {
            crate::Error::new(format!(
                "value {:?} is not a 64-bit integer",
                String::from_utf8_lossy(self.value)
            ))
        })
    }

    /// The first header with this name.
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        match self.headers {
            HeadersOf::Wire(h) => h.iter().find(|(n, _)| *n == name).map(|(_, v)| v),
            HeadersOf::Owned(h) => h.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_slice()),
        }
    }

    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            key: self.key.map(<[u8]>::to_vec),
            value: self.value.to_vec(),
            timestamp: self.timestamp,
            headers: match self.headers {
                HeadersOf::Wire(h) => h.iter().map(|(n, v)| (n.to_owned(), v.to_vec())).collect(),
                HeadersOf::Owned(h) => h.to_vec(),
            },
        }
    }
}

impl<'a> From<RecordRef<'a>> for RecordView<'a> {
    fn from(r: RecordRef<'a>) -> Self {
        Self {
            key: r.key,
            value: r.value,
            timestamp: r.timestamp,
            headers: HeadersOf::Wire(r.headers),
        }
    }
}

impl Record {
    /// This record, borrowed as a view.
    pub fn view(&self) -> RecordView<'_> {
        RecordView {
            key: self.key.as_deref(),
            value: &self.value,
            timestamp: self.timestamp,
            headers: HeadersOf::Owned(&self.headers),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailer_wire::{Reader, Writer};

    #[test]
    fn a_view_of_an_encoded_record_reads_what_the_owned_record_holds() {
        let mut rec = Record::new("-42").with_key("k").with_timestamp(7);
        rec.headers.push(("h".into(), b"v".to_vec()));
        let mut w = Writer::batch(1);
        rec.write_to(&mut w);
        let buf = w.finish();
        let mut r = Reader::new(&buf);
        r.count().unwrap();
        let wire = RecordView::from(r.record().unwrap());
        for view in [wire, rec.view()] {
            assert_eq!(view.key(), Some(&b"k"[..]));
            assert_eq!(view.value_i64().unwrap(), -42);
            assert_eq!(view.timestamp(), 7);
            assert_eq!(view.header("h"), Some(&b"v"[..]));
            assert_eq!(view.header("x"), None);
            assert_eq!(view.to_record(), rec);
        }
        assert!(Record::new("x").view().value_i64().is_err());
    }
}
