//! The flat batch encoding shared by the mailer host and its plugin SDK.
//!
//! Crossing the Wasm boundary once per batch is only cheap when the batch is
//! one flat `list<u8>`: a typed `list<record>` costs an allocation per byte
//! list. This crate writes and reads that flat form; `docs/wire-format.md`
//! describes it for authors of SDKs in other languages.
//!
//! All integers are little-endian.
//!
//! ```text
//! record     := flags:u8 [key_len:u32 key] value_len:u32 value timestamp:i64
//!               header_count:u32 (name_len:u32 name value_len:u32 value)*
//!               (flags bit 0: the key is present)
//! batch      := count:u32 record*
//! outcomes   := count:u32 (0:u8 payload | 1:u8 message_len:u32 message)*
//!   payload of map: record; of filter: keep:u8; of flat-map: n:u32 record*;
//!   of reduce: acc_len:u32 acc
//! reduce-in  := slot_count:u32 (0:u8 | 1:u8 acc_len:u32 acc)*
//!               count:u32 (slot:u32 record)*
//! ```
//!
//! ```
//! use mailer_wire::{Reader, Writer};
//!
//! let mut w = Writer::batch(1);
//! w.record(Some(b"k"), b"v", 7, [("h", &b"1"[..])]);
//! let bytes = w.finish();
//!
//! let mut r = Reader::new(&bytes);
//! assert_eq!(r.count().unwrap(), 1);
//! let rec = r.record().unwrap();
//! assert_eq!((rec.key, rec.value, rec.timestamp), (Some(&b"k"[..]), &b"v"[..], 7));
//! assert_eq!(rec.headers.iter().collect::<Vec<_>>(), vec![("h", &b"1"[..])]);
//! r.end().unwrap();
//! ```

use std::fmt;

/// Tag of a successful outcome.
pub const OK: u8 = 0;
/// Tag of a failed outcome, followed by the error message.
pub const ERR: u8 = 1;

const HAS_KEY: u8 = 1;

/// The headers of a record borrowed from an encoded buffer: checked when the
/// record was read, decoded when iterated (most records have none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers<'a> {
    raw: &'a [u8],
    count: usize,
}

impl<'a> Headers<'a> {
    /// How many headers.
    #[inline]
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The headers in order, as (name, value).
    pub fn iter(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + 'a {
        let mut r = Reader::new(self.raw);
        (0..self.count).map(move |_| {
            let name = r.str().expect("headers were checked when their record was read");
            (
                name,
                r.bytes()
                    .expect("headers were checked when their record was read"),
            )
        })
    }
}

/// A record borrowed from an encoded buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// The key, if present.
    pub key: Option<&'a [u8]>,
    /// The payload.
    pub value: &'a [u8],
    /// Event time in milliseconds.
    pub timestamp: i64,
    /// Headers in order.
    pub headers: Headers<'a>,
}

/// What went wrong while reading an encoded buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireError {
    /// The buffer ended inside an item that starts at this offset.
    Truncated { offset: usize },
    /// An outcome tag other than `OK` or `ERR`, at this offset.
    BadTag { offset: usize, tag: u8 },
    /// A header name or error message that is not UTF-8, at this offset.
    BadUtf8 { offset: usize },
    /// Bytes left over after the last item.
    TrailingBytes { offset: usize },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { offset } => write!(f, "batch truncated at byte {offset}"),
            Self::BadTag { offset, tag } => {
                write!(f, "unknown outcome tag {tag} at byte {offset}")
            }
            Self::BadUtf8 { offset } => write!(f, "invalid UTF-8 at byte {offset}"),
            Self::TrailingBytes { offset } => {
                write!(f, "unexpected bytes after the last item, at byte {offset}")
            }
        }
    }
}

impl std::error::Error for WireError {}

