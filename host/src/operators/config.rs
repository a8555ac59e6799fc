//! What every operator kind's manifest table implements: its name and the
//! streams it reads, the `${VAR}` fields to fill, the checks serde cannot
//! make, and the step it builds for the planner. The manifest parses a
//! table into the kind's own spec (see [`super::registry`]) and asks it
//! through [`OperatorConfig`]; it knows no operator kind by its settings.

use super::Step;
use crate::config_problem::ConfigProblem;
use crate::config_string::{ConfigString, ConfigStrings};
use crate::failure::FailurePolicy;
use crate::plugin::PluginEngine;
use std::path::{Path, PathBuf};

/// An operator kind's manifest table (`[[operators]]` with its `type`).
pub trait OperatorConfig {
    /// The `name` it was given, if any.
    fn name(&self) -> Option<&str>;

    /// The name it gets when none is given (numbered when taken already):
    /// its `type`, or its plugin's file stem.
    fn default_name(&self) -> String;

    /// How it reads its streams.
    fn shape(&self) -> Shape<'_>;

    /// The fields that may hold `${VAR}`s; filled before [`check`](Self::check).
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        Vec::new()
    }

    /// What serde cannot check: values in range, files present, settings
    /// that fit together and fit where it stands.
    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem>;

    /// The step the planner places: its node (its plugin loaded with
    /// `cx.engine` and checked against its world) and where it runs.
    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem>;

    /// Whether it keeps keyed state (a replay of dead letters cannot run
    /// it without its state).
    fn keeps_state(&self) -> bool {
        false
    }

    /// The named outputs it splits its stream into (a `branch`'s), read as
    /// `<name>.<output>`; `None`: its one output, read by its name.
    fn outputs(&self) -> Option<Vec<&str>> {
        None
    }

    /// The JSON fields it expects in each record and skips where missing
    /// (`project`, `rename`): `mailer validate` warns of those a JSON-lines
    /// file source's first records lack.
    fn expected_fields(&self) -> Vec<&str> {
        Vec::new()
    }

    /// Whether it passes on the values it keeps unchanged (a filter, a
    /// `key_by`): a field check sees through it to the source.
    fn passes_values_on(&self) -> bool {
        false
    }
}

/// How an operator reads its streams.
pub enum Shape<'a> {
    /// One stream (`input`), the union of several (`inputs`), or the
    /// operator before it (neither).
    Stream {
        /// The `input` it names.
        input: Option<&'a String>,
        /// The `inputs` it names.
        inputs: Option<&'a Vec<String>>,
    },
    /// Repartitions one stream by key over `parallelism` workers.
    KeyBy {
        /// The `input` it names.
        input: Option<&'a String>,
        /// The `inputs` it names.
        inputs: Option<&'a Vec<String>>,
        /// The keyed workers.
        parallelism: usize,
    },
    /// Two streams told apart (a join): each side's key in the table and
    /// the stream it names (`None`: not given). It runs where its first
    /// side is keyed; [`CheckContext::check_sides`] checks that both are
    /// keyed alike, for a kind that needs them so.
    Sides {
        /// The two sides, as `(key, stream)`.
        sides: [(&'static str, Option<&'a String>); 2],
    },
}

/// What an operator's check is told of the pipeline around it.
pub struct CheckContext<'a> {
    /// Its `type`.
    pub kind: &'static str,
    /// The manifest's folder: relative paths are relative to it.
    pub dir: &'a Path,
    /// Whether the pipeline has a `[dead_letter]` sink.
    pub dead_letter: bool,
    /// Whether the pipeline has a `[late_output]` sink.
    pub late_output: bool,
    /// The pipeline's key groups (`max_parallelism`): the most workers.
    pub max_parallelism: usize,
    /// Whether the stream it reads (its first side's) is keyed.
    pub keyed: bool,
    /// An operator of two sides ([`Shape::Sides`]): what each reads.
    pub sides: Option<[SideRead<'a>; 2]>,
}

/// What one side of an operator of two sides reads.
pub struct SideRead<'a> {
    /// The side's key in the table (`left`, `table`, …).
    pub key: &'static str,
    /// The stream it names.
    pub stream: &'a str,
    /// The keyed workers of that stream (`None`: not keyed).
    pub workers: Option<usize>,
}

