//! What a builder holds while streams are added: the draft, the names taken,
//! the plugin engine, and the plan it becomes.

use super::*;

impl Inner {
    pub(super) fn new(name: &str) -> Self {
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
    pub(super) fn claim(&mut self, name: &str) {
        if self.names.iter().any(|n| n == name) {
            self.problems.push(format!(
                "the name `{name}` is used twice: give each source, operator and sink its own"
            ));
        } else {
            self.names.push(name.to_owned());
        }
    }

    pub(super) fn engine(&mut self) -> Result<&PluginEngine, PluginError> {
        if self.engine.is_none() {
            self.engine = Some(PluginEngine::new()?);
        }
        Ok(self.engine.as_ref().expect("just made"))
    }

    pub(super) fn into_plan(mut self) -> Result<(Plan, PluginEngine), BuildError> {
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
            committed_checkpoint: None,
            sink_checks: Vec::new(),
            admin: self.admin,
            telemetry,
            plugin_store: crate::plan::store_dir(Path::new("."), &self.name),
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
