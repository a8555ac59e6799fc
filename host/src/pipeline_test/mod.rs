//! `mailer test`: a pipeline run on a test case — the case's records in
//! place of its sources, every sink's output kept and compared with what
//! the case expects — before it touches production.
//!
//! ```text
//! <case>/input/<source>.<ext>           a `file` source's input, read as the
//!                                       manifest says (format, key_field, …)
//! <case>/input/<source>.jsonl|.txt      any other source's records
//! <case>/expected/<sink>.jsonl|.txt     what each sink must get
//! <case>/case.toml                      optional: `order = "whole"`
//! ```
//! A run of a case takes no checkpoints, serves no admin API, keeps its
//! state in memory and never opens the manifest's sources and sinks (Kafka,
//! PostgreSQL, files): their `${VAR}`s need not be set.

mod diff;
mod ends;
pub(crate) mod records_file;

pub use diff::Order;
pub use records_file::{CaseFileError, CaseFormat, CaseRecord};

use crate::config_string::ConfigString;
use crate::connectors::{Endpoint, OpenSink, SourceSpec};
use crate::manifest::{Manifest, ManifestError};
use crate::plugin::{PluginEngine, PluginError};
use crate::runtime::{RunError, Shutdown};
use ends::{CaseSource, Collected, CollectingSink};
use std::path::{Path, PathBuf};

/// What a `${VAR}` the environment lacks stands for in a test run: the
/// connectors that would use it are replaced.
const UNSET: &str = "mailer-test-unset-variable";

