//! Batches of records: decoded, or still in the flat encoding of
//! `docs/wire-format.md` (spans of one shared buffer). Encoded batches travel
//! from the generator through plugins, routers and edges to the sinks, so a
//! record is decoded only where something needs its fields, and a batch costs
//! one reference count, not one per record.

use crate::record::Record;
use bytes::Bytes;
use mailer_wire::{Reader, RecordRef, Writer};

/// Where one encoded record lies in its buffer: `start..end`.
pub type Span = (u32, u32);

/// Records in the flat encoding: spans of one shared buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedRecords {
    buf: Bytes,
    spans: Vec<Span>,
}

/// A batch of records in stream order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Batch {
    /// Decoded records.
    Records(Vec<Record>),
    /// Records still encoded.
    Encoded(EncodedRecords),
}

impl EncodedRecords {
    /// Records at `spans` of `buf`; every span must hold one well-formed
    /// record (as checked when the buffer was parsed).
    pub fn new(buf: Bytes, spans: Vec<Span>) -> Self {
        Self { buf, spans }
    }

    /// `records` encoded, as a stage would receive them from a plugin.
    #[cfg(test)]
    pub(crate) fn of(records: &[Record]) -> Self {
        let buf = Bytes::from(Batch::Records(records.to_vec()).encode().into_owned());
        let mut r = Reader::new(&buf);
        let n = r.count().expect("a batch just encoded");
        let spans = (0..n)
            .map(|_| {
                let start = r.offset() as u32;
                r.record().expect("a batch just encoded");
                (start, r.offset() as u32)
            })
            .collect();
        Self::new(buf, spans)
    }

    /// The record at index `i`, its payloads sliced from the buffer.
    pub fn record(&self, i: usize) -> Record {
        decode_at(&self.buf, self.spans[i].0)
    }

    /// Record `i` read where it lies.
    fn view(&self, i: usize) -> RecordRef<'_> {
        Reader::at(&self.buf, self.spans[i].0 as usize)
            .record()
            .expect("spans point at checked records")
    }

    /// The key of record `i` (empty when it has none), without decoding the
    /// rest.
    fn key(&self, i: usize) -> &[u8] {
        self.view(i).key.unwrap_or_default()
    }

    /// Whether the buffer is exactly `count` followed by the records, in
    /// order: then it already is a plugin's input batch.
    fn is_whole_batch(&self) -> bool {
        let count_ok = self.buf.get(..4) == Some(&(self.spans.len() as u32).to_le_bytes()[..]);
        let mut at = 4;
        count_ok
            && self.spans.iter().all(|&(start, end)| {
                let ok = start == at;
                at = end;
                ok
            })
            && at as usize == self.buf.len()
    }
}

/// Writes records straight into the flat encoding (sources that make
/// records: no `Bytes` per record).
pub struct EncodedBuilder {
    w: Writer,
    spans: Vec<Span>,
}

impl EncodedBuilder {
    /// A builder for exactly `count` records of about `bytes` bytes in all.
    pub fn new(count: usize, bytes: usize) -> Self {
        Self {
            w: Writer::with_capacity(count, bytes),
            spans: Vec::with_capacity(count),
        }
    }

    /// Appends one record without headers.
    pub fn push(&mut self, key: Option<&[u8]>, value: &[u8], timestamp: i64) {
        let start = self.w.len() as u32;
        self.w.record(key, value, timestamp, std::iter::empty());
        self.spans.push((start, self.w.len() as u32));
    }

    /// The encoded records.
    pub fn finish(self) -> EncodedRecords {
        let mut w = self.w;
        w.set_count(self.spans.len());
        EncodedRecords::new(Bytes::from(w.finish()), self.spans)
    }
}

/// Decodes the well-formed record at `offset` of `buf`.
pub fn decode_at(buf: &Bytes, offset: u32) -> Record {
    let r = Reader::at(buf, offset as usize)
        .record()
        .expect("spans point at records checked when their buffer was parsed");
    to_record(buf, r)
}

