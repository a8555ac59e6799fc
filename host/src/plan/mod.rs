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
    CheckpointSettings, CheckpointStore, CommittedCheckpoint, FolderLock, LockError, OperatorMeta, Restore,
    RestoreTarget, StoreError,
};
use crate::connectors::{Endpoint, OpenSink, OpenSource, SinkCheck};
use crate::failure::FailureStats;
use crate::operators::{NodeKind, OperatorNode};
use crate::plugin::{LoadedPlugin, PluginError};
use crate::state::BackendKind;
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
    /// The checkpoint store `checkpoint` describes, opened once (by
    /// [`Plan::open_checkpoint_store`]) for both restoring and the run's
    /// checkpoints: with a bucket, opening lists it and reads every kept
    /// checkpoint's metadata.
    pub checkpoint_store: Option<CheckpointStore>,
    /// The checkpoint to resume from, if any (set before the run).
    pub restore: Option<Restore>,
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
    /// Operators resuming with a swapped-in plugin: the digest of the
    /// manifest's plugin each replaces.
    pub swapped_from: std::collections::BTreeMap<String, String>,
    /// Whether a plugin may resume state of a higher state version than it
    /// declares (`mailer run --force`).
    pub allow_state_downgrade: bool,
    /// Whether a process operator resuming state of an older state version
    /// migrates every key in the background (`mailer run --migrate
    /// eager`).
    pub migrate_every_key: bool,
    /// Cluster mode's settings, when the pipeline runs in it.
    pub cluster: Option<ClusterSettings>,
    /// What the manifest may have wrong without being invalid (a
    /// `state_ttl` name the plugin never uses, a `project` field no record
    /// has): `validate` prints them, `run` logs them.
    pub warnings: Vec<String>,
}

