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

pub use source::{DeadLetterCounts, DeadLetterSource, operators_in};

use crate::config_string::ConfigString;
use crate::connectors::{Endpoint, FileSinkSpec, OpenSource, SinkFormat, SinkSpec};
use crate::manifest::{Manifest, ManifestError, OperatorSpec};
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

/// Replays the dead letters in `dead_letters` (a file the dead-letter sink
/// wrote with `format = "json"`) into `operator` (the one the dead letters
/// name when `None`) of the pipeline `manifest`; what fails again goes to
/// `failed_again`.
pub fn replay(
    manifest: &Path,
    dead_letters: &Path,
    operator: Option<&str>,
    failed_again: &Path,
) -> Result<ReplayReport, ReplayError> {
    let operator = match operator {
        Some(o) => o.to_owned(),
        None => the_operator(dead_letters)?,
    };
    let mut m = Manifest::load(manifest)?;
    for_a_run_of_its_own(&mut m);
    let engine = PluginEngine::new()?;
    let mut plan = crate::plan::build(&m, &engine)?;
    plan.detach();

    let counts = Arc::new(DeadLetterCounts::default());
    let source: Endpoint<OpenSource> = {
        let (path, operator, counts) = (dead_letters.to_owned(), operator.clone(), counts.clone());
        Endpoint {
            name: "dead-letters".into(),
            description: format!("the dead letters of {}", dead_letters.display()),
            open: Box::new(move |_| Ok(Box::new(DeadLetterSource::open(&path, &operator, counts)?) as _)),
        }
    };
    let stateful: Vec<&str> = m
        .spec
        .operators
        .iter()
        .zip(&m.operator_names)
        .filter(|(op, _)| keeps_state(op.get_ref()))
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

/// Whether operator `op` keeps keyed state.
fn keeps_state(op: &OperatorSpec) -> bool {
    matches!(
        op,
        OperatorSpec::Reduce(_)
            | OperatorSpec::Process(_)
            | OperatorSpec::CoProcess(_)
            | OperatorSpec::Window(_)
            | OperatorSpec::Aggregate(_)
            | OperatorSpec::IntervalJoin(_)
            | OperatorSpec::LookupJoin(_)
    )
}
