//! The `stdout` sink.

use super::config::{ConfigProblem, ConnectorContext, Endpoint, OpenSink, SinkConfig, serde_plain};
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

/// The `stdout` sink's manifest table.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StdoutSpec {
    /// `text` (`key<TAB>value`, default), `value` or `json`.
    #[serde(default)]
    pub format: SinkFormat,
}

impl SinkConfig for StdoutSpec {
    fn check(&self, _: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        Ok(())
    }

    fn endpoint(&self, _: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSink> {
        let format = self.format;
        Endpoint {
            name: name.to_owned(),
            description: format!("stdout ({})", serde_plain(&format)),
            open: Box::new(move |_| Ok(Box::new(StdoutSink::new(format)) as _)),
        }
    }
}