/// An operator running a plugin: its name, the plugin it starts with, and
/// its counts of records and failures (over all workers).
#[derive(Clone)]
pub struct PluginOperator {
    /// Its name in the manifest.
    pub name: String,
    /// The plugin it starts with.
    pub plugin: Arc<LoadedPlugin>,
    /// Its counts.
    pub failures: Arc<FailureStats>,
    /// Its stage's parallelism.
    pub workers: usize,
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
    /// Each operator with the plugin it runs now, as checkpoints record them.
    pub fn operator_metas(&self) -> Vec<OperatorMeta> {
        self.stages
            .iter()
            .flat_map(|s| &s.operators)
            .map(|op| {
                let plugin = op.plugin();
                OperatorMeta {
                    name: op.name.clone(),
                    world: plugin.map(|p| p.world().to_string()),
                    plugin_digest: plugin.map(|p| p.digest().to_owned()),
                    manifest_digest: self.swapped_from.get(&op.name).cloned(),
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

    /// Opens the checkpoint store the settings describe, unless it is open
    /// already (or the pipeline takes no checkpoints).
    pub fn open_checkpoint_store(&mut self) -> Result<(), StoreError> {
        if let (Some(settings), None) = (&self.checkpoint, &self.checkpoint_store) {
            self.checkpoint_store = Some(CheckpointStore::open_settings(settings)?);
        }
        Ok(())
    }

    /// What a checkpoint restored into this pipeline is checked against
    /// (its store opened by [`Plan::open_checkpoint_store`]).
    pub fn restore_target(&self) -> RestoreTarget<'_> {
        RestoreTarget {
            checkpoint: self.checkpoint.as_ref(),
            store: self.checkpoint_store.as_ref(),
            committed: self.committed_checkpoint.as_ref(),
            key_groups: self.key_groups,
            manifest_hash: &self.manifest_hash,
            operators: self.operator_metas(),
            sources: self.sources.iter().map(|s| s.name.as_str()).collect(),
        }
    }

    /// Locks the folders the pipeline keeps its state in (the checkpoint
    /// folder, the RocksDB state folder) for this process, for as long as
    /// the locks live; fails when another process runs the pipeline.
    pub fn lock_folders(&self) -> Result<Vec<FolderLock>, LockError> {
        let mut folders: Vec<&Path> = Vec::new();
        if let Some(c) = &self.checkpoint {
            folders.push(&c.dir);
        }
        if let BackendKind::Rocks { dir, .. } = &self.state {
            folders.push(dir);
        }
        crate::checkpoint::lock_all(&folders)
    }

    /// The operators running a plugin that a swap may replace.
    pub fn plugin_operators(&self) -> Vec<PluginOperator> {
        self.stages
            .iter()
            .flat_map(|s| s.operators.iter().map(|op| (op, s.parallelism)))
            .filter_map(|(op, workers)| {
                Some(PluginOperator {
                    name: op.name.clone(),
                    plugin: op.plugin()?.clone(),
                    failures: op.failures.clone(),
                    workers,
                })
            })
            .collect()
    }

    /// Resuming from a checkpoint taken after a plugin swap: each swapped
    /// operator runs the version the checkpoint recorded (from the plugin
    /// store, into which it is fetched from the checkpoint's copy when this
    /// machine's store lacks it) — unless the manifest now names another
    /// plugin than the one the swap replaced, a deliberate upgrade, which
    /// wins.
    pub fn use_swapped_plugins(&mut self, engine: &crate::plugin::PluginEngine) -> Result<(), PluginError> {
        let Some(restore) = &self.restore else {
            return Ok(());
        };
        let location = self.checkpoint_store.as_ref().map(CheckpointStore::location);
        for meta in &restore.metadata.operators {
            let (Some(original), Some(digest)) = (&meta.manifest_digest, &meta.plugin_digest) else {
                continue;
            };
            let node = self
                .stages
                .iter_mut()
                .flat_map(|s| &mut s.operators)
                .find(|op| op.name == meta.name);
            let Some(node) = node else { continue };
            let name = node.name.clone();
            let Some(plugin) = node.plugin_mut() else {
                continue;
            };
            if plugin.digest() != original {
                tracing::info!(operator = %name, "the manifest names a new plugin: it replaces the one swapped in before");
                continue;
            }
            let swapped = |reason: String| PluginError::Swapped {
                operator: name.clone(),
                checkpoint: restore.metadata.id,
                digest: digest.clone(),
                reason,
            };
            let path =
                swapped_plugin(&self.plugin_store, restore, digest, location.as_deref()).map_err(swapped)?;
            let loaded = engine.load_with(&path, plugin.world(), &name, plugin.fueled())?;
            if loaded.digest() != digest {
                return Err(swapped(format!(
                    "the plugin store's `{}` holds other bytes (SHA-256 {}): remove it, and the checkpoint's copy is fetched in its place",
                    path.display(),
                    loaded.digest()
                )));
            }
            *plugin = loaded;
            self.swapped_from.insert(name.clone(), original.clone());
            tracing::info!(operator = %name, %digest, "resuming with the plugin swapped in before the checkpoint");
        }
        Ok(())
    }
}

/// The file of the plugin `digest` that `restore` resumes with, in the
/// plugin store `store`: copied there from the checkpoint (whose folder
/// holds it, downloaded from `location` with the checkpoint when that is a
/// bucket) when the store lacks it, its digest checked; why not, naming
/// where it was looked for.
fn swapped_plugin(
    store: &Path,
    restore: &Restore,
    digest: &str,
    location: Option<&str>,
) -> Result<PathBuf, String> {
    let path = crate::plugin::store::path_of(store, digest);
    if path.is_file() {
        return Ok(path);
    }
    let from = crate::checkpoint::plugin_in(&restore.dir, digest);
    let bytes = crate::checkpoint::read_plugin(&restore.dir, digest).map_err(|reason| {
        let read = location.map_or_else(String::new, |l| format!(", read from `{l}`"));
        match restore.metadata.plugins.contains_key(digest) {
            true => format!("the plugin store lacks `{}`, and the checkpoint's copy cannot be used: {reason}", path.display()),
            false => format!(
                "neither the plugin store (`{}`) nor the checkpoint (`{}`{read}) holds it: the checkpoint was taken before checkpoints kept swapped-in plugins. Put the component at `{}`, or name the plugin to run in the manifest",
                path.display(),
                from.display(),
                path.display()
            ),
        }
    })?;
    let (stored, _) = crate::plugin::store::put(store, &bytes)
        .map_err(|e| format!("cannot write it into the plugin store `{}`: {e}", store.display()))?;
    tracing::info!(%digest, from = %from.display(), to = %stored.display(),
        "fetched the swapped-in plugin from the checkpoint into the plugin store");
    Ok(stored)
}

/// Why a plugin cannot resume the state a checkpoint holds (see
/// [`Plan::check_state_versions`]).
#[derive(Debug, thiserror::Error)]
pub enum StateVersionError {
    /// The plugin declares an older state version than the state's.
    #[error(
        "operator `{operator}`: checkpoint {checkpoint} holds state at state version {state}, and its plugin `{plugin}` declares state version {declared}: an older version cannot read state a newer one migrated. Run a version of state version {state} or higher, or start anyway with `mailer run --force` (the plugin then reads state it may not understand)"
    )]
    Downgrade {
        /// The operator.
        operator: String,
        /// The checkpoint resumed.
        checkpoint: u64,
        /// The highest state version its state is at.
        state: u32,
        /// The plugin's file.
        plugin: String,
        /// The plugin's state version.
        declared: u32,
    },
    /// The plugin declares a newer state version and cannot migrate.
    #[error(
        "operator `{operator}`: checkpoint {checkpoint} holds state at state version {state}, and its plugin `{plugin}` declares state version {declared} but exports no `migrate` to bring the state to it: give it one (`#[operator(process, state_version = {declared}, migrate = f)]`)"
    )]
    NoMigration {
        /// The operator.
        operator: String,
        /// The checkpoint resumed.
        checkpoint: u64,
        /// The lowest state version its state is at.
        state: u32,
        /// The plugin's file.
        plugin: String,
        /// The plugin's state version.
        declared: u32,
    },
}

