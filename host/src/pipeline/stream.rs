//! The builder's streams: each operator a method adding its step after the
//! stream it reads (maps, filters and plugins, keyed stages, windows, joins,
//! branches) and the sinks that end them.

use super::*;

impl Stream {
    pub(super) fn then(&self, name: &str, step: Step, keyed_in: Option<&str>) -> Stream {
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
    pub(super) fn operator(&self, name: &str, kind: NodeKind, keyed_in: Option<&str>) -> Stream {
        let node = node(name, kind);
        self.then(name, Step::Operator { node, parallelism: 1 }, keyed_in)
    }

    pub(super) fn native(&self, name: &str, f: PerRecord) -> Stream {
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
    pub(super) fn load(&self, name: &str, world: World, path: &Path) -> Option<Arc<LoadedPlugin>> {
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
    pub(super) fn join(
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
    pub(super) fn apart(
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

    pub(super) fn add_sink(&self, sink: Endpoint<OpenSink>) {
        let mut inner = self.inner.borrow_mut();
        inner.claim(&sink.name);
        inner.draft.sinks.push((sink, self.reads.clone()));
    }
}
