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
mod launch;
mod native;

pub use launch::{LaunchError, launch};

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
            shutdown,
            &Control::new(),
        )?)
    }
}

impl Stream {
    fn then(&self, name: &str, step: Step, keyed_in: Option<&str>) -> Stream {
        let mut inner = self.inner.borrow_mut();
        inner.claim(name);
        let keyed = StreamRef::reads_keyed(&self.reads, &inner.keyed);
        if let Some(what) = keyed_in
            && !keyed
        {
            inner.problems.push(format!(
                "`{what}` operator `{name}` needs a keyed stream: call `key_by` before it"
            ));
        }
        inner.keyed.push(keyed || matches!(step, Step::KeyBy { .. }));
        inner.step_names.push(name.to_owned());
        inner.draft.steps.push((self.reads.clone(), step));
        let at = StreamRef::Operator(inner.draft.steps.len() - 1);
        drop(inner);
        Stream {
            inner: self.inner.clone(),
            reads: vec![at],
        }
    }

    /// The stream of operator `name`, run by `kind`; `keyed_in` names the
    /// kind of an operator that needs a keyed stream.
    fn operator(&self, name: &str, kind: NodeKind, keyed_in: Option<&str>) -> Stream {
        let node = node(name, kind);
        self.then(name, Step::Operator { node, parallelism: 1 }, keyed_in)
    }

    fn native(&self, name: &str, f: PerRecord) -> Stream {
        self.operator(name, NodeKind::Native(closure_factory(name, f)), None)
    }

    /// Each record turned into another by `f`.
    pub fn map(&self, name: &str, f: impl Fn(Record) -> Record + Send + Sync + 'static) -> Stream {
        self.native(name, Arc::new(move |r, out| out.push(f(r))))
    }

    /// The records for which `keep` is true.
    pub fn filter(&self, name: &str, keep: impl Fn(&Record) -> bool + Send + Sync + 'static) -> Stream {
        self.native(
            name,
            Arc::new(move |r, out| {
                if keep(&r) {
                    out.push(r);
                }
            }),
        )
    }