/// Why a case could not be run (a case that runs and differs is a
/// [`CaseReport`] with differences, not an error).
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// The manifest is wrong.
    #[error(transparent)]
    Manifest(#[from] ManifestError),
    /// The plugin engine could not start.
    #[error(transparent)]
    Plugin(#[from] PluginError),
    /// A case's file is wrong.
    #[error(transparent)]
    CaseFile(#[from] CaseFileError),
    /// A case lacks a file it needs, or its settings are wrong.
    #[error("case `{case}`: {message}")]
    Case {
        /// The case's folder.
        case: PathBuf,
        /// What is missing or wrong.
        message: String,
    },
    /// The run failed.
    #[error("case `{case}`: the run failed: {cause}")]
    Run {
        /// The case's folder.
        case: PathBuf,
        /// Why.
        cause: Box<RunError>,
    },
}

/// How one case went.
#[derive(Debug)]
pub struct CaseReport {
    /// The case's folder.
    pub case: PathBuf,
    /// Each compared sink and the records it got.
    pub sinks: Vec<(String, usize)>,
    /// Each sink whose output differs, with its first difference.
    pub differences: Vec<(String, String)>,
}

impl CaseReport {
    /// Whether every sink got what the case expects.
    pub fn passed(&self) -> bool {
        self.differences.is_empty()
    }
}

/// The cases of `manifest` when none is named: the folders in
/// `tests/<manifest's file stem>/` beside it, in name order.
pub fn default_cases(manifest: &Path) -> Vec<PathBuf> {
    let dir = cases_folder(manifest);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

/// Where [`default_cases`] looks.
pub fn cases_folder(manifest: &Path) -> PathBuf {
    let stem = manifest.file_stem().unwrap_or_default();
    manifest
        .parent()
        .unwrap_or(Path::new("."))
        .join("tests")
        .join(stem)
}

/// What a run of a case does with the sinks' outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectations {
    /// Compares them with the case's expected files.
    Compare,
    /// Writes them as the case's expected files (`expected/<sink>.jsonl`,
    /// or `.txt` where the case has one), to be reviewed before they are
    /// kept.
    Update,
}

/// Runs `manifest` on `case` and compares every sink's output (or writes
/// it as the expected one).
pub fn run_case(manifest: &Path, case: &Path, expectations: Expectations) -> Result<CaseReport, TestError> {
    let order = case_order(case)?;
    let text = std::fs::read_to_string(manifest).map_err(|e| ManifestError {
        file: manifest.to_owned(),
        line: 1,
        column: 1,
        message: format!("cannot read the manifest: {e}"),
    })?;
    let mut m = Manifest::parse(manifest, text, |name| {
        Some(std::env::var(name).unwrap_or_else(|_| UNSET.to_owned()))
    })?;
    // A file source reads the case's file instead of its own.
    let mut file_sources = Vec::new();
    let sources = m.spec.source.iter_mut().map(|s| ("source", s.get_mut()));
    let named = m.spec.sources.iter_mut().map(|s| {
        let s = s.get_mut();
        (s.name.as_str(), &mut s.spec)
    });
    for (name, spec) in sources.chain(named) {
        if let SourceSpec::File(file) = spec {
            let input = any_file(&case.join("input"), name).ok_or_else(|| TestError::Case {
                case: case.to_owned(),
                message: format!("no input for file source `{name}`: put its lines in input/{name}.<ext>"),
            })?;
            // Relative paths are the manifest's folder's.
            let input = std::path::absolute(&input).unwrap_or(input);
            file.path = ConfigString::new(input.display().to_string());
            file_sources.push(name.to_owned());
        }
    }
    // Its ticker times the plugins' deadlines: it lives as long as the run.
    let engine = PluginEngine::new()?;
    let mut plan = crate::plan::build(&m, &engine)?;
    plan.detach();

    let missing = |what: String| TestError::Case {
        case: case.to_owned(),
        message: what,
    };
    for source in plan
        .sources
        .iter_mut()
        .filter(|s| !file_sources.contains(&s.name))
    {
        let (path, format) = records_file::find(&case.join("input"), &source.name).ok_or_else(|| {
            missing(format!(
                "no input for source `{}`: put its records in input/{}.jsonl (or .txt)",
                source.name, source.name
            ))
        })?;
        let records = records_file::read(&path, format)?
            .into_iter()
            .map(|r| r.record)
            .collect();
        source.open = Box::new(move |_| Ok(Box::new(CaseSource::new(records))));
    }
    let mut compared: Vec<(String, Vec<CaseRecord>, Collected)> = Vec::new();
    for sink in &mut plan.sinks {
        if expectations == Expectations::Update {
            compared.push((sink.end.name.clone(), Vec::new(), collect(&mut sink.end)));
            continue;
        }
        let expected = expected_of(case, &sink.end.name)?.ok_or_else(|| {
            missing(format!(
                "nothing expected of sink `{}`: put its records in expected/{}.jsonl (or .txt)",
                sink.end.name, sink.end.name
            ))
        })?;
        compared.push((sink.end.name.clone(), expected, collect(&mut sink.end)));
    }
    // Side outputs are compared when the case expects something of them.
    for side in [plan.dead_letter.as_mut(), plan.late_output.as_mut()]
        .into_iter()
        .flatten()
    {
        let collected = collect(side);
        if let Some(expected) = expected_of(case, &side.name)? {
            compared.push((side.name.clone(), expected, collected));
        }
    }

    crate::runtime::run(plan, &Shutdown::new()).map_err(|cause| TestError::Run {
        case: case.to_owned(),
        cause: Box::new(cause),
    })?;
    drop(engine);
    let mut report = CaseReport {
        case: case.to_owned(),
        sinks: Vec::new(),
        differences: Vec::new(),
    };
    for (sink, expected, collected) in compared {
        let got = collected.lock().expect("collected records lock");
        if expectations == Expectations::Update {
            records_file::write(&case.join("expected"), &sink, &got)?;
            report.sinks.push((sink, got.len()));
            continue;
        }
        if let Some(difference) = diff::first_difference(&expected, &got, order) {
            report.differences.push((sink.clone(), difference));
        }
        report.sinks.push((sink, got.len()));
    }
    Ok(report)
}

/// The file `<dir>/<name>.<any extension>` (or `<dir>/<name>`), if any.
fn any_file(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.file_stem().is_some_and(|s| s == name))
        .collect();
    found.sort();
    found.into_iter().next()
}

/// The records `case` expects of `sink`, when it names any.
fn expected_of(case: &Path, sink: &str) -> Result<Option<Vec<CaseRecord>>, CaseFileError> {
    match records_file::find(&case.join("expected"), sink) {
        Some((path, format)) => Ok(Some(records_file::read(&path, format)?)),
        None => Ok(None),
    }
}

/// Replaces `end` with a sink keeping what it gets.
fn collect(end: &mut Endpoint<OpenSink>) -> Collected {
    let collected = Collected::default();
    let into = collected.clone();
    end.open = Box::new(move |_| Ok(Box::new(CollectingSink::new(into))));
    collected
}

/// The case's `case.toml`: `order = "per-key"` (the default) or `"whole"`.
fn case_order(case: &Path) -> Result<Order, TestError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Settings {
        #[serde(default)]
        order: Option<String>,
    }
    let wrong = |message: String| TestError::Case {
        case: case.to_owned(),
        message,
    };
    if !case.is_dir() {
        return Err(wrong("no such folder".into()));
    }
    let Ok(text) = std::fs::read_to_string(case.join("case.toml")) else {
        return Ok(Order::PerKey);
    };
    let settings: Settings =
        toml::from_str(&text).map_err(|e| wrong(format!("case.toml: {}", e.message())))?;
    match settings.order.as_deref() {
        None | Some("per-key") => Ok(Order::PerKey),
        Some("whole") => Ok(Order::Whole),
        Some(other) => Err(wrong(format!(
            "case.toml: `order` is `per-key` or `whole`, not `{other}`"
        ))),
    }
}