/// A host record whose payloads are slices of `buf` (no copy).
pub fn to_record(buf: &Bytes, r: RecordRef<'_>) -> Record {
    Record {
        key: r.key.map(|k| buf.slice_ref(k)),
        value: buf.slice_ref(r.value),
        timestamp: r.timestamp,
        headers: if r.headers.is_empty() {
            Vec::new()
        } else {
            r.headers
                .iter()
                .map(|(n, v)| (n.to_owned(), buf.slice_ref(v)))
                .collect()
        },
    }
}

/// Appends one record to a batch being written.
pub fn write_record(w: &mut Writer, r: &Record) {
    w.record(
        r.key.as_deref(),
        &r.value,
        r.timestamp,
        r.headers.iter().map(|(n, v)| (n.as_str(), v.as_ref())),
    );
}

impl Batch {
    /// How many records.
    pub fn len(&self) -> usize {
        match self {
            Batch::Records(r) => r.len(),
            Batch::Encoded(e) => e.spans.len(),
        }
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records, decoded.
    pub fn into_records(self) -> Vec<Record> {
        match self {
            Batch::Records(r) => r,
            Batch::Encoded(e) => e
                .spans
                .iter()
                .map(|&(start, _)| decode_at(&e.buf, start))
                .collect(),
        }
    }

    /// The largest event time in the batch.
    pub fn max_timestamp(&self) -> Option<i64> {
        match self {
            Batch::Records(r) => r.iter().map(|r| r.timestamp).max(),
            Batch::Encoded(e) => e
                .spans
                .iter()
                .filter_map(|&(start, _)| Reader::at(&e.buf, start as usize).record().ok())
                .map(|r| r.timestamp)
                .max(),
        }
    }

    /// The record at index `i` (a copy: payloads are shared, not copied).
    pub fn record(&self, i: usize) -> Record {
        match self {
            Batch::Records(r) => r[i].clone(),
            Batch::Encoded(e) => e.record(i),
        }
    }

    /// The key of record `i` (empty when it has none), without decoding
    /// the rest.
    pub fn key_at(&self, i: usize) -> &[u8] {
        match self {
            Batch::Records(r) => r[i].key_bytes(),
            Batch::Encoded(e) => e.key(i),
        }
    }

    /// The key and event time of record `i`, without its value.
    pub fn key_and_time_at(&self, i: usize) -> (Option<Bytes>, i64) {
        match self {
            Batch::Records(r) => (r[i].key.clone(), r[i].timestamp),
            Batch::Encoded(e) => {
                let r = e.view(i);
                (r.key.map(|k| e.buf.slice_ref(k)), r.timestamp)
            }
        }
    }

    /// Appends record `i` to a batch being written; an encoded record is
    /// copied as it is.
    pub fn write_at(&self, i: usize, w: &mut Writer) {
        match self {
            Batch::Records(r) => write_record(w, &r[i]),
            Batch::Encoded(e) => {
                let (start, end) = e.spans[i];
                w.raw(&e.buf[start as usize..end as usize]);
            }
        }
    }

    /// The batch in the flat encoding, as a plugin's input: borrowed when
    /// the batch is one already.
    pub fn encode(&self) -> std::borrow::Cow<'_, [u8]> {
        if let Batch::Encoded(e) = self
            && e.is_whole_batch()
        {
            return std::borrow::Cow::Borrowed(&e.buf[..]);
        }
        std::borrow::Cow::Owned(self.encode_owned())
    }

    fn encode_owned(&self) -> Vec<u8> {
        let bytes: usize = match self {
            Batch::Records(records) => records
                .iter()
                .map(|r| 21 + r.value.len() + r.key.as_ref().map_or(0, |k| 4 + k.len()))
                .sum(),
            Batch::Encoded(e) => e.spans.iter().map(|&(s, t)| (t - s) as usize).sum(),
        };
        let mut w = Writer::with_capacity(self.len(), bytes);
        for i in 0..self.len() {
            self.write_at(i, &mut w);
        }
        w.finish()
    }

    /// Calls `f` with each record in order (decoding encoded ones one by one).
    pub fn try_for_each<E>(&self, mut f: impl FnMut(&Record) -> Result<(), E>) -> Result<(), E> {
        match self {
            Batch::Records(r) => r.iter().try_for_each(f),
            Batch::Encoded(e) => (0..e.spans.len()).try_for_each(|i| f(&e.record(i))),
        }
    }