    /// Each record turned into any number by `f`.
    pub fn flat_map<I>(&self, name: &str, f: impl Fn(Record) -> I + Send + Sync + 'static) -> Stream
    where
        I: IntoIterator<Item = Record>,
    {
        self.native(name, Arc::new(move |r, out| out.extend(f(r))))
    }

    /// The records through an operator of your own (one instance per
    /// worker, made by `make`): batch in, batch out, with watermarks, timers
    /// and the end of the input (see [`Operator`]).
    pub fn process(
        &self,
        name: &str,
        make: impl Fn() -> Box<dyn Operator> + Send + Sync + 'static,
    ) -> Stream {
        let factory: NativeFactory = Arc::new(move |_, _| Ok(make()));
        self.operator(name, NodeKind::Native(factory), None)
    }

    /// The records through the Wasm plugin at `path`, of `world` (`map`,
    /// `filter`, `flat-map`, `reduce` or `process`; the last two need a
    /// keyed stream), with the manifest's default limits.
    pub fn plugin(&self, name: &str, world: World, path: impl AsRef<Path>) -> Stream {
        let Some(plugin) = self.load(name, world, path.as_ref()) else {
            return self.native(name, Arc::new(|r, out| out.push(r)));
        };
        let kind = NodeKind::Plugin(WasmNode {
            plugin,
            limits: PluginLimits::default(),
            mode: CallMode::Batch,
            state_ttl: Default::default(),
        });
        let keyed = matches!(world, World::Reduce | World::Process).then(|| world_name(world));
        self.operator(name, kind, keyed)
    }

    /// The plugin at `path` of `world` for operator `name`; `None` when it
    /// cannot be loaded, which `build` reports (the stream goes on, so the
    /// rest of the graph is checked too).
    fn load(&self, name: &str, world: World, path: &Path) -> Option<Arc<LoadedPlugin>> {
        let mut inner = self.inner.borrow_mut();
        match inner.engine().and_then(|e| e.load(path, world, name)) {
            Ok(plugin) => Some(plugin),
            Err(e) => {
                inner.problems.push(format!("operator `{name}`: {e}"));
                None
            }
        }
    }

    /// Each key's records folded by the `reduce` plugin at `path`.
    pub fn reduce(&self, name: &str, path: impl AsRef<Path>) -> Stream {
        self.plugin(name, World::Reduce, path)
    }

    /// Each key's records folded by `fold` (a keyed stream): given the
    /// key's accumulator so far (`None` for its first record) and a record,
    /// it returns the new accumulator, which is kept in the state backend
    /// (checkpointed, restored, spread by key group like a plugin's) and
    /// emitted as the record's value.
    pub fn reduce_with(
        &self,
        name: &str,
        fold: impl Fn(Option<&[u8]>, &Record) -> Vec<u8> + Send + Sync + 'static,
    ) -> Stream {
        let factory = native::reduce_factory(name, Arc::new(fold));
        self.operator(name, NodeKind::Native(factory), Some("reduce"))
    }

    /// A keyed stream on `parallelism` workers, each record's key set by
    /// `key` first.
    pub fn key_by(
        &self,
        parallelism: usize,
        key: impl Fn(&Record) -> Bytes + Send + Sync + 'static,
    ) -> Stream {
        let name = format!("key_by-{}", self.inner.borrow().draft.steps.len());
        let set: PerRecord = Arc::new(move |mut r, out| {
            r.key = Some(key(&r));
            out.push(r);
        });
        let key = Some(node(&name, NodeKind::Native(closure_factory(&name, set))));
        self.then(&name, Step::KeyBy { key, parallelism }, None)
    }

    /// A keyed stream on `parallelism` workers, by the key each record
    /// carries already.
    pub fn key_by_record_key(&self, parallelism: usize) -> Stream {
        let name = format!("key_by-{}", self.inner.borrow().draft.steps.len());
        self.then(
            &name,
            Step::KeyBy {
                key: None,
                parallelism,
            },
            None,
        )
    }

    /// Windows of each key (a keyed stream), computing the spec's built-in
    /// aggregates.
    pub fn window(&self, name: &str, spec: WindowSpec) -> Stream {
        let kind = NodeKind::Window(WindowNode {
            spec,
            plugin: None,
            side_output: false,
            late_records: Default::default(),
        });
        self.operator(name, kind, Some("window"))
    }

    /// Windows of each key (a keyed stream), each window's result computed
    /// by the Wasm plugin at `path`, of the `window` or `aggregate` world,
    /// with the manifest's default limits (the spec's aggregates are not
    /// used).
    pub fn window_plugin(&self, name: &str, spec: WindowSpec, path: impl AsRef<Path>) -> Stream {
        let Some(plugin) = self.load(name, World::Window, path.as_ref()) else {
            return self.native(name, Arc::new(|r, out| out.push(r)));
        };
        let kind = NodeKind::Window(WindowNode {
            spec,
            plugin: Some((plugin, PluginLimits::default())),
            side_output: false,
            late_records: Default::default(),
        });
        self.operator(name, kind, Some("window"))
    }

    /// The running `aggregates` of each key (a keyed stream) over the JSON
    /// `field` of the values (or the records, for `count`), one result per
    /// record.
    pub fn aggregate(&self, name: &str, aggregates: &[AggregateKind], field: Option<&str>) -> Stream {
        let factory =
            crate::operators::builtin::aggregate_factory(name, aggregates.to_vec(), field.map(str::to_owned));
        self.operator(name, NodeKind::Native(factory), Some("aggregate"))
    }

    /// The interval join of this stream (its left side) with `right`, both
    /// keyed: each pair of records of equal keys whose times are within
    /// `spec`'s bounds, as `{"left": …, "right": …}` at the later time, and
    /// the unmatched records of the outer sides once the watermark passes
    /// their interval (see [`IntervalJoin`](crate::operators::join::IntervalJoin)).
    pub fn interval_join(&self, name: &str, right: &Stream, spec: IntervalJoinSpec) -> Stream {
        self.join(name, right, JoinSpec::Interval(spec), None, Ok("interval_join"))
    }

    /// [`Stream::interval_join`] with each pair's output made by the
    /// `join`-world plugin at `path` (manifest default limits).
    pub fn interval_join_plugin(
        &self,
        name: &str,
        right: &Stream,
        spec: IntervalJoinSpec,
        path: impl AsRef<Path>,
    ) -> Stream {
        let spec = JoinSpec::Interval(spec);
        self.join(name, right, spec, Some(path.as_ref()), Ok("interval_join"))
    }

    /// This stream (keyed) joined with `table`, a keyed changelog (the
    /// latest value per key; an empty value deletes its key): each record
    /// with its key's row, as of `spec`, as `{"stream": …, "table": …}`
    /// (see [`LookupJoin`](crate::operators::join::LookupJoin)).
    pub fn join_table(&self, name: &str, table: &Stream, spec: LookupJoinSpec) -> Stream {
        self.join(name, table, JoinSpec::Lookup(spec), None, Ok("join_table"))
    }

    /// Splits the stream by `branches`, each a name and a predicate: a
    /// record goes to the first branch whose predicate holds, else to the
    /// default output; [`Branches::output`] reads one output. What one
    /// output's readers do never holds back another's records.
    ///
    /// ```
    /// use mailer::Pipeline;
    /// use mailer::connectors::{BlackholeSink, GeneratorSource};
    /// use mailer::operators::branch::RecordPredicate;
    /// use mailer::record::Record;
    /// use std::sync::Arc;
    ///
    /// let p = Pipeline::new("routes");
    /// let numbers = p.source("numbers", GeneratorSource::new(Some(100), None, 0, 1, None));
    /// let tens: RecordPredicate = Arc::new(|r: &Record| r.value.ends_with(b"0"));
    /// let routes = numbers.branch("route", [("tens", tens)]);
    /// routes.output("tens").sink("tens", BlackholeSink::default());
    /// routes.output("default").sink("rest", BlackholeSink::default());
    /// assert_eq!(p.run().unwrap().sink_records, 100);
    /// ```
    pub fn branch<'a>(
        &self,
        name: &str,
        branches: impl IntoIterator<Item = (&'a str, RecordPredicate)>,
    ) -> Branches {
        let branches: Vec<(String, PredicateNode)> = branches
            .into_iter()
            .map(|(name, f)| (name.to_owned(), PredicateNode::Native(f)))
            .collect();
        let outputs: Vec<String> = branches.iter().map(|(n, _)| n.clone()).collect();
        let kind = NodeKind::Branch(BranchNode { branches });
        let step = Step::Branch {
            node: node(name, kind),
            parallelism: 1,
        };
        Branches {
            name: name.to_owned(),
            branch: self.then(name, step, None),
            outputs,
        }
    }

    /// This stream joined with `table`, a changelog (the latest value per
    /// record key; an empty value deletes its key) that every worker reads
    /// whole: neither needs a `key_by`. Each record is joined with the row
    /// of its join key (`spec.key_field`, else its own key) as the table
    /// stands when it is processed, as `{"stream": …, "table": …}`; the
    /// table holds at most `spec.max_rows` rows (see
    /// [`GlobalJoin`](crate::operators::join::GlobalJoin)). The join runs
    /// on `parallelism` workers, or on this stream's keyed workers.
    pub fn join_global_table(
        &self,
        name: &str,
        table: &Stream,
        spec: GlobalJoinSpec,
        parallelism: usize,
    ) -> Stream {
        self.join(name, table, JoinSpec::Global(spec), None, Err(parallelism))
    }

    /// [`Stream::join_global_table`] with each record's output made by the
    /// `join`-world plugin at `path` (manifest default limits): the stream
    /// record and its row (`None` without one, in a left join).
    pub fn join_global_table_plugin(
        &self,
        name: &str,
        table: &Stream,
        spec: GlobalJoinSpec,
        parallelism: usize,
        path: impl AsRef<Path>,
    ) -> Stream {
        let spec = JoinSpec::Global(spec);
        self.join(name, table, spec, Some(path.as_ref()), Err(parallelism))
    }

    /// The join `name` of this stream with `other` (see [`Stream::apart`]),
    /// its output made by the plugin at `plugin` when given.
    fn join(
        &self,
        name: &str,
        other: &Stream,
        spec: JoinSpec,
        plugin: Option<&Path>,
        keyed_in: Result<&str, usize>,
    ) -> Stream {
        let plugin = plugin.and_then(|path| self.load(name, World::Join, path));
        let kind = NodeKind::Join(JoinNode {
            spec,
            side_output: false,
            late_records: Default::default(),
            plugin: plugin.map(|p| (p, PluginLimits::default(), CallMode::Batch)),
        });
        self.apart(name, &[other], node(name, kind), keyed_in)
    }

    /// The stream of `node`, an operator of two inputs: this stream is its
    /// input 0, `others[i]` its input `i + 1`; all keyed when `keyed_in`
    /// names the kind of operator needing it, else (a global table's join,
    /// on this many workers unless this stream is keyed) the last input
    /// reaches every worker.
    fn apart(
        &self,
        name: &str,
        others: &[&Stream],
        node: OperatorNode,
        keyed_in: Result<&str, usize>,
    ) -> Stream {
        let sides: Vec<&Stream> = std::iter::once(self).chain(others.iter().copied()).collect();
        let mut inner = self.inner.borrow_mut();
        inner.claim(name);
        let mut reads = Vec::new();
        let mut input_numbers = Vec::new();
        for (number, side) in sides.iter().enumerate() {
            if let Ok(kind) = keyed_in
                && !StreamRef::reads_keyed(&side.reads, &inner.keyed)
            {
                inner.problems.push(format!(
                    "`{kind}` operator `{name}` needs keyed streams: call `key_by` before input {number}"
                ));
            }
            reads.extend(side.reads.iter().copied());
            input_numbers.extend(side.reads.iter().map(|_| number));
        }
        let keyed = keyed_in.is_ok() || StreamRef::reads_keyed(&self.reads, &inner.keyed);
        inner.keyed.push(keyed);
        inner.step_names.push(name.to_owned());
        let step = Step::Apart {
            node,
            input_numbers,
            parallelism: keyed_in.err().unwrap_or(1),
            broadcast: keyed_in.is_err().then_some(others.len()),
        };
        inner.draft.steps.push((reads, step));
        let at = StreamRef::Operator(inner.draft.steps.len() - 1);
        drop(inner);
        Stream {
            inner: self.inner.clone(),
            reads: vec![at],
        }
    }

    /// Writes the stream to `sink`, named `name` (unique in the pipeline).
    pub fn sink(&self, name: &str, sink: impl Sink + 'static) {
        self.add_sink(endpoint_of_sink(name, sink));
    }

    fn add_sink(&self, sink: Endpoint<OpenSink>) {
        let mut inner = self.inner.borrow_mut();
        inner.claim(&sink.name);
        inner.draft.sinks.push((sink, self.reads.clone()));
    }
}

impl Inner {
    fn new(name: &str) -> Self {
        use crate::manifest::defaults;
        Self {
            name: name.to_owned(),
            draft: Draft::default(),
            keyed: Vec::new(),
            step_names: Vec::new(),
            names: Vec::new(),
            problems: Vec::new(),
            engine: None,
            settings: Settings {
                batch_size: defaults::batch_size(),
                edge_capacity: defaults::edge_capacity(),
                shutdown_timeout: defaults::shutdown_timeout(),
                key_groups: defaults::max_parallelism(),
                state: BackendKind::Memory,
                checkpoint: None,
                watermark: None,
            },
            dead_letter: None,
            admin: None,
            cluster: Default::default(),
        }
    }

