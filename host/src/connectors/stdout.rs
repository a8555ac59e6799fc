//! The `stdout` sink.

use super::{ConnectorError, Sink, SinkFormat};
use crate::batch::Batch;
use std::io::{BufWriter, Stdout, Write};

/// Writes records to standard output, one line each.
pub struct StdoutSink {
    out: BufWriter<Stdout>,
    format: SinkFormat,
}

impl StdoutSink {
    /// A sink in this format.
    pub fn new(format: SinkFormat) -> Self {
        Self {
            out: BufWriter::with_capacity(64 * 1024, std::io::stdout()),
            format,
        }
    }
}

fn io_error(source: std::io::Error) -> ConnectorError {
    ConnectorError::Io {
        what: "writing",
        path: "<stdout>".into(),
        source,
    }
}

impl Sink for StdoutSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let (format, out) = (self.format, &mut self.out);
        batch.try_for_each(|r| format.write(out, r)).map_err(io_error)
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.out.flush().map_err(io_error)
    }

    fn idle(&mut self) -> Result<(), ConnectorError> {
        self.flush()
    }
}
