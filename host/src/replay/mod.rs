//! `mailer replay`: the dead letters of an operator fed back into it —
//! once a fix runs there (the manifest names the fixed plugin) — and
//! through everything after it to the pipeline's sinks, in a run of its
//! own; what fails again goes to a new dead-letter file, in the same form,
//! to replay once more later.
//!
//! The run is the pipeline cut to start at the operator (see
//! [`plan::start_at`]) with the dead letters as its one source. File sinks
//! append instead of starting over; Kafka and PostgreSQL sinks write at
//! least once (a replay takes no checkpoints). An operator whose way to
//! the sinks keeps keyed state is refused: a run of its own would start
//! that state empty.

mod plan;
mod source;

pub use source::{DeadLetterCounts, DeadLetterFile, DeadLetterSource, operators_in};

use crate::config_string::ConfigString;
use crate::connectors::kafka::KafkaSourceSpec;
use crate::connectors::{Endpoint, FileSinkSpec, OpenSource, SinkFormat, SinkSpec, Source, SourceConfig};
use crate::manifest::{Manifest, ManifestError};
use crate::plugin::PluginEngine;
use crate::runtime::Shutdown;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Why a replay did not run, or failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The manifest is not valid.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The plugin engine cannot start.
    #[error(transparent)]
    Plugin(#[from] crate::plugin::PluginError),
    /// The dead letters cannot be read.
    #[error(transparent)]
    DeadLetters(#[from] crate::connectors::ConnectorError),
    /// No operator was named and the dead letters name several (or none).
    #[error("{0}")]
    WhichOperator(String),
    /// The operator's dead letters cannot be replayed into it.
    #[error("cannot replay into operator `{operator}`: {why}")]
    Refused {
        /// The operator.
        operator: String,
        /// Why.
        why: String,
    },
    /// The run failed.
    #[error(transparent)]
    Run(#[from] crate::runtime::RunError),
}

/// What a replay did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayReport {
    /// The operator replayed into.
    pub operator: String,
    /// Its dead letters fed back.
    pub replayed: u64,
    /// Dead letters of other operators, passed over.
    pub passed_over: u64,
    /// Records the sinks got.
    pub written: u64,
    /// Records that failed again, in `failed_again`.
    pub failed: u64,
    /// Where they are.
    pub failed_again: PathBuf,
}

/// Where the dead letters are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadLetters {
    /// A file the dead-letter sink wrote with `format = "json"`.
    File(PathBuf),
    /// A topic on the brokers of the manifest's Kafka dead-letter sink.
    Kafka(String),
}

impl DeadLetters {
    /// `kafka:<topic>`, else a file's path.
    pub fn parse(text: &str) -> Self {
        match text.strip_prefix("kafka:") {
            Some(topic) => DeadLetters::Kafka(topic.to_owned()),
            None => DeadLetters::File(PathBuf::from(text)),
        }
    }
}

impl std::fmt::Display for DeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeadLetters::File(path) => write!(f, "{}", path.display()),
            DeadLetters::Kafka(topic) => write!(f, "topic `{topic}`"),
        }
    }
}

