//! Pipelines built in Rust: [`Pipeline`] and its [`Stream`] handles.
//!
//! A stream is a handle to the output of a source or an operator. Calling an
//! operator on it (`map`, `filter`, `flat_map`, `process`, `key_by`,
//! `reduce` (a plugin) or `reduce_with` (a closure), `window` (built-in
//! aggregates) or `window_plugin`, `aggregate`, or a plugin of any world)
//! returns the operator's stream; [`Pipeline::union`] makes one stream of
//! several; a stream used more than once is fanned out (each reader gets every record,
//! the slowest holds back the rest); [`Stream::sink`] writes it out, any
//! number of times. Operators are native Rust closures or sandboxed Wasm
//! plugins, mixed freely. The pipeline is planned and run exactly as a
//! manifest's (manifests make the same [`Draft`](crate::plan::Draft)): the
//! same stages, checkpoints, state backends, admin API and metrics.
//!
//! ```
//! use mailer::Pipeline;
//! use mailer::connectors::{FileSink, GeneratorSource, SinkFormat};
//! use mailer::operators::window::AggregateKind;
//!
//! let dir = tempfile::tempdir().unwrap();
//! let out = dir.path().join("counts.txt");
//! let p = Pipeline::new("evens");
//! // Values 0, 1, 2, ... with keys "0" to "9".
//! let numbers = p.source("numbers", GeneratorSource::new(Some(1_000), Some(10), 0, 1, None));
//! let evens = numbers.filter("evens", |r| r.value.last().is_some_and(|d| d % 2 == 0));
//! let counts = evens.key_by_record_key(2).aggregate("counts", &[AggregateKind::Count], None);
//! counts.sink("out", FileSink::create(&out, SinkFormat::Value, false).unwrap());
//! let report = p.run().unwrap();
//! assert_eq!(report.source_records, 1_000);
//! assert_eq!(std::fs::read_to_string(&out).unwrap().lines().count(), 500);
//! ```
//!
//! Errors in the graph (an operator that needs a keyed stream, a plugin
//! that cannot be loaded) are collected and reported by [`Pipeline::build`]
//! or [`Pipeline::run`], each naming its operator.

mod cluster;
mod inner;
mod native;
mod stream;

use crate::launch::{LaunchError, Resume, launch};

use crate::checkpoint::{BucketUrl, CheckpointSettings, S3Settings, StartFrom};
use crate::connectors::{Endpoint, OpenSink, OpenSource, Sink, Source};
use crate::failure::FailurePolicy;
use crate::manifest::Stream as StreamRef;
use crate::metrics::Telemetry;
use crate::operators::branch::{BranchNode, DEFAULT_OUTPUT, PredicateNode, RecordPredicate};
use crate::operators::join::{GlobalJoinSpec, IntervalJoinSpec, JoinNode, JoinSpec, LookupJoinSpec};
use crate::operators::wasm::WasmNode;
use crate::operators::window::{AggregateKind, WindowNode, WindowSpec};
use crate::operators::{NativeFactory, Operator};
use crate::operators::{NodeKind, OperatorNode, Step};
use crate::plan::{AdminSettings, Draft, Placed, Plan, WatermarkSettings};
use crate::plugin::{CallMode, LoadedPlugin, PluginEngine, PluginError, PluginLimits, World};
use crate::record::Record;
use crate::runtime::{Control, RunReport, Shutdown};
use crate::state::BackendKind;
use bytes::Bytes;
use native::{PerRecord, closure_factory};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

/// Why a pipeline built in code cannot be planned or run.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The graph cannot run: each reason names its operator or sink.
    #[error("pipeline `{pipeline}` cannot run: {}", reasons.join("; "))]
    Invalid {
        /// The pipeline.
        pipeline: String,
        /// What is wrong.
        reasons: Vec<String>,
    },
    /// The plugin engine cannot start.
    #[error(transparent)]
    Engine(#[from] PluginError),
    /// The run could not start or failed.
    #[error(transparent)]
    Launch(Box<LaunchError>),
}

impl From<LaunchError> for BuildError {
    fn from(e: LaunchError) -> Self {
        Self::Launch(Box::new(e))
    }
}

/// A pipeline being built; see the [module documentation](self).
pub struct Pipeline {
    inner: Rc<RefCell<Inner>>,
}

/// A stream of a [`Pipeline`]: the output of a source or an operator, or
/// the union of several.
#[derive(Clone)]
pub struct Stream {
    inner: Rc<RefCell<Inner>>,
    /// What reading this stream reads (several: a union).
    reads: Vec<StreamRef>,
}

/// The outputs of a [`Stream::branch`].
pub struct Branches {
    name: String,
    branch: Stream,
    outputs: Vec<String>,
}

