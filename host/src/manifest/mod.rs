//! Pipeline manifests: TOML in, a validated specification out, every problem
//! reported with its file, line and column.

mod admin_address;
mod error;
mod graph;
#[cfg(test)]
mod graph_tests;
#[cfg(test)]
mod parse_tests;
mod spec;
mod validate;
mod validate_cluster;
mod validate_operators;

use crate::config_string::ConfigString;
use crate::connectors::{ConfigProblem, ConnectorContext, ProblemAt};
pub use admin_address::{AdminAddress, NotAnAdminAddress};
pub use error::{ManifestError, line_column};
pub use graph::{Declared, Graph, Stream, unread};
pub use spec::*;
pub use validate_cluster::{
    ClusterPart, ClusterProblem, NOT_KAFKA_SINK, NOT_KAFKA_SOURCE, check_cluster_settings,
    check_cluster_source,
};

use sha2::{Digest, Sha256};
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A loaded and validated manifest.
#[derive(Debug)]
pub struct Manifest {
    /// The manifest file, as given.
    pub file: PathBuf,
    /// The folder relative paths in the manifest are resolved against.
    pub dir: PathBuf,
    /// The manifest's text.
    pub text: String,
    /// SHA-256 of the text, in hex.
    pub hash: String,
    /// The specification, with `${VAR}` placeholders resolved.
    pub spec: ManifestSpec,
    /// Each operator's name, in order.
    pub operator_names: Vec<String>,
    /// What each operator and sink reads.
    pub graph: Graph,
}

impl Manifest {
    /// Reads, parses and validates the manifest at `file`, filling `${VAR}`
    /// placeholders from the process environment.
    pub fn load(file: &Path) -> Result<Self, ManifestError> {
        let text = std::fs::read_to_string(file).map_err(|e| ManifestError {
            file: file.to_owned(),
            line: 1,
            column: 1,
            message: format!("cannot read the manifest: {e}"),
        })?;
        Self::parse(file, text, |name| std::env::var(name).ok())
    }

    /// Parses and validates manifest `text` as if read from `file`, taking
    /// `${VAR}` values from `env`.
    pub fn parse(
        file: &Path,
        text: String,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ManifestError> {
        let spec: ManifestSpec = toml::from_str(&text).map_err(|e| {
            let message = e.message().trim_end();
            let offset = e.span().map_or(0, |s| error::refine_offset(&text, &s, message));
            ManifestError::at(file, &text, offset, message.to_owned())
        })?;
        let dir = file
            .parent()
            .map(Path::to_owned)
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("."));
        let hash = hex::encode(Sha256::digest(text.as_bytes()));
        let mut manifest = Self {
            file: file.to_owned(),
            dir,
            text,
            hash,
            spec,
            operator_names: Vec::new(),
            graph: Graph::default(),
        };
        validate::validate(&mut manifest, &env)?;
        Ok(manifest)
    }

    /// An error located at `key` inside the table spanning `table` (at the
    /// table itself when the key is not written there).
    pub fn error_at(&self, table: &Range<usize>, key: &str, message: impl Into<String>) -> ManifestError {
        let offset = error::key_offset(&self.text, table, key);
        ManifestError::at(&self.file, &self.text, offset, message)
    }

    /// What the manifest's connectors are told of the pipeline.
    pub fn connector_context(&self) -> ConnectorContext<'_> {
        ConnectorContext {
            pipeline: &self.spec.pipeline.get_ref().name,
            dir: &self.dir,
            checkpoint_interval: self.spec.checkpoint.as_ref().map(|c| c.get_ref().interval),
            tolerable_failures: self
                .spec
                .checkpoint
                .as_ref()
                .map_or(0, |c| c.get_ref().tolerable_failures),
        }
    }

    /// The error of a connector's `problem` with its table spanning `table`.
    pub fn problem_at(&self, table: &Range<usize>, problem: ConfigProblem) -> ManifestError {
        match (problem.at, &self.spec.checkpoint) {
            (ProblemAt::Checkpoint(key), Some(c)) => self.error_at(&c.span(), key, problem.message),
            (ProblemAt::Field(key) | ProblemAt::Checkpoint(key), _) => {
                self.error_at(table, key, problem.message)
            }
        }
    }

    /// A path from the manifest, resolved against the manifest's folder.
    pub fn path(&self, value: &ConfigString) -> PathBuf {
        value.path_in(&self.dir)
    }
}