/// Replays `dead_letters` into `operator` (for a file, the one its dead
/// letters name when `None`) of the pipeline `manifest`; what fails again
/// goes to `failed_again`.
pub fn replay(
    manifest: &Path,
    dead_letters: &DeadLetters,
    operator: Option<&str>,
    failed_again: &Path,
) -> Result<ReplayReport, ReplayError> {
    let operator = match (operator, dead_letters) {
        (Some(o), _) => o.to_owned(),
        (None, DeadLetters::File(path)) => the_operator(path)?,
        (None, DeadLetters::Kafka(topic)) => {
            return Err(ReplayError::WhichOperator(format!(
                "name the operator whose dead letters in topic `{topic}` to replay with --operator"
            )));
        }
    };
    let mut m = Manifest::load(manifest)?;
    let read = reader(&m, dead_letters)?;
    for_a_run_of_its_own(&mut m);
    let engine = PluginEngine::new()?;
    let mut plan = crate::plan::build(&m, &engine)?;
    plan.detach();

    let counts = Arc::new(DeadLetterCounts::default());
    let source: Endpoint<OpenSource> = {
        let (operator, counts) = (operator.clone(), counts.clone());
        Endpoint {
            name: "dead-letters".into(),
            description: format!("the dead letters of {dead_letters}"),
            open: Box::new(move |side| {
                let inner = read(side)?;
                Ok(Box::new(DeadLetterSource::new(inner, &operator, counts)) as _)
            }),
        }
    };
    let stateful: Vec<&str> = m
        .spec
        .operators
        .iter()
        .zip(&m.operator_names)
        .filter(|(op, _)| op.get_ref().config().keeps_state())
        .map(|(_, name)| name.as_str())
        .collect();
    plan::start_at(&mut plan, &operator, &|name| stateful.contains(&name), source)?;
    let failed_spec = SinkSpec::File(Box::new(FileSinkSpec {
        path: ConfigString::new(failed_again.display().to_string()),
        format: SinkFormat::Json,
        append: false,
    }));
    plan.dead_letter = Some(
        failed_spec
            .config()
            .endpoint(&m.connector_context(), "dead-letter"),
    );

    let report = crate::runtime::run(plan, &Shutdown::new())?;
    drop(engine);
    Ok(ReplayReport {
        operator,
        replayed: counts.replayed.load(Ordering::Relaxed),
        passed_over: counts.passed_over.load(Ordering::Relaxed),
        written: report.sink_records,
        failed: report.dead_lettered,
        failed_again: failed_again.to_owned(),
    })
}

/// What reads `dead_letters` as they are: the file, or the topic (to its
/// end when the replay starts) on the brokers of `m`'s Kafka dead-letter
/// sink, with its security settings.
fn reader(m: &Manifest, dead_letters: &DeadLetters) -> Result<OpenSource, ReplayError> {
    match dead_letters {
        DeadLetters::File(path) => {
            let path = path.clone();
            Ok(Box::new(move |_| {
                Ok(Box::new(DeadLetterFile::open(&path)?) as Box<dyn Source>)
            }))
        }
        DeadLetters::Kafka(topic) => {
            let Some(SinkSpec::Kafka(sink)) = m.spec.dead_letter.as_ref().map(|d| d.get_ref()) else {
                return Err(ReplayError::WhichOperator(format!(
                    "dead letters in topic `{topic}` are read from the brokers of the manifest's `[dead_letter]`, which is not a Kafka sink: give a file instead"
                )));
            };
            let name = &m.spec.pipeline.get_ref().name;
            let mut spec = KafkaSourceSpec::new(
                sink.bootstrap_servers.value(),
                &[topic],
                &format!("mailer-replay-{name}"),
            );
            spec.bounded = true;
            spec.security = sink.security.clone();
            Ok(spec.endpoint(&m.connector_context(), "dead-letters").open)
        }
    }
}

/// The one operator the dead letters in `path` name.
fn the_operator(path: &Path) -> Result<String, ReplayError> {
    let operators = operators_in(path)?;
    match &operators[..] {
        [(name, _)] if !name.is_empty() => Ok(name.clone()),
        [] => Err(ReplayError::WhichOperator(format!(
            "{} holds no dead letters: nothing to replay",
            path.display()
        ))),
        several => {
            let named: Vec<String> = several.iter().map(|(n, c)| format!("`{n}` ({c})")).collect();
            Err(ReplayError::WhichOperator(format!(
                "the dead letters of {} name several operators: {}; choose one with --operator",
                path.display(),
                named.join(", ")
            )))
        }
    }
}

/// The manifest as a replay runs it: no checkpoints, admin API or cluster;
/// file sinks appending to what the pipeline wrote; exactly-once sinks
/// writing at least once (they commit with checkpoints).
fn for_a_run_of_its_own(m: &mut Manifest) {
    m.spec.checkpoint = None;
    m.spec.admin = None;
    m.spec.cluster = None;
    let sinks = m.spec.sink.iter_mut().map(|s| s.get_mut());
    let named = m.spec.sinks.iter_mut().map(|s| &mut s.get_mut().spec);
    for sink in sinks.chain(named) {
        match sink {
            SinkSpec::File(file) => file.append = true,
            SinkSpec::Kafka(kafka) => kafka.exactly_once = false,
            SinkSpec::Postgres(postgres) => postgres.exactly_once = false,
            SinkSpec::Stdout(_) | SinkSpec::Blackhole(_) => {}
        }
    }
}