impl Plan {
    /// Refuses to resume state with a plugin of a lower state version than
    /// a plugin that wrote it (unless the run allows it), or of a higher
    /// one that cannot migrate it.
    pub fn check_state_versions(&self) -> Result<(), StateVersionError> {
        let Some(restore) = &self.restore else {
            return Ok(());
        };
        for op in self.stages.iter().flat_map(|s| &s.operators) {
            let (Some(plugin), Some(versions)) = (op.plugin(), restore.metadata.state_versions_of(&op.name))
            else {
                continue;
            };
            let (operator, checkpoint) = (op.name.clone(), restore.metadata.id);
            let (path, declared) = (plugin.path().display().to_string(), plugin.state_version());
            if versions.unmarked < declared && !plugin.migrates() {
                return Err(StateVersionError::NoMigration {
                    operator,
                    checkpoint,
                    state: versions.unmarked,
                    plugin: path,
                    declared,
                });
            }
            if versions.current > declared {
                let downgrade = StateVersionError::Downgrade {
                    operator,
                    checkpoint,
                    state: versions.current,
                    plugin: path,
                    declared,
                };
                if !self.allow_state_downgrade {
                    return Err(downgrade);
                }
                tracing::warn!("{downgrade} (forced)");
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Metadata;
    use sha2::Digest;

    /// A checkpoint in `dir` whose folder keeps the plugin `bytes` (when
    /// `kept`), as one taken after swapping it in does; its digest.
    fn restore_of(dir: &Path, bytes: &[u8], kept: bool) -> (Restore, String) {
        let digest = hex::encode(sha2::Sha256::digest(bytes));
        let checkpoint = dir.join("chk-7");
        let mut metadata = Metadata::new(7, "p", "h", 128);
        if kept {
            let path = crate::checkpoint::plugin_in(&checkpoint, &digest);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
            metadata.plugins.insert(digest.clone(), bytes.len() as u64);
        }
        let restore = Restore {
            dir: checkpoint,
            metadata,
            migrate_every_key: false,
        };
        (restore, digest)
    }

    #[test]
    fn a_swapped_in_plugin_the_store_lacks_is_fetched_from_the_checkpoint_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("plugins");
        let (restore, digest) = restore_of(dir.path(), b"component", true);
        let path = swapped_plugin(&store, &restore, &digest, None).unwrap();
        assert_eq!(path, crate::plugin::store::path_of(&store, &digest));
        assert_eq!(std::fs::read(&path).unwrap(), b"component");
        // Once there, the store's copy is used.
        std::fs::remove_dir_all(&restore.dir).unwrap();
        assert_eq!(swapped_plugin(&store, &restore, &digest, None).unwrap(), path);

        // A corrupt copy in the checkpoint never reaches the store.
        let (restore, digest) = restore_of(&dir.path().join("b"), b"other component", true);
        std::fs::write(
            crate::checkpoint::plugin_in(&restore.dir, &digest),
            b"0ther component",
        )
        .unwrap();
        let e = swapped_plugin(&store, &restore, &digest, None).unwrap_err();
        assert!(e.contains("does not match its digest"), "{e}");
        assert!(!crate::plugin::store::path_of(&store, &digest).exists());
    }

    #[test]
    fn a_swapped_in_plugin_found_nowhere_is_an_error_naming_where_it_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("plugins");
        let (restore, digest) = restore_of(dir.path(), b"component", false);
        let e = swapped_plugin(&store, &restore, &digest, Some("s3://b/p")).unwrap_err();
        let in_store = crate::plugin::store::path_of(&store, &digest);
        let in_checkpoint = crate::checkpoint::plugin_in(&restore.dir, &digest);
        for looked in [
            in_store.display().to_string(),
            in_checkpoint.display().to_string(),
        ] {
            assert!(e.contains(&looked), "{e}");
        }
        assert!(e.contains("s3://b/p"), "{e}");
        let e = PluginError::Swapped {
            operator: "counts".into(),
            checkpoint: 7,
            digest: digest.clone(),
            reason: e,
        }
        .to_string();
        assert!(
            e.starts_with(&format!(
                "operator `counts` resumes from checkpoint 7 with plugin {digest}"
            )),
            "{e}"
        );
    }
}
