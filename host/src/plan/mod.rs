//! Planning: a validated manifest becomes stages. Consecutive stateless
//! operators of equal parallelism share a stage; `key_by` starts a keyed
//! stage that runs every operator after it on its workers.

mod build;
mod cluster;
mod describe;
mod draft;
mod place;
mod warnings;

pub use build::build;
pub use cluster::{ClusterSettings, Feed, Part, PartInput};
pub use describe::{describe, describe_dot};
pub use draft::{Draft, Placed};

use crate::checkpoint::{
    CheckpointSettings, CheckpointStore, CommittedCheckpoint, OperatorMeta, RestoreTarget,
};
use crate::connectors::{Endpoint, OpenSink, OpenSource, SinkCheck};
use crate::operators::{NodeKind, OperatorNode};
use crate::state::BackendKind;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// A pipeline ready to run.
pub struct Plan {
    /// The pipeline's name.
    pub name: String,
    /// SHA-256 of the manifest text.
    pub manifest_hash: String,
    /// Records per batch.
    pub batch_size: usize,
    /// Records an edge holds.
    pub edge_capacity: usize,
    /// Graceful drain limit.
    pub shutdown_timeout: Duration,
    /// The sources, each named (a linear pipeline's one is `source`).
    pub sources: Vec<Endpoint<OpenSource>>,
    /// The operator stages, each after the stages and sources it reads.
    pub stages: Vec<OperatorStage>,
    /// The sinks, each named (a linear pipeline's one is `sink`), with the
    /// streams each reads.
    pub sinks: Vec<SinkNode>,
    /// The dead-letter sink, if any operator may need it.
    pub dead_letter: Option<Endpoint<OpenSink>>,
    /// The sink of records too late for their windows, if any.
    pub late_output: Option<Endpoint<OpenSink>>,
    /// Watermark generation at the source, if configured.
    pub watermark: Option<WatermarkSettings>,
    /// Where keyed operators keep their state.
    pub state: BackendKind,
    /// The number of key groups.
    pub key_groups: u32,
    /// Checkpoint settings, when the manifest asks for checkpoints.
    pub checkpoint: Option<CheckpointSettings>,
    /// For a sink that commits with checkpoints (a pipeline has at most
    /// one): which checkpoint's output it last committed (a restart resumes
    /// from that one).
    pub committed_checkpoint: Option<CommittedCheckpoint>,
    /// For each sink writing to a database: checks its table before a run.
    pub sink_checks: Vec<SinkCheck>,
    /// The admin API, when `[admin]` asks for it.
    pub admin: Option<AdminSettings>,
    /// What the run measures (served by the admin API).
    pub telemetry: Arc<crate::metrics::Telemetry>,
    /// The plugin store: swapped-in versions by digest.
    pub plugin_store: std::path::PathBuf,
    /// Cluster mode's settings, when the pipeline runs in it.
    pub cluster: Option<ClusterSettings>,
    /// What the manifest may have wrong without being invalid (a
    /// `state_ttl` name the plugin never uses, a `project` field no record
    /// has): `validate` prints them, `run` logs them.
    pub warnings: Vec<String>,
}

/// Where the admin API listens, and its token.
#[derive(Clone)]
pub struct AdminSettings {
    /// The address (loopback unless the manifest says otherwise).
    pub listen: std::net::SocketAddr,
    /// The bearer token (never shown).
    pub token: String,
    /// A swapped-in version is watched over this many records after the
    /// request.
    pub probation_records: u64,
    /// It is rolled back when more than this share of them fails.
    pub rollback_failure_share: f64,
    /// Whether plugin calls are timed and `/metrics` is served.
    pub metrics: bool,
    /// Whether scraping `/metrics` needs the token too.
    pub metrics_need_token: bool,
    /// The largest component a swap may upload, in bytes.
    pub max_plugin_bytes: usize,
    /// The `Host` header values the server answers.
    pub allowed_hosts: Vec<String>,
    /// TLS: the server's certificate and key, the CA its clients trust.
    pub tls: Option<AdminTls>,
}

