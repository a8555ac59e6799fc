//! The `file` sink, exactly once with checkpoints: each checkpoint records
//! the file's length (and a checksum of the bytes before it), and a run
//! resuming from that checkpoint cuts the file back to that length before
//! it writes, so output written after the checkpoint is written once more,
//! never twice.

use crate::batch::Batch;
use crate::connectors::{ConnectorError, Sink, SinkFormat};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// How many bytes before a checkpoint's length its checksum covers.
const TAIL: u64 = 4096;

/// Where a file sink's output ended at a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FilePosition {
    /// The file's length.
    length: u64,
    /// XXH3 of the (up to [`TAIL`]) bytes before `length`.
    tail_xxh3: u64,
}

/// Writes records to a file, one line each; `flush` also syncs to disk.
pub struct FileSink {
    path: PathBuf,
    out: BufWriter<File>,
    format: SinkFormat,
    append: bool,
    /// Bytes in the file, written or buffered.
    length: u64,
}

impl FileSink {
    /// Opens (or creates) the file at `path`; [`Sink::resume`] then cuts it
    /// back to a checkpoint's length, or, on a fresh start, empties it
    /// unless `append`.
    pub fn create(path: &Path, format: SinkFormat, append: bool) -> Result<Self, ConnectorError> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .read(true)
            .truncate(false)
            .open(path)
            .map_err(|source| ConnectorError::Io {
                what: "creating",
                path: path.display().to_string(),
                source,
            })?;
        let length = file.metadata().map_or(0, |m| m.len());
        let mut sink = Self {
            path: path.to_owned(),
            out: BufWriter::with_capacity(256 * 1024, file),
            format,
            append,
            length,
        };
        sink.out
            .seek(SeekFrom::End(0))
            .map_err(|e| sink.io_error("opening", e))?;
        Ok(sink)
    }

    fn io_error(&self, what: &'static str, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io {
            what,
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Cuts the file to `length` and writes from there.
    fn cut_to(&mut self, length: u64) -> std::io::Result<()> {
        let file = self.out.get_mut();
        file.set_len(length)?;
        file.seek(SeekFrom::Start(length))?;
        file.sync_all()?;
        self.length = length;
        Ok(())
    }

    /// Goes back to where the checkpoint's `position` says the output
    /// ended, refusing a file that does not hold that output.
    fn rewind(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let refused = |message: String| {
            ConnectorError::Unsupported(format!("the file sink `{}`: {message}", self.path.display()))
        };
        let p: FilePosition = serde_json::from_value(position.clone()).map_err(|e| {
            refused(format!(
                "the checkpoint's position `{position}` is not a file position: {e}"
            ))
        })?;
        if self.length < p.length {
            return Err(refused(format!(
                "the file has {} bytes, but the checkpoint resumed from had written {}: it was cut or replaced outside mailer. Put the file back, or start over with `mailer run --fresh`",
                self.length, p.length
            )));
        }
        let sum = tail_xxh3(self.out.get_ref(), p.length).map_err(|e| self.io_error("reading", e))?;
        if sum != p.tail_xxh3 {
            return Err(refused(format!(
                "the bytes before offset {} differ from what the checkpoint resumed from had written: the file was changed outside mailer. Put it back, or start over with `mailer run --fresh`",
                p.length
            )));
        }
        if self.length > p.length {
            tracing::info!(
                path = %self.path.display(),
                from = self.length,
                to = p.length,
                "cutting the file sink's output back to the checkpoint"
            );
        }
        self.cut_to(p.length).map_err(|e| self.io_error("cutting", e))
    }
}

