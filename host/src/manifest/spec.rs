//! The manifest as written: serde structs, every field documented, unknown
//! fields rejected. `docs/manifest.md` is the user's version of this file.

use crate::config_string::ConfigString;
pub use crate::connectors::{SinkSpec, SourceSpec};
pub use crate::operators::OperatorSpec;
use serde::Deserialize;
use std::time::Duration;
use toml::Spanned;

/// A whole manifest.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestSpec {
    /// Pipeline-wide settings.
    pub pipeline: Spanned<PipelineSpec>,
    /// Where records come from (a linear pipeline's one source, named
    /// `source`).
    pub source: Option<Spanned<SourceSpec>>,
    /// The operators, in order.
    #[serde(default)]
    pub operators: Vec<Spanned<OperatorSpec>>,
    /// Where results go (a linear pipeline's one sink, named `sink`).
    pub sink: Option<Spanned<SinkSpec>>,
    /// Where records go that an operator with `on_error = "dead-letter"`
    /// fails on, with the reason in the `mailer.error` header.
    pub dead_letter: Option<Spanned<SinkSpec>>,
    /// Where records too late for their windows go, for windows with
    /// `late = "side-output"`.
    pub late_output: Option<Spanned<SinkSpec>>,
    /// Event-time watermarks from the source; none when absent (windows then
    /// fire at the end of a bounded input).
    pub watermark: Option<Spanned<WatermarkSpec>>,
    /// Where keyed state lives; in memory when absent.
    pub state: Option<Spanned<StateSpec>>,
    /// `[checkpoint]`: periodic checkpoints and resuming from them.
    pub checkpoint: Option<Spanned<CheckpointSpec>>,
    /// `[cluster]`: run in cluster mode, the work shared by every process
    /// running this manifest through a Kafka consumer group.
    pub cluster: Option<Spanned<ClusterSpec>>,
    /// `[admin]`: the admin API (plugin swaps); off when absent.
    pub admin: Option<Spanned<AdminSpec>>,
    /// `[[sources]]`: the named sources of a graph pipeline (instead of
    /// `[source]`).
    #[serde(default)]
    pub sources: Vec<Spanned<NamedSource>>,
    /// `[[sinks]]`: the named sinks of a graph pipeline (instead of
    /// `[sink]`).
    #[serde(default)]
    pub sinks: Vec<Spanned<NamedSink>>,
}

/// Cluster mode (docs/architecture.md, "Cluster mode"): every process
/// running the manifest joins one consumer group, which splits the
/// source's partitions and each `key_by`'s repartition topic among them.
/// The brokers are the Kafka source's (the sink must be on them too).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSpec {
    /// The consumer group (and the prefix of the processes' transactional
    /// ids).
    pub group: String,
    /// This process's stable name (use `${VAR}`): its transactional id, so
    /// a restarted process fences the one it replaces at once (aborting its
    /// open transaction), and its client id.
    pub instance_id: Option<ConfigString>,
    /// Also join the group under `instance_id` (Kafka's static
    /// membership): a restart within `session_timeout` keeps its
    /// partitions without a rebalance; a stop moves them only after
    /// `session_timeout`.
    #[serde(default)]
    pub static_membership: bool,
    /// The partitions of each repartition topic, so the keyed tasks of
    /// each `key_by`; by default the source topics' largest partition count.
    pub repartition_partitions: Option<u32>,
    /// Warm copies of each keyed task's state on other processes.
    #[serde(default)]
    pub standby_replicas: u32,
    /// How often each process commits its output, repartition records,
    /// state changes and consumed offsets (one Kafka transaction with
    /// `exactly_once`).
    #[serde(default = "defaults::commit_interval", with = "humantime_serde")]
    pub commit_interval: Duration,
    /// How long a silent process stays in the group before its partitions
    /// move to the others (`session.timeout.ms`).
    #[serde(default = "defaults::session_timeout", with = "humantime_serde")]
    pub session_timeout: Duration,
    /// How the group moves partitions when processes join or leave.
    #[serde(default)]
    pub rebalance: Rebalancing,
    /// The replicas of each topic the cluster makes (repartition,
    /// changelog, `<pipeline>.offsets.committed`); existing ones with
    /// fewer are refused. By default the smaller of 3 and the brokers
    /// listed (existing ones with fewer: a warning).
    pub replication_factor: Option<std::num::NonZeroU16>,
    /// The least time between two deletions of the repartition topics'
    /// records below the committed offsets.
    #[serde(default = "defaults::purge_interval", with = "humantime_serde")]
    pub purge_interval: Duration,
    /// The admin API addresses (or networks) the CLI may send the admin
    /// token to, besides `[admin] listen`'s: the processes advertise their
    /// address in their `client.id`, which anyone joining the group chooses.
    #[serde(default)]
    pub admin_addresses: Vec<super::AdminAddress>,
}