/// Writes a buffer in the flat encoding.
#[derive(Debug, Default)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// Starts a buffer whose first word is an item count.
    #[inline]
    pub fn batch(count: usize) -> Self {
        Self::with_capacity(count, 64 * count)
    }

    /// Starts a buffer with a count and room for `bytes` bytes.
    #[inline]
    pub fn with_capacity(count: usize, bytes: usize) -> Self {
        let mut w = Self {
            buf: Vec::with_capacity(bytes + 4),
        };
        w.u32(count);
        w
    }

    /// Appends a `u8`.
    #[inline]
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }

    /// Appends a length or count as `u32`.
    ///
    /// # Panics
    /// When `v` exceeds `u32::MAX`; no buffer of the host gets near that.
    #[inline]
    pub fn u32(&mut self, v: usize) {
        let v = u32::try_from(v).expect("a length in a batch exceeds u32::MAX");
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends an `i64` (a time).
    #[inline]
    pub fn i64(&mut self, v: i64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    /// Appends optional bytes: `0:u8`, or `1:u8` and the length-prefixed bytes.
    pub fn option(&mut self, b: Option<&[u8]>) {
        match b {
            Some(b) => {
                self.u8(1);
                self.bytes(b);
            }
            None => self.u8(0),
        }
    }

    /// Appends bytes already in the encoding (e.g. a whole record).
    #[inline]
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    /// Appends length-prefixed bytes.
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        self.u32(b.len());
        self.buf.extend_from_slice(b);
    }

    /// Appends one record.
    #[inline]
    pub fn record<'h>(
        &mut self,
        key: Option<&[u8]>,
        value: &[u8],
        timestamp: i64,
        headers: impl IntoIterator<Item = (&'h str, &'h [u8])>,
    ) {
        match key {
            Some(k) => {
                self.u8(HAS_KEY);
                self.bytes(k);
            }
            None => self.u8(0),
        }
        self.bytes(value);
        self.buf.extend_from_slice(&timestamp.to_le_bytes());
        let count_at = self.buf.len();
        self.u32(0);
        let mut n = 0u32;
        for (name, value) in headers {
            self.bytes(name.as_bytes());
            self.bytes(value);
            n += 1;
        }
        self.buf[count_at..count_at + 4].copy_from_slice(&n.to_le_bytes());
    }

    /// Bytes written so far.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written (not even a count).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Appends a failed outcome with its message.
    #[inline]
    pub fn err(&mut self, message: &str) {
        self.u8(ERR);
        self.bytes(message.as_bytes());
    }

    /// Appends the tag of a successful outcome; its payload follows.
    #[inline]
    pub fn ok(&mut self) {
        self.u8(OK);
    }

    /// Overwrites the leading count (for writers that learn it late).
    #[inline]
    pub fn set_count(&mut self, count: usize) {
        let v = u32::try_from(count).expect("count exceeds u32::MAX");
        self.buf[..4].copy_from_slice(&v.to_le_bytes());
    }

    /// The encoded bytes.
    #[inline]
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Reads a buffer in the flat encoding.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Reads `buf` from its start.
    #[inline]
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    /// Reads `buf` from `offset` on (an offset an earlier reader reported).
    #[inline]
    pub fn at(buf: &'a [u8], offset: usize) -> Self {
        Self {
            buf,
            pos: offset.min(buf.len()),
        }
    }

    /// The current offset in the buffer.
    #[inline]
    pub fn offset(&self) -> usize {
        self.pos
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        let rest = &self.buf[self.pos..];
        if n > rest.len() {
            return Err(WireError::Truncated { offset: self.pos });
        }
        self.pos += n;
        Ok(&rest[..n])
    }

    /// Reads a `u8`.
    #[inline]
    pub fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }

    /// Reads a `u32` as `usize`.
    #[inline]
    pub fn u32(&mut self) -> Result<usize, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }

    /// Reads an `i64`.
    #[inline]
    pub fn i64(&mut self) -> Result<i64, WireError> {
        let b = self.take(8)?;
        Ok(i64::from_le_bytes(b.try_into().expect("took 8 bytes")))
    }

    /// Reads what [`Writer::option`] wrote.
    pub fn option(&mut self) -> Result<Option<&'a [u8]>, WireError> {
        match self.u8()? {
            0 => Ok(None),
            _ => self.bytes().map(Some),
        }
    }

    /// Reads an item count; same as [`Reader::u32`].
    #[inline]
    pub fn count(&mut self) -> Result<usize, WireError> {
        self.u32()
    }

    /// Reads length-prefixed bytes.
    #[inline]
    pub fn bytes(&mut self) -> Result<&'a [u8], WireError> {
        let n = self.u32()?;
        self.take(n)
    }

    /// Reads length-prefixed UTF-8.
    #[inline]
    pub fn str(&mut self) -> Result<&'a str, WireError> {
        let offset = self.pos;
        std::str::from_utf8(self.bytes()?).map_err(|_| WireError::BadUtf8 { offset })
    }

    /// Reads one record.
    #[inline]
    pub fn record(&mut self) -> Result<RecordRef<'a>, WireError> {
        let key = if self.u8()? & HAS_KEY != 0 {
            Some(self.bytes()?)
        } else {
            None
        };
        let value = self.bytes()?;
        let timestamp = self.i64()?;
        let count = self.u32()?;
        let start = self.pos;
        for _ in 0..count {
            self.str()?;
            self.bytes()?;
        }
        let headers = Headers {
            raw: &self.buf[start..self.pos],
            count,
        };
        Ok(RecordRef {
            key,
            value,
            timestamp,
            headers,
        })
    }

    /// Reads an outcome tag: `Ok(Ok(()))` when a payload follows,
    /// `Ok(Err(message))` for a failed outcome.
    #[inline]
    pub fn outcome(&mut self) -> Result<Result<(), &'a str>, WireError> {
        let offset = self.pos;
        match self.u8()? {
            OK => Ok(Ok(())),
            ERR => Ok(Err(self.str()?)),
            tag => Err(WireError::BadTag { offset, tag }),
        }
    }

    /// Checks that the whole buffer was read.
    #[inline]
    pub fn end(&self) -> Result<(), WireError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(WireError::TrailingBytes { offset: self.pos })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    type Owned = (Option<Vec<u8>>, Vec<u8>, i64, Vec<(String, Vec<u8>)>);

    fn encode(records: &[Owned]) -> Vec<u8> {
        let mut w = Writer::batch(records.len());
        for (k, v, ts, h) in records {
            w.record(
                k.as_deref(),
                v,
                *ts,
                h.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
            );
        }
        w.finish()
    }

    proptest! {
        #[test]
        fn records_round_trip(records in proptest::collection::vec(
            (proptest::option::of(any::<Vec<u8>>()), any::<Vec<u8>>(), any::<i64>(),
             proptest::collection::vec((".*", any::<Vec<u8>>()), 0..3)), 0..8)) {
            let bytes = encode(&records);
            let mut r = Reader::new(&bytes);
            prop_assert_eq!(r.count().unwrap(), records.len());
            for (k, v, ts, h) in &records {
                let rec = r.record().unwrap();
                prop_assert_eq!(rec.key, k.as_deref());
                prop_assert_eq!(rec.value, v.as_slice());
                prop_assert_eq!(rec.timestamp, *ts);
                let h2: Vec<(String, Vec<u8>)> =
                    rec.headers.iter().map(|(n, v)| (n.to_string(), v.to_vec())).collect();
                prop_assert_eq!(&h2, h);
            }
            prop_assert!(r.end().is_ok());
        }

        #[test]
        fn truncated_input_is_an_error_not_a_panic(cut in 0usize..64) {
            let bytes = encode(&[(Some(b"key".to_vec()), b"value".to_vec(), 1, vec![("h".into(), b"x".to_vec())])]);
            let cut = cut.min(bytes.len() - 1);
            let mut r = Reader::new(&bytes[..cut]);
            let res = r.count().and_then(|_| r.record());
            prop_assert!(res.is_err());
        }
    }

    #[test]
    fn outcomes_carry_messages() {
        let mut w = Writer::batch(2);
        w.ok();
        w.u8(1);
        w.err("bad record");
        let bytes = w.finish();
        let mut r = Reader::new(&bytes);
        assert_eq!(r.count(), Ok(2));
        assert_eq!(r.outcome(), Ok(Ok(())));
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.outcome(), Ok(Err("bad record")));
        assert_eq!(r.end(), Ok(()));
    }

    #[test]
    fn unknown_tag_is_reported_with_its_offset() {
        let bytes = [1, 0, 0, 0, 9];
        let mut r = Reader::new(&bytes);
        r.count().unwrap();
        assert_eq!(r.outcome(), Err(WireError::BadTag { offset: 4, tag: 9 }));
    }
}