/// The admin API's TLS files (PEM), resolved against the manifest's folder.
#[derive(Clone, Debug)]
pub struct AdminTls {
    /// The server's certificate chain.
    pub cert: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
    /// The CA the CLI checks the servers' certificates against.
    pub ca: PathBuf,
}

/// The host names (without port) the server answers to: `localhost`, the
/// loopback addresses, the address it listens on, and `extra`.
pub fn allowed_hosts(listen: SocketAddr, extra: &[String]) -> Vec<String> {
    let mut hosts: Vec<String> = ["localhost", "127.0.0.1", "[::1]"].map(str::to_owned).into();
    hosts.push(match listen {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    });
    hosts.extend(extra.iter().map(|h| h.to_ascii_lowercase()));
    hosts.sort();
    hosts.dedup();
    hosts
}

/// The plugin store of a pipeline whose manifest is in `dir`.
pub fn store_dir(dir: &Path, pipeline: &str) -> PathBuf {
    dir.join(".mailer").join(pipeline).join("plugins")
}

impl Plan {
    /// Each operator with the plugin it runs now, as checkpoints record them
    /// (`swapped_from`: the manifest's plugin each operator resuming with a
    /// swapped-in one replaces).
    pub fn operator_metas(&self, swapped_from: &BTreeMap<String, String>) -> Vec<OperatorMeta> {
        self.stages
            .iter()
            .flat_map(|s| &s.operators)
            .map(|op| {
                let plugin = op.plugin();
                OperatorMeta {
                    name: op.name.clone(),
                    world: plugin.map(|p| p.world().to_string()),
                    plugin_digest: plugin.map(|p| p.digest().to_owned()),
                    manifest_digest: swapped_from.get(&op.name).cloned(),
                }
            })
            .collect()
    }

    /// Makes the plan a run of its own beside the pipeline's (a test case,
    /// a replay): no checkpoint to take or resume from, no admin API, no
    /// cluster, state in memory.
    pub fn detach(&mut self) {
        self.checkpoint = None;
        self.committed_checkpoint = None;
        self.admin = None;
        self.cluster = None;
        self.state = BackendKind::Memory;
    }

    /// What a checkpoint restored into this pipeline from `store` is
    /// checked against.
    pub fn restore_target<'a>(&'a self, store: Option<&'a CheckpointStore>) -> RestoreTarget<'a> {
        RestoreTarget {
            checkpoint: self.checkpoint.as_ref(),
            store,
            committed: self.committed_checkpoint.as_ref(),
            key_groups: self.key_groups,
            manifest_hash: &self.manifest_hash,
            operators: self.operator_metas(&BTreeMap::new()),
            sources: self.sources.iter().map(|s| s.name.as_str()).collect(),
        }
    }

    /// The operators running a plugin that a swap may replace.
    pub fn plugin_operators(&self) -> Vec<crate::swap::PluginOperator> {
        self.stages
            .iter()
            .flat_map(|s| s.operators.iter().map(|op| (op, s.parallelism)))
            .filter_map(|(op, workers)| {
                Some(crate::swap::PluginOperator {
                    name: op.name.clone(),
                    plugin: op.plugin()?.clone(),
                    failures: op.failures.clone(),
                    workers,
                })
            })
            .collect()
    }
}

/// How the source derives watermarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatermarkSettings {
    /// Allowed out-of-orderness.
    pub delay: Duration,
    /// When a quiet split stops holding the watermark back.
    pub idle_timeout: Option<Duration>,
}

impl Plan {
    /// The name of the source or stage writing what `producer` stands for.
    pub fn producer_name(&self, producer: Producer) -> &str {
        match producer {
            Producer::Source(i) => &self.sources[i].name,
            Producer::Stage(i) | Producer::Output(i, _) => &self.stages[i].name,
        }
    }