impl ClusterSpec {
    /// Cluster mode in consumer group `group`, with the manifest's defaults
    /// (no instance id, dynamic membership, cooperative rebalancing).
    pub fn new(group: &str) -> Self {
        Self {
            group: group.to_owned(),
            instance_id: None,
            static_membership: false,
            repartition_partitions: None,
            standby_replicas: 0,
            commit_interval: defaults::commit_interval(),
            session_timeout: defaults::session_timeout(),
            rebalance: Rebalancing::default(),
            replication_factor: None,
            purge_interval: defaults::purge_interval(),
            admin_addresses: Vec::new(),
        }
    }
}

/// How the group moves partitions when members join or leave.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rebalancing {
    /// Kafka's incremental protocol (`cooperative-sticky`): only the
    /// partitions that move stop, the others keep running.
    #[default]
    Cooperative,
    /// Every rebalance takes every partition from every member and hands
    /// them out again (`roundrobin`): each task restores its state again.
    /// For brokers whose incremental protocol does not work.
    Eager,
}

impl Rebalancing {
    /// librdkafka's `partition.assignment.strategy`.
    pub fn strategy(self) -> &'static str {
        match self {
            Rebalancing::Cooperative => "cooperative-sticky",
            Rebalancing::Eager => "roundrobin",
        }
    }
}

/// The admin API.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminSpec {
    /// The address it listens on; loopback by default, so nothing beyond
    /// this machine reaches it.
    #[serde(default = "defaults::admin_listen")]
    pub listen: std::net::SocketAddr,
    /// The bearer token every request must carry (use `${VAR}`).
    pub token: Option<ConfigString>,
    /// Or a file holding the token (its first line).
    pub token_file: Option<ConfigString>,
    /// After a swap, the new version is on probation for this many records.
    #[serde(default = "defaults::probation_records")]
    pub probation_records: u64,
    /// A new version failing more than this share of its probation records
    /// is rolled back automatically.
    #[serde(default = "defaults::rollback_failure_share")]
    pub rollback_failure_share: f64,
    /// Whether plugin calls are timed and `/metrics` and the dashboard are
    /// served.
    #[serde(default = "defaults::yes")]
    pub metrics: bool,
    /// Whether scraping `/metrics` needs the token too.
    #[serde(default)]
    pub metrics_need_token: bool,
    /// The largest component a swap may upload, in MiB.
    #[serde(default = "defaults::max_plugin_mb")]
    pub max_plugin_mb: u64,
    /// More `Host` header values the server answers (besides its listen
    /// address, `localhost` and the loopback addresses at its port), e.g.
    /// a proxy's name.
    #[serde(default)]
    pub allowed_hosts: Vec<String>,
    /// The server's certificate chain (PEM): with `tls_key`, the API is
    /// served over TLS only.
    pub tls_cert: Option<ConfigString>,
    /// The server's private key (PEM).
    pub tls_key: Option<ConfigString>,
    /// The CA certificate (PEM) the CLI checks the servers' certificates
    /// against; `tls_cert` itself (a self-signed one) when absent.
    pub tls_ca: Option<ConfigString>,
}

impl PipelineSpec {
    /// The batch size: as set, or the default (1024) cut to
    /// `edge_capacity`.
    pub fn batch_size(&self) -> usize {
        self.batch_size_set
            .unwrap_or_else(|| defaults::batch_size().min(self.edge_capacity))
    }
}

