//! What every stage thread shares: how it is started, how it fails, and
//! how its records are counted.

use super::Message;
use crate::connectors::ConnectorError;
use crate::failure::OperatorError;
use std::thread::JoinHandle;

/// Why a stage stopped the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum StageError {
    /// An operator failed.
    #[error(transparent)]
    Operator(#[from] OperatorError),
    /// The source failed.
    #[error("source: {0}")]
    Source(ConnectorError),
    /// The sink failed.
    #[error("sink: {0}")]
    Sink(ConnectorError),
    /// Checkpoints failed more often than tolerated.
    #[error("checkpoints: {0}")]
    Checkpoint(crate::checkpoint::CoordinatorError),
    /// A stage thread panicked (a bug in mailer, never a plugin's doing).
    #[error("stage `{0}` panicked")]
    Panicked(String),
}

/// A running stage thread and its name.
pub type StageHandle = (String, JoinHandle<Result<(), StageError>>);

/// Starts a stage on its own named thread.
pub fn spawn_stage(
    name: String,
    f: impl FnOnce() -> Result<(), StageError> + Send + 'static,
) -> std::io::Result<StageHandle> {
    // The thread's events carry the run's fields (the pipeline).
    let run = tracing::Span::current();
    let handle = std::thread::Builder::new()
        .name(name.clone())
        .spawn(move || run.in_scope(f))?;
    Ok((name, handle))
}

/// The records a message carries (0 for markers), for the stage counts.
pub(super) fn record_count(msg: &Message) -> usize {
    msg.batch().map_or(0, |b| b.len())
}
