//! What every connector's manifest table implements: the `${VAR}` fields
//! to fill, the checks serde cannot make, the one-line description and how
//! to open it. The manifest parses a table into the connector's own spec
//! (see [`super::registry`]) and asks it through these traits; it knows no
//! connector by name.

use super::postgres::TableCheck;
use super::{ConnectorError, Sink, Source};
pub use crate::checkpoint::CommittedCheckpoint;
pub use crate::config_problem::{ConfigProblem, ProblemAt};
use crate::config_string::ConfigString;
pub use crate::config_string::{ConfigStrings, shown};
use crate::failure::{FailurePolicy, SideOutput};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Opens a source when the run starts; it may send the records it cannot
/// read to the dead-letter sink.
pub type OpenSource = Box<dyn FnOnce(Option<SideOutput>) -> Result<Box<dyn Source>, ConnectorError> + Send>;
/// Opens a sink when the run starts; it may send the records its system
/// refuses to the dead-letter sink.
pub type OpenSink = Box<dyn FnOnce(Option<SideOutput>) -> Result<Box<dyn Sink>, ConnectorError> + Send>;

/// Checks, before a run, that the sink's table fits its mapping: `Err`
/// names each mismatch.
pub type SinkCheck = Box<dyn Fn() -> Result<TableCheck, ConnectorError> + Send + Sync>;

/// A source or sink: its name, what it is, and how to open it.
pub struct Endpoint<F> {
    /// Its unique name in the pipeline (`source`, `sink`, `dead-letter`
    /// and `late-output` in a linear one).
    pub name: String,
    /// A one-line description (never holding a secret).
    pub description: String,
    /// Opens it.
    pub open: F,
}

/// What a connector is told of the pipeline around it.
pub struct ConnectorContext<'a> {
    /// The pipeline's name (a sink that commits with checkpoints records
    /// its progress under it).
    pub pipeline: &'a str,
    /// The manifest's folder: relative paths are relative to it.
    pub dir: &'a Path,
    /// The checkpoint interval, when the pipeline takes checkpoints.
    pub checkpoint_interval: Option<Duration>,
    /// Checkpoints in a row that may fail (`[checkpoint]
    /// tolerable_failures`; 0 without checkpoints): an exactly-once sink
    /// keeps its output pending over each of them.
    pub tolerable_failures: u32,
}

impl ConnectorContext<'_> {
    /// `path` resolved against the manifest's folder.
    pub fn path(&self, path: &ConfigString) -> PathBuf {
        path.path_in(self.dir)
    }
}

/// A source's manifest table (`[source]`, `[[sources]]`).
pub trait SourceConfig {
    /// The fields that may hold `${VAR}`s; filled before [`check`](Self::check).
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        Vec::new()
    }

    /// What happens to input it cannot read (`None`: it reads everything).
    fn on_error(&self) -> Option<FailurePolicy> {
        None
    }

    /// What serde cannot check: values in range, files present.
    fn check(&self, cx: &ConnectorContext<'_>) -> Result<(), ConfigProblem>;

    /// The source named `name`: its description and how to open it.
    fn endpoint(&self, cx: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSource>;
}

/// A sink's manifest table (`[sink]`, `[[sinks]]`, `[dead_letter]`,
/// `[late_output]`).
pub trait SinkConfig {
    /// The fields that may hold `${VAR}`s; filled before [`check`](Self::check).
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        Vec::new()
    }

    /// What happens to records its system refuses (`None`: it refuses none).
    fn on_error(&self) -> Option<FailurePolicy> {
        None
    }

    /// Whether it commits its output with the checkpoints (exactly once).
    fn commits_with_checkpoints(&self) -> bool {
        false
    }

    /// What serde cannot check: values in range, folders present.
    fn check(&self, cx: &ConnectorContext<'_>) -> Result<(), ConfigProblem>;

    /// The sink named `name`: its description and how to open it.
    fn endpoint(&self, cx: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSink>;

    /// For a sink that commits with checkpoints: how to ask which
    /// checkpoint it committed last.
    fn committed_checkpoint(&self, cx: &ConnectorContext<'_>) -> Option<CommittedCheckpoint> {
        let _ = cx;
        None
    }

    /// For a sink writing to a database: how to check, before a run, that
    /// its table fits the mapping.
    fn table_check(&self) -> Option<SinkCheck> {
        None
    }
}

/// The longest record a source reads unless its table says otherwise.
pub(crate) const fn default_max_record_bytes() -> usize {
    16 << 20
}

/// A source whose `format` has no fields cannot take `key_field` or
/// `timestamp_field`: the first of them set is the problem, naming the
/// `format` that has fields (`why`: what this one lacks).
pub(crate) fn fields_need_format(
    key_field: &Option<String>,
    timestamp_field: &Option<String>,
    format: &str,
    why: &str,
) -> Result<(), ConfigProblem> {
    match [("key_field", key_field), ("timestamp_field", timestamp_field)]
        .into_iter()
        .find_map(|(key, v)| v.as_ref().map(|_| key))
    {
        Some(key) => Err(ConfigProblem::field(
            key,
            format!("`{key}` needs `format = \"{format}\"`: {why}"),
        )),
        None => Ok(()),
    }
}

/// The manifest spelling of a unit enum value (`json_lines`).
pub(crate) fn serde_plain(v: &impl serde::Serialize) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}