/// Watermarks with bounded out-of-orderness.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatermarkSpec {
    /// How far out of order (in event time) records may arrive: the
    /// watermark trails the largest event time seen by this much.
    #[serde(default, with = "humantime_serde")]
    pub max_out_of_orderness: Duration,
    /// A source split (partition) with no record for this long stops
    /// holding the watermark back; never when absent.
    #[serde(default, with = "humantime_serde::option")]
    pub idle_timeout: Option<Duration>,
}

/// Where keyed state lives.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateSpec {
    /// `memory` (default) or `rocksdb`.
    #[serde(default)]
    pub backend: StateBackendName,
    /// The folder of the RocksDB databases (one per keyed worker and
    /// operator), relative to the manifest's folder; `.mailer/<pipeline>/state`
    /// when absent.
    pub path: Option<ConfigString>,
    /// The write-back cache of each keyed worker's RocksDB state, in MiB
    /// (64 when absent; 0 for none).
    pub cache_mb: Option<u32>,
    /// RocksDB's block cache of each database, in MiB (128 when absent).
    pub block_cache_mb: Option<u32>,
}

/// `[checkpoint]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointSpec {
    /// Time between checkpoints (e.g. `"10s"`).
    #[serde(default = "defaults::checkpoint_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// The folder, relative to the manifest's folder, or an S3 bucket
    /// prefix (`s3://bucket/prefix`); `.mailer/<pipeline>/checkpoints`
    /// when absent.
    pub path: Option<ConfigString>,
    /// With an `s3://` path: the local folder checkpoints are written into
    /// before they are uploaded (`.mailer/<pipeline>/checkpoints` when
    /// absent).
    pub local_path: Option<ConfigString>,
    /// Complete checkpoints kept (the newest).
    #[serde(default = "defaults::checkpoints_kept")]
    pub keep: usize,
    /// Checkpoints in a row that may fail (disk full, a worker's error)
    /// before the pipeline stops.
    #[serde(default = "defaults::tolerable_failures")]
    pub tolerable_failures: u32,
    /// How long a checkpoint may take before it counts as failed (a stage
    /// or sink that never acknowledges its barrier).
    #[serde(default = "defaults::checkpoint_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// `[checkpoint.s3]`: how to reach the bucket of `s3://` paths (and of
    /// savepoints in buckets).
    #[serde(default)]
    pub s3: S3Spec,
}

/// `[checkpoint.s3]`: S3 or an S3-compatible server. What is left out
/// comes from the `AWS_*` environment variables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct S3Spec {
    /// The server's URL (`http://127.0.0.1:9000`); AWS's when absent.
    pub endpoint: Option<ConfigString>,
    /// The region.
    pub region: Option<ConfigString>,
    /// The access key's id (`${VAR}` placeholders recommended).
    pub access_key_id: Option<ConfigString>,
    /// The secret access key (`${VAR}`).
    pub secret_access_key: Option<ConfigString>,
    /// A session token for temporary credentials (`${VAR}`).
    pub session_token: Option<ConfigString>,
    /// Address buckets as host names (`<bucket>.<endpoint>`) rather than in
    /// the path.
    #[serde(default)]
    pub virtual_hosted_style: bool,
    /// How long one request may take.
    #[serde(default = "defaults::s3_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    /// Retries of a failed request.
    #[serde(default = "defaults::s3_max_retries")]
    pub max_retries: usize,
    /// Files uploaded or downloaded at once.
    #[serde(default = "defaults::s3_concurrency")]
    pub concurrency: usize,
}

impl Default for S3Spec {
    fn default() -> Self {
        Self {
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            session_token: None,
            virtual_hosted_style: false,
            request_timeout: defaults::s3_request_timeout(),
            max_retries: defaults::s3_max_retries(),
            concurrency: defaults::s3_concurrency(),
        }
    }
}

/// A state backend.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StateBackendName {
    /// In memory.
    #[default]
    Memory,
    /// RocksDB on disk.
    Rocksdb,
}