    /// Splits the batch into `n` parts by `part_of(key)` (the empty key for
    /// records without one), keeping the order within each part. Encoded
    /// batches split into spans of the same buffer: nothing is copied.
    pub fn split_by_key(self, n: usize, part_of: impl Fn(&[u8]) -> usize) -> Vec<Batch> {
        let parts: Vec<Option<usize>> = (0..self.len()).map(|i| Some(part_of(self.key_at(i)))).collect();
        self.partition(n, &parts)
    }

    /// Splits the batch into `n` parts: record `i` goes to part `parts[i]`
    /// (none: dropped), in order within each part. Encoded batches split
    /// into spans of the same buffer: nothing is copied.
    pub fn partition(self, n: usize, parts: &[Option<usize>]) -> Vec<Batch> {
        match self {
            Batch::Records(records) => {
                let mut out: Vec<Vec<Record>> = (0..n).map(|_| Vec::new()).collect();
                for (r, part) in records.into_iter().zip(parts) {
                    if let Some(p) = part {
                        out[*p].push(r);
                    }
                }
                out.into_iter().map(Batch::Records).collect()
            }
            Batch::Encoded(e) => {
                let mut out: Vec<Vec<Span>> = (0..n).map(|_| Vec::new()).collect();
                for (&span, part) in e.spans.iter().zip(parts) {
                    if let Some(p) = part {
                        out[*p].push(span);
                    }
                }
                out.into_iter()
                    .map(|spans| Batch::Encoded(EncodedRecords::new(e.buf.clone(), spans)))
                    .collect()
            }
        }
    }

    /// Keeps the records whose flag is true.
    pub fn select(self, keep: &[bool]) -> Batch {
        match self {
            Batch::Records(r) => Batch::Records(
                r.into_iter()
                    .zip(keep)
                    .filter_map(|(r, &k)| k.then_some(r))
                    .collect(),
            ),
            Batch::Encoded(e) => Batch::Encoded(EncodedRecords {
                spans: e
                    .spans
                    .into_iter()
                    .zip(keep)
                    .filter_map(|(s, &k)| k.then_some(s))
                    .collect(),
                buf: e.buf,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records() -> Vec<Record> {
        (0..3)
            .map(|i| Record::new(Some(Bytes::from(format!("k{i}"))), format!("v{i}"), i))
            .collect()
    }

    fn encoded(records: &[Record]) -> EncodedRecords {
        EncodedRecords::of(records)
    }

    #[test]
    fn encoded_and_decoded_batches_agree() {
        let recs = records();
        let enc = Batch::Encoded(encoded(&recs));
        assert_eq!(enc.encode(), Batch::Records(recs.clone()).encode());
        assert_eq!(enc.record(1), recs[1]);
        let decoded = Batch::Records(recs.clone());
        for b in [&enc, &decoded] {
            assert_eq!(b.key_at(2), b"k2");
            assert_eq!(b.key_and_time_at(1), (recs[1].key.clone(), 1));
            let mut w = Writer::batch(1);
            b.write_at(0, &mut w);
            assert_eq!(
                w.finish(),
                Batch::Records(recs[..1].to_vec()).encode().into_owned()
            );
        }
        assert_eq!(enc.clone().into_records(), recs);
        let kept = enc.clone().select(&[true, false, true]).into_records();
        assert_eq!(kept, vec![recs[0].clone(), recs[2].clone()]);
        let parts = enc.split_by_key(2, |k| usize::from(k == b"k1"));
        let parts: Vec<Vec<Record>> = parts.into_iter().map(Batch::into_records).collect();
        assert_eq!(
            parts,
            vec![vec![recs[0].clone(), recs[2].clone()], vec![recs[1].clone()]]
        );
    }

    #[test]
    fn built_batches_are_plugin_input_as_they_are() {
        let recs = records();
        let mut b = EncodedBuilder::new(3, 64);
        for r in &recs {
            b.push(r.key.as_deref(), &r.value, r.timestamp);
        }
        let built = b.finish();
        assert!(built.is_whole_batch());
        let built = Batch::Encoded(built);
        assert_eq!(built.encode(), Batch::Records(recs.clone()).encode());
        assert_eq!(built.into_records(), recs);
    }
}
