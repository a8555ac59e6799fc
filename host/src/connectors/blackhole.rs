//! The `blackhole` sink: counts and discards, for benchmarks.

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