/// Pipeline-wide settings.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineSpec {
    /// The pipeline's name: letters, digits, `-` and `_`.
    pub name: String,
    /// The most records an edge between two stages holds; a full edge blocks
    /// its sender (backpressure).
    #[serde(default = "defaults::edge_capacity")]
    pub edge_capacity: usize,
    /// The most records moved (and sent to a plugin) as one batch, at most
    /// `edge_capacity`; see [`PipelineSpec::batch_size`] for the default.
    #[serde(default, rename = "batch_size")]
    pub batch_size_set: Option<usize>,
    /// How long a graceful stop may drain before blocked stages are aborted.
    #[serde(default = "defaults::shutdown_timeout", with = "humantime_serde")]
    pub shutdown_timeout: Duration,
    /// The number of key groups: the highest keyed parallelism a pipeline
    /// can ever be restored at. Fixed for the life of a pipeline.
    #[serde(default = "defaults::max_parallelism")]
    pub max_parallelism: u32,
}

/// One of `[[sources]]`: a source with its name.
#[derive(Debug, Deserialize)]
pub struct NamedSource {
    /// Its name, unique among sources, operators and sinks.
    pub name: String,
    /// The source.
    #[serde(flatten)]
    pub spec: SourceSpec,
}

/// One of `[[sinks]]`: a sink with its name and the streams it reads.
#[derive(Debug, Deserialize)]
pub struct NamedSink {
    /// Its name, unique among sources, operators and sinks.
    pub name: String,
    /// The stream it reads (a source's or an operator's name); the last
    /// operator (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
    /// The sink.
    #[serde(flatten)]
    pub spec: SinkSpec,
}

/// Defaults of optional fields.
pub mod defaults {
    use std::time::Duration;

    /// Records a swapped-in plugin is watched over.
    pub fn probation_records() -> u64 {
        1000
    }

    /// The share of failures over probation that rolls a swap back.
    pub fn rollback_failure_share() -> f64 {
        0.1
    }

    /// On.
    pub fn yes() -> bool {
        true
    }

    /// Where the admin API listens: loopback only.
    pub fn admin_listen() -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], 9464))
    }

    /// Cluster mode commits every second.
    pub const fn commit_interval() -> Duration {
        Duration::from_secs(1)
    }

    /// Cluster mode purges its repartition topics every 30 s at most
    /// (Kafka Streams' `repartition.purge.interval.ms`).
    pub const fn purge_interval() -> Duration {
        Duration::from_secs(30)
    }

    /// A process silent for 10 s leaves the group.
    pub const fn session_timeout() -> Duration {
        Duration::from_secs(10)
    }

    /// Records an edge holds.
    pub const fn edge_capacity() -> usize {
        4096
    }
    /// Records per batch.
    pub const fn batch_size() -> usize {
        1024
    }
    /// Graceful drain limit.
    pub const fn shutdown_timeout() -> Duration {
        Duration::from_secs(30)
    }
    /// Key groups.
    pub const fn max_parallelism() -> u32 {
        128
    }
    /// The largest plugin the admin API accepts, in MiB.
    pub const fn max_plugin_mb() -> u64 {
        64
    }
    /// Time between checkpoints.
    pub const fn checkpoint_interval() -> Duration {
        Duration::from_secs(10)
    }
    /// Complete checkpoints kept.
    pub const fn checkpoints_kept() -> usize {
        3
    }
    /// Checkpoint failures in a row tolerated.
    pub const fn tolerable_failures() -> u32 {
        3
    }
    /// How long a checkpoint may take.
    pub const fn checkpoint_timeout() -> Duration {
        Duration::from_secs(600)
    }
    /// How long one S3 request may take.
    pub const fn s3_request_timeout() -> Duration {
        crate::checkpoint::s3::DEFAULT_REQUEST_TIMEOUT
    }
    /// Retries of a failed S3 request.
    pub const fn s3_max_retries() -> usize {
        crate::checkpoint::s3::DEFAULT_MAX_RETRIES
    }
    /// S3 transfers at once.
    pub const fn s3_concurrency() -> usize {
        crate::checkpoint::s3::DEFAULT_CONCURRENCY
    }
}
