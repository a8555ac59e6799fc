//! The `blackhole` sink: counts and discards, for benchmarks.

use super::config::{ConfigProblem, ConnectorContext, Endpoint, OpenSink, SinkConfig};
use super::{ConnectorError, Sink};
use crate::batch::Batch;

/// Discards every record.
#[derive(Debug, Default)]
pub struct BlackholeSink;

impl Sink for BlackholeSink {
    fn write(&mut self, _batch: &Batch) -> Result<(), ConnectorError> {
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}

/// The `blackhole` sink's manifest table.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlackholeSpec {}

impl SinkConfig for BlackholeSpec {
    fn check(&self, _: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        Ok(())
    }

    fn endpoint(&self, _: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSink> {
        Endpoint {
            name: name.to_owned(),
            description: "blackhole".to_owned(),
            open: Box::new(|_| Ok(Box::new(BlackholeSink) as _)),
        }
    }
}