impl Sink for FileSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let (format, out) = (self.format, &mut self.out);
        let mut counted = CountingWriter { inner: out, bytes: 0 };
        let res = batch.try_for_each(|r| format.write(&mut counted, r));
        self.length += counted.bytes;
        res.map_err(|e| self.io_error("writing", e))
    }

    fn idle(&mut self) -> Result<(), ConnectorError> {
        let res = self.out.flush();
        res.map_err(|e| self.io_error("writing", e))
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        let res = self.out.flush().and_then(|()| self.out.get_ref().sync_data());
        res.map_err(|e| self.io_error("writing", e))
    }

    fn position(&self) -> Option<serde_json::Value> {
        // Called right after `flush`: the file holds every byte.
        match tail_xxh3(self.out.get_ref(), self.length) {
            Ok(tail_xxh3) => Some(
                serde_json::to_value(FilePosition {
                    length: self.length,
                    tail_xxh3,
                })
                .expect("serialises"),
            ),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot read back the file sink's tail");
                None
            }
        }
    }

    fn resume(&mut self, position: Option<&serde_json::Value>) -> Result<(), ConnectorError> {
        match position {
            Some(p) => self.rewind(p),
            None if self.append => Ok(()),
            None => self.cut_to(0).map_err(|e| self.io_error("emptying", e)),
        }
    }
}

/// XXH3 of the (up to [`TAIL`]) bytes of `file` before `length`; leaves
/// the file's offset at its end.
fn tail_xxh3(mut file: &File, length: u64) -> std::io::Result<u64> {
    let from = length.saturating_sub(TAIL);
    let mut tail = Vec::with_capacity((length - from) as usize);
    file.seek(SeekFrom::Start(from))?;
    file.take(length - from).read_to_end(&mut tail)?;
    file.seek(SeekFrom::End(0))?;
    Ok(xxhash_rust::xxh3::xxh3_64(&tail))
}

/// Counts the bytes written through it.
struct CountingWriter<'a, W: Write> {
    inner: &'a mut W,
    bytes: u64,
}

impl<W: Write> Write for CountingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    fn batch(values: &[&str]) -> Batch {
        Batch::Records(
            values
                .iter()
                .map(|v| Record::new(None, v.to_string(), 0))
                .collect(),
        )
    }

    fn sink(path: &Path, append: bool) -> FileSink {
        FileSink::create(path, SinkFormat::Value, append).unwrap()
    }

    #[test]
    fn a_resumed_sink_cuts_what_followed_its_checkpoint_and_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let mut first = sink(&path, false);
        first.resume(None).unwrap();
        first.write(&batch(&["a", "b"])).unwrap();
        first.flush().unwrap();
        let at_checkpoint = first.position().unwrap();
        first.write(&batch(&["c"])).unwrap();
        first.flush().unwrap();
        drop(first);

        let mut second = sink(&path, false);
        second.resume(Some(&at_checkpoint)).unwrap();
        second.write(&batch(&["c", "d"])).unwrap();
        second.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "a\nb\nc\nd\n");
    }

    #[test]
    fn a_fresh_start_empties_the_file_unless_it_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        std::fs::write(&path, "old\n").unwrap();
        let mut appending = sink(&path, true);
        appending.resume(None).unwrap();
        appending.write(&batch(&["new"])).unwrap();
        appending.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "old\nnew\n");
        let mut fresh = sink(&path, false);
        fresh.resume(None).unwrap();
        fresh.flush().unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
    }

    #[test]
    fn a_file_shorter_than_or_changed_since_the_checkpoint_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.txt");
        let mut s = sink(&path, false);
        s.resume(None).unwrap();
        s.write(&batch(&["abc", "def"])).unwrap();
        s.flush().unwrap();
        let position = s.position().unwrap();
        drop(s);

        std::fs::write(&path, "abc\ndeX\n").unwrap();
        let err = sink(&path, false)
            .resume(Some(&position))
            .unwrap_err()
            .to_string();
        assert!(err.contains("changed outside mailer"), "{err}");
        std::fs::write(&path, "abc\n").unwrap();
        let err = sink(&path, false)
            .resume(Some(&position))
            .unwrap_err()
            .to_string();
        assert!(err.contains("has 4 bytes"), "{err}");
    }
}