impl Branches {
    /// The records of the branch named `output`, or of the default output
    /// (`"default"`: those no branch took).
    pub fn output(&self, output: &str) -> Stream {
        let n = match output {
            DEFAULT_OUTPUT => Some(self.outputs.len()),
            _ => self.outputs.iter().position(|o| o == output),
        };
        let StreamRef::Operator(i) = self.branch.reads[0] else {
            unreachable!("a branch is one operator")
        };
        let reads = match n {
            Some(n) => vec![StreamRef::Output(i, n)],
            None => {
                self.branch.inner.borrow_mut().problems.push(format!(
                    "branch `{}` has no output `{output}`: its outputs are {} and `{DEFAULT_OUTPUT}`",
                    self.name,
                    self.outputs
                        .iter()
                        .map(|o| format!("`{o}`"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
                self.branch.reads.clone()
            }
        };
        Stream {
            inner: self.branch.inner.clone(),
            reads,
        }
    }
}

/// What a pipeline holds while it is built.
struct Inner {
    name: String,
    draft: Draft,
    /// Whether each step's output is keyed.
    keyed: Vec<bool>,
    /// Each step's name.
    step_names: Vec<String>,
    /// Every name taken (sources, steps, sinks).
    names: Vec<String>,
    problems: Vec<String>,
    engine: Option<PluginEngine>,
    settings: Settings,
    dead_letter: Option<Endpoint<OpenSink>>,
    admin: Option<AdminSettings>,
    /// Cluster mode's settings, and the Kafka sources and sinks added.
    cluster: cluster::ClusterParts,
}

/// The settings of a pipeline built in code.
struct Settings {
    batch_size: usize,
    edge_capacity: usize,
    shutdown_timeout: Duration,
    key_groups: u32,
    state: BackendKind,
    checkpoint: Option<CheckpointSettings>,
    watermark: Option<WatermarkSettings>,
}

impl Pipeline {
    /// A pipeline named `name` (its checkpoints and state are the
    /// pipeline's by this name), with the manifest's defaults: batches of
    /// 1024 records, edges of 4096, 128 key groups, state in memory, no
    /// checkpoints.
    pub fn new(name: &str) -> Self {
        Self {
            inner: Rc::new(RefCell::new(Inner::new(name))),
        }
    }

    /// Records per batch (1 to 65536, at most the edge capacity).
    pub fn batch_size(self, records: usize) -> Self {
        self.inner.borrow_mut().settings.batch_size = records;
        self
    }

    /// Records an edge between two stages holds.
    pub fn edge_capacity(self, records: usize) -> Self {
        self.inner.borrow_mut().settings.edge_capacity = records;
        self
    }

    /// The number of key groups: the highest keyed parallelism the
    /// pipeline can ever be restored at.
    pub fn max_parallelism(self, key_groups: u32) -> Self {
        self.inner.borrow_mut().settings.key_groups = key_groups;
        self
    }

    /// Keeps keyed state in RocksDB under `dir` (in memory by default).
    pub fn state_in_rocksdb(self, dir: impl Into<PathBuf>) -> Self {
        self.inner.borrow_mut().settings.state = BackendKind::Rocks {
            dir: dir.into(),
            cache_bytes: crate::state::DEFAULT_CACHE_BYTES,
            block_cache_bytes: crate::state::DEFAULT_BLOCK_CACHE_BYTES,
        };
        self
    }

    /// Takes a checkpoint every `interval` into `dir` (keeping the newest
    /// 3); a run resumes from the newest.
    pub fn checkpoints(self, dir: impl Into<PathBuf>, interval: Duration) -> Self {
        self.inner.borrow_mut().settings.checkpoint = Some(CheckpointSettings {
            interval,
            dir: dir.into(),
            bucket: None,
            s3: S3Settings::default(),
            keep: crate::manifest::defaults::checkpoints_kept(),
            tolerable_failures: crate::manifest::defaults::tolerable_failures(),
            timeout: crate::manifest::defaults::checkpoint_timeout(),
        });
        self
    }

    /// Uploads the checkpoints to the S3 bucket prefix `url`
    /// (`s3://bucket/prefix`), reached with `s3`; the folder of
    /// [`checkpoints`](Self::checkpoints) (called first) is then where they
    /// are written before the upload. A run on a machine without that
    /// folder resumes from the bucket.
    pub fn checkpoints_to_bucket(self, url: &str, s3: S3Settings) -> Self {
        {
            let mut inner = self.inner.borrow_mut();
            match (BucketUrl::parse(url), inner.settings.checkpoint.as_mut()) {
                (Ok(Some(bucket)), Some(c)) => {
                    c.bucket = Some(bucket);
                    c.s3 = s3;
                }
                (Ok(Some(_)), None) => inner.problems.push(
                    "checkpoints_to_bucket: call `checkpoints` first (its folder stages the uploads)".into(),
                ),
                (Ok(None), _) => inner.problems.push(format!(
                    "checkpoints_to_bucket: `{url}` is not an `s3://bucket/prefix` URL"
                )),
                (Err(e), _) => inner.problems.push(format!("checkpoints_to_bucket: {e}")),
            }
        }
        self
    }

    /// Event-time watermarks at every source, trailing the largest event
    /// time seen by `max_out_of_orderness`.
    pub fn watermarks(self, max_out_of_orderness: Duration) -> Self {
        self.inner.borrow_mut().settings.watermark = Some(WatermarkSettings {
            delay: max_out_of_orderness,
            idle_timeout: None,
        });
        self
    }

    /// Serves the admin API (plugin swaps, `/metrics`, the dashboard) on
    /// `listen` (keep it on loopback), each request carrying `token` (at
    /// least 16 characters).
    pub fn admin(self, listen: std::net::SocketAddr, token: &str) -> Self {
        use crate::manifest::defaults;
        {
            let mut inner = self.inner.borrow_mut();
            if token.len() < 16 {
                inner
                    .problems
                    .push("the admin token is shorter than 16 characters: use a long random one".into());
            }
            inner.admin = Some(AdminSettings {
                listen,
                token: token.to_owned(),
                probation_records: defaults::probation_records(),
                rollback_failure_share: defaults::rollback_failure_share(),
                metrics: true,
                metrics_need_token: false,
                max_plugin_bytes: (defaults::max_plugin_mb() << 20) as usize,
                allowed_hosts: crate::plan::allowed_hosts(listen, &[]),
                tls: None,
            });
        }
        self
    }

    /// Where records go that an operator with
    /// [`FailurePolicy::DeadLetter`] fails on.
    pub fn dead_letter(self, sink: impl Sink + 'static) -> Self {
        self.inner.borrow_mut().dead_letter = Some(endpoint_of_sink("dead-letter", sink));
        self
    }

    /// A source named `name` (unique in the pipeline); its stream.
    pub fn source(&self, name: &str, source: impl Source + 'static) -> Stream {
        self.add_source(Endpoint {
            name: name.to_owned(),
            description: format!("{name} (built in code)"),
            open: Box::new(move |_| Ok(Box::new(source) as _)),
        })
    }

    fn add_source(&self, source: Endpoint<OpenSource>) -> Stream {
        let mut inner = self.inner.borrow_mut();
        inner.claim(&source.name);
        inner.draft.sources.push(source);
        let at = StreamRef::Source(inner.draft.sources.len() - 1);
        drop(inner);
        Stream {
            inner: self.inner.clone(),
            reads: vec![at],
        }
    }

    /// One stream of the records of all of `streams` (a union): watermarks
    /// are the lowest of theirs, markers aligned over them.
    pub fn union(&self, streams: &[&Stream]) -> Stream {
        let mut reads: Vec<StreamRef> = Vec::new();
        for s in streams {
            for r in &s.reads {
                if !reads.contains(r) {
                    reads.push(*r);
                }
            }
        }
        Stream {
            inner: self.inner.clone(),
            reads,
        }
    }

    /// The plan and the plugin engine that loaded its plugins; `Err` names
    /// every problem of the graph.
    pub fn build(self) -> Result<(Plan, PluginEngine), BuildError> {
        // Streams still held point at an empty pipeline from now on.
        let inner = self.inner.replace(Inner::new(""));
        inner.into_plan()
    }

    /// Builds and runs the pipeline until its sources end; resumes from its
    /// newest checkpoint when it has checkpoints.
    pub fn run(self) -> Result<RunReport, BuildError> {
        self.run_until(&Shutdown::new())
    }

    /// Builds and runs the pipeline until its sources end or `shutdown`
    /// stops it ([`Shutdown::cancel`] drains it).
    pub fn run_until(self, shutdown: &Shutdown) -> Result<RunReport, BuildError> {
        let (plan, engine) = self.build()?;
        Ok(launch(
            plan,
            engine,
            &StartFrom::Resume,
            Resume::default(),
            shutdown,
            &Control::new(),
        )?)
    }
}

/// An operator node running `kind`, failing the pipeline on a record it
/// fails on.
fn node(name: &str, kind: NodeKind) -> OperatorNode {
    OperatorNode::new(name, kind, FailurePolicy::Fail)
}

fn endpoint_of_sink(name: &str, sink: impl Sink + 'static) -> Endpoint<OpenSink> {
    Endpoint {
        name: name.to_owned(),
        description: format!("{name} (built in code)"),
        open: Box::new(move |_| Ok(Box::new(sink) as _)),
    }
}

fn world_name(world: World) -> &'static str {
    match world {
        World::Reduce => "reduce",
        _ => "process",
    }
}

#[cfg(test)]
mod tests;
