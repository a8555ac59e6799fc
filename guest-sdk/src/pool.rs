//! Recycled byte buffers for the batch loops: decoding a record into an
//! owned [`Record`] reuses the buffers of records already handled, so a
//! batch costs no allocation per record once warm.

use crate::Record;
use mailer_wire::RecordRef;

/// Buffers kept at most; more are freed.
const MAX_BUFFERS: usize = 64;
/// Buffers larger than this are freed rather than kept.
const MAX_KEPT_CAPACITY: usize = 64 * 1024;

/// A small stack of empty buffers.
#[derive(Default)]
pub(crate) struct Pool {
    buffers: Vec<Vec<u8>>,
}

impl Pool {
    fn copy(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buf = self.buffers.pop().unwrap_or_default();
        buf.extend_from_slice(bytes);
        buf
    }

    fn give(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() > 0 && buf.capacity() <= MAX_KEPT_CAPACITY && self.buffers.len() < MAX_BUFFERS {
            buf.clear();
            self.buffers.push(buf);
        }
    }

    /// An owned copy of a record read from a batch.
    pub(crate) fn record(&mut self, r: RecordRef<'_>) -> Record {
        Record {
            key: r.key.map(|k| self.copy(k)),
            value: self.copy(r.value),
            timestamp: r.timestamp,
            headers: if r.headers.is_empty() {
                Vec::new()
            } else {
                r.headers
                    .iter()
                    .map(|(n, v)| (n.to_owned(), v.to_vec()))
                    .collect()
            },
        }
    }

    /// Takes back the buffers of a record that is done with.
    pub(crate) fn recycle(&mut self, r: Record) {
        if let Some(k) = r.key {
            self.give(k);
        }
        self.give(r.value);
    }
}