    /// Takes `name` for a source, operator or sink; a second use is a
    /// problem.
    fn claim(&mut self, name: &str) {
        if self.names.iter().any(|n| n == name) {
            self.problems.push(format!(
                "the name `{name}` is used twice: give each source, operator and sink its own"
            ));
        } else {
            self.names.push(name.to_owned());
        }
    }

    fn engine(&mut self) -> Result<&PluginEngine, PluginError> {
        if self.engine.is_none() {
            self.engine = Some(PluginEngine::new()?);
        }
        Ok(self.engine.as_ref().expect("just made"))
    }

    fn into_plan(mut self) -> Result<(Plan, PluginEngine), BuildError> {
        let s = &self.settings;
        if !(1..=65_536).contains(&s.batch_size) || s.batch_size > s.edge_capacity {
            self.problems.push(format!(
                "batch size {} must be 1 to 65536 and at most the edge capacity ({})",
                s.batch_size, s.edge_capacity
            ));
        }
        for (name, (_, step)) in self.step_names.iter().zip(&self.draft.steps) {
            if let Step::KeyBy { parallelism, .. } = step
                && !(1..=s.key_groups as usize).contains(parallelism)
            {
                self.problems.push(format!(
                    "`{name}` parallelism {parallelism} is out of range: expected 1 to max_parallelism ({})",
                    s.key_groups
                ));
            }
        }
        if self.draft.sources.is_empty() || self.draft.sinks.is_empty() {
            self.problems.push("a pipeline needs a source and a sink".into());
        }
        let cluster = std::mem::take(&mut self.cluster);
        self.problems.extend(cluster.problems(&self));
        let draft = &self.draft;
        let reads = draft
            .steps
            .iter()
            .map(|(r, _)| r)
            .chain(draft.sinks.iter().map(|(_, r)| r));
        for stream in crate::manifest::unread(draft.sources.len(), draft.steps.len(), reads) {
            self.problems.push(match stream {
                StreamRef::Source(i) => format!("nothing reads source `{}`", draft.sources[i].name),
                StreamRef::Operator(i) | StreamRef::Output(i, _) => {
                    format!("nothing reads the output of operator `{}`", self.step_names[i])
                }
            });
        }
        if !self.problems.is_empty() {
            return Err(BuildError::Invalid {
                pipeline: self.name,
                reasons: self.problems,
            });
        }
        let engine = match self.engine.take() {
            Some(e) => e,
            None => PluginEngine::new()?,
        };
        let s = self.settings;
        let telemetry = Telemetry::new(&self.name, self.admin.as_ref().is_some_and(|a| a.metrics));
        let Placed {
            sources,
            mut stages,
            sinks,
        } = self.draft.place(s.key_groups);
        for op in stages.iter_mut().flat_map(|s| &mut s.operators) {
            op.calls = telemetry.call_stats(&op.name);
        }
        let mut plan = Plan {
            manifest_hash: String::new(),
            batch_size: s.batch_size,
            edge_capacity: s.edge_capacity,
            shutdown_timeout: s.shutdown_timeout,
            sources,
            stages,
            sinks,
            dead_letter: self.dead_letter,
            late_output: None,
            watermark: s.watermark,
            state: s.state,
            key_groups: s.key_groups,
            checkpoint: s.checkpoint,
            checkpoint_store: None,
            restore: None,
            committed_checkpoint: None,
            sink_checks: Vec::new(),
            admin: self.admin,
            telemetry,
            plugin_store: crate::plan::store_dir(Path::new("."), &self.name),
            swapped_from: Default::default(),
            allow_state_downgrade: false,
            migrate_every_key: false,
            cluster: None,
            warnings: Vec::new(),
            name: self.name,
        };
        plan.cluster = cluster.settings(&plan).map_err(|reason| BuildError::Invalid {
            pipeline: plan.name.clone(),
            reasons: vec![reason],
        })?;
        Ok((plan, engine))
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