    /// The name of the stream `producer` stands for: the source's or
    /// stage's, or a branch's output as `branch.output`.
    pub fn stream_name(&self, producer: Producer) -> String {
        let Producer::Output(i, n) = producer else {
            return self.producer_name(producer).to_owned();
        };
        let branch = self.stages[i].operators.last().expect("a stage runs operators");
        match &branch.kind {
            NodeKind::Branch(b) => format!("{}.{}", branch.name, b.output_name(n)),
            _ => unreachable!("only a branch has outputs"),
        }
    }

    /// Whether each source feeds a global table (through any stages): such
    /// sources are read first, alone, until caught up.
    pub fn table_sources(&self) -> Vec<bool> {
        let mut feeds = vec![false; self.sources.len()];
        let mut todo: Vec<Producer> = self
            .stages
            .iter()
            .filter_map(|s| {
                let table = s.broadcast_input?;
                let from = s.inputs.iter().zip(&s.input_numbers);
                Some(from.filter(move |(_, n)| **n == table).map(|(p, _)| *p))
            })
            .flatten()
            .collect();
        while let Some(p) = todo.pop() {
            match p {
                Producer::Source(i) => feeds[i] = true,
                Producer::Stage(k) | Producer::Output(k, _) => todo.extend(&self.stages[k].inputs),
            }
        }
        feeds
    }

    /// Links `stages` into a chain from the one source to the one sink: each
    /// stage reads the one before it (the first reads the source), and the
    /// sink reads the last.
    pub fn chain(stages: &mut [OperatorStage]) -> Vec<Producer> {
        for (i, stage) in stages.iter_mut().enumerate() {
            stage.inputs = vec![Producer::in_chain(i)];
        }
        vec![Producer::in_chain(stages.len())]
    }

    /// Messages an edge holds: `edge_capacity` records in batches of
    /// `batch_size`.
    pub fn edge_messages(&self) -> usize {
        (self.edge_capacity / self.batch_size).max(1)
    }
}

/// Where a stage or sink reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Producer {
    /// Source `i` of [`Plan::sources`].
    Source(usize),
    /// The last operator of stage `i` of [`Plan::stages`] (an earlier one).
    Stage(usize),
    /// Output `n` of stage `i`'s last operator, a branch (one output per
    /// branch, then the default).
    Output(usize, usize),
}

impl Producer {
    /// What the `i`-th reader of a chain reads (stage `i`, or the sink
    /// after `i` stages): the stage before it, or the one source.
    pub fn in_chain(i: usize) -> Self {
        match i {
            0 => Producer::Source(0),
            _ => Producer::Stage(i - 1),
        }
    }
}

/// A sink and the streams it reads (several: their union).
pub struct SinkNode {
    /// The sink.
    pub end: Endpoint<OpenSink>,
    /// What it reads.
    pub inputs: Vec<Producer>,
}

/// How a parallel stage spreads records over its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routing {
    /// Same key, same worker: the key's hash picks one of `key_groups` key
    /// groups (see [`crate::key_group`]), and each worker owns a contiguous
    /// range of them.
    Hash {
        /// The pipeline's maximum parallelism: the number of key groups.
        key_groups: u32,
    },
    /// Whole batches to each worker in turn (stateless operators).
    RoundRobin,
}

/// One stage of operators.
pub struct OperatorStage {
    /// The stage's name.
    pub name: String,
    /// What it reads (several: their union, aligned as contract C1 says).
    pub inputs: Vec<Producer>,
    /// When its first operator tells its inputs apart (a join): the input
    /// number each of `inputs` feeds; else empty.
    pub input_numbers: Vec<usize>,
    /// Workers.
    pub parallelism: usize,
    /// How records are spread over the workers.
    pub routing: Routing,
    /// The input number whose records every worker gets (a global
    /// table's), whatever the routing.
    pub broadcast_input: Option<usize>,
    /// The operators every worker runs, in order.
    pub operators: Vec<OperatorNode>,
}