impl CheckContext<'_> {
    /// `path` resolved against the manifest's folder.
    pub fn path(&self, path: &ConfigString) -> PathBuf {
        path.path_in(self.dir)
    }

    /// `policy` can run: `dead-letter` needs a `[dead_letter]` sink.
    pub fn check_policy(&self, policy: FailurePolicy) -> Result<(), ConfigProblem> {
        policy
            .check_dead_letter(self.dead_letter)
            .map_err(|message| ConfigProblem::field("on_error", message))
    }

    /// The two sides read streams keyed over the same workers.
    pub fn check_sides(&self) -> Result<(), ConfigProblem> {
        let (Some(sides), what) = (&self.sides, self.kind) else {
            return Ok(());
        };
        if let Some(side) = sides.iter().find(|s| s.workers.is_none()) {
            return Err(ConfigProblem::field(
                side.key,
                format!(
                    "`{what}` needs keyed streams: `{}` is not keyed; read a `key_by`'s output",
                    side.stream
                ),
            ));
        }
        if let [Some(l), Some(r)] = [sides[0].workers, sides[1].workers]
            && l != r
        {
            return Err(ConfigProblem::field(
                sides[1].key,
                format!(
                    "the two sides of `{what}` are keyed over {l} and {r} workers: give their `key_by`s the same parallelism"
                ),
            ));
        }
        Ok(())
    }

    /// `side_output` (late records to the late output) can run: it needs
    /// a `[late_output]` sink.
    pub fn check_late(&self, side_output: bool) -> Result<(), ConfigProblem> {
        if side_output && !self.late_output {
            return Err(ConfigProblem::field(
                "late",
                "`late = \"side-output\"` needs a `[late_output]` sink in the manifest",
            ));
        }
        Ok(())
    }

    /// The operator needs a keyed stream.
    pub fn needs_keyed(&self) -> Result<(), ConfigProblem> {
        if self.keyed {
            return Ok(());
        }
        Err(ConfigProblem::field(
            "type",
            format!(
                "`{}` needs a keyed stream: add an operator with `type = \"key_by\"` before it",
                self.kind
            ),
        ))
    }

    /// A stateless operator's own `parallelism`: only before any `key_by`,
    /// and within the key groups.
    pub fn check_parallelism(&self, parallelism: Option<usize>) -> Result<(), ConfigProblem> {
        let Some(par) = parallelism else { return Ok(()) };
        if self.keyed {
            return Err(ConfigProblem::field(
                "parallelism",
                "operators after `key_by` run on its workers: set `parallelism` on the `key_by` instead",
            ));
        }
        self.check_workers("parallelism", par)
    }

    /// `workers` is within the key groups.
    pub fn check_workers(&self, what: &str, workers: usize) -> Result<(), ConfigProblem> {
        let max = self.max_parallelism;
        if !(1..=max).contains(&workers) {
            return Err(ConfigProblem::field(
                "parallelism",
                format!("{what} {workers} is out of range: expected 1 to max_parallelism ({max})"),
            ));
        }
        Ok(())
    }
}

/// What an operator's step is built with.
pub struct BuildContext<'a> {
    /// The operator's unique name.
    pub name: &'a str,
    /// The manifest's folder: relative paths are relative to it.
    pub dir: &'a Path,
    /// Loads and checks its plugins.
    pub engine: &'a PluginEngine,
}

impl BuildContext<'_> {
    /// `path` resolved against the manifest's folder.
    pub fn path(&self, path: &ConfigString) -> PathBuf {
        path.path_in(self.dir)
    }
}

/// The [`OperatorConfig`] methods of a table reading one stream with the
/// usual fields `name`, `input` and `inputs`: its name, its default name
/// `$default` and its shape.
macro_rules! one_stream_table {
    ($default:literal) => {
        fn name(&self) -> Option<&str> {
            self.name.as_deref()
        }

        fn default_name(&self) -> String {
            $default.into()
        }

        fn shape(&self) -> $crate::operators::config::Shape<'_> {
            $crate::operators::config::Shape::Stream {
                input: self.input.as_ref(),
                inputs: self.inputs.as_ref(),
            }
        }
    };
}
pub(crate) use one_stream_table;
