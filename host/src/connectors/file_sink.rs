//! The `file` sink.

use super::{ConnectorError, Sink, SinkFormat};
use crate::batch::Batch;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// Writes records to a file, one line each; `flush` also syncs to disk.
pub struct FileSink {
    path: PathBuf,
    out: BufWriter<File>,
    format: SinkFormat,
}

impl FileSink {
    /// Creates (or truncates, unless `append`) the file at `path`.
    pub fn create(path: &Path, format: SinkFormat, append: bool) -> Result<Self, ConnectorError> {
        let file = OpenOptions::new()
            .create(true)
            .write(true)
            .append(append)
            .truncate(!append)
            .open(path)
            .map_err(|source| ConnectorError::Io {
                what: "creating",
                path: path.display().to_string(),
                source,
            })?;
        Ok(Self {
            path: path.to_owned(),
            out: BufWriter::with_capacity(256 * 1024, file),
            format,
        })
    }

    fn io_error(&self, source: std::io::Error) -> ConnectorError {
        ConnectorError::Io {
            what: "writing",
            path: self.path.display().to_string(),
            source,
        }
    }
}

impl Sink for FileSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let (format, out) = (self.format, &mut self.out);
        let res = batch.try_for_each(|r| format.write(out, r));
        res.map_err(|e| self.io_error(e))
    }

    fn idle(&mut self) -> Result<(), ConnectorError> {
        let res = self.out.flush();
        res.map_err(|e| self.io_error(e))
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        let res = self.out.flush().and_then(|()| self.out.get_ref().sync_data());
        res.map_err(|e| self.io_error(e))
    }
}
