//! The ends a test run puts in place of the pipeline's sources and sinks:
//! a case's records in, every record out kept in memory.

use crate::batch::Batch;
use crate::connectors::{ConnectorError, Poll, Sink, Source};
use crate::record::Record;
use std::sync::{Arc, Mutex};

/// A bounded source of a case's records.
pub struct CaseSource {
    records: std::vec::IntoIter<Record>,
}

impl CaseSource {
    /// Gives `records`, then ends.
    pub fn new(records: Vec<Record>) -> Self {
        Self {
            records: records.into_iter(),
        }
    }
}

impl Source for CaseSource {
    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        let batch: Vec<Record> = self.records.by_ref().take(max.max(1)).collect();
        Ok(match batch.is_empty() {
            true => Poll::End,
            false => Poll::Records(Batch::Records(batch)),
        })
    }
}

/// What a sink of a test run got.
pub type Collected = Arc<Mutex<Vec<Record>>>;

/// A sink keeping every record it is given.
pub struct CollectingSink {
    into: Collected,
}

impl CollectingSink {
    /// Keeps the records in `into`.
    pub fn new(into: Collected) -> Self {
        Self { into }
    }
}

impl Sink for CollectingSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        self.into
            .lock()
            .expect("collected records lock")
            .extend(batch.clone().into_records());
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}
