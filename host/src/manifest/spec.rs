//! The manifest as written: serde structs, every field documented, unknown
//! fields rejected. `docs/manifest.md` is the user's version of this file.

use crate::config_string::ConfigString;
pub use crate::connectors::{SinkSpec, SourceSpec};
use crate::failure::FailurePolicy;
use crate::plugin::CallMode;
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

/// One operator.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OperatorSpec {
    /// A plugin of the `map` world.
    Map(PluginOperatorSpec),
    /// A plugin of the `filter` world.
    Filter(PluginOperatorSpec),
    /// A plugin of the `flat-map` world.
    FlatMap(PluginOperatorSpec),
    /// A plugin of the `reduce` world; needs a `key_by` before it.
    Reduce(PluginOperatorSpec),
    /// A plugin of the `process` world (keyed state and timers); needs a
    /// `key_by` before it.
    Process(PluginOperatorSpec),
    /// A plugin of the `co-process` world: a keyed process function of two
    /// keyed streams (`left` and `right`) sharing each key's state and
    /// timers.
    CoProcess(PluginOperatorSpec),
    /// Starts a keyed stage: records are spread over its workers by key.
    KeyBy(KeyBySpec),
    /// Windows with built-in aggregates or a plugin window function; needs a
    /// `key_by` before it.
    Window(WindowOperatorSpec),
    /// Keeps records whose JSON field compares true with a constant.
    FieldFilter(FieldFilterSpec),
    /// Keeps only some fields of each JSON value.
    Project(ProjectSpec),
    /// Renames fields of each JSON value.
    Rename(RenameSpec),
    /// Sets fields of each JSON value to constants.
    Set(SetSpec),
    /// Running count / sum / min / max / avg per key, one result per
    /// record; needs a `key_by` before it.
    Aggregate(AggregateSpec),
    /// Joins two keyed streams: records of equal keys whose times are
    /// within an interval of each other.
    IntervalJoin(IntervalJoinOperatorSpec),
    /// Joins a keyed stream with a table (a keyed changelog): each record
    /// with its key's row.
    LookupJoin(LookupJoinOperatorSpec),
    /// Splits a stream into named outputs (`input = "<name>.<branch>"`):
    /// each record goes to the first branch whose predicate holds, else to
    /// `<name>.default`.
    Branch(BranchOperatorSpec),
}

/// The `branch` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchOperatorSpec {
    /// The operator's name (its outputs are `<name>.<branch>` and
    /// `<name>.default`); `branch` when absent.
    pub name: Option<String>,
    /// The branches, in the order they are tried.
    pub branches: Vec<BranchSpec>,
    /// What to do with a record a predicate fails on (not JSON for a
    /// condition, a plugin's error): `fail` (default), `skip` or
    /// `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// What the branches' plugins may reach; nothing when absent.
    #[serde(default)]
    pub grants: GrantsSpec,
    /// Workers, when it runs before any `key_by` (default 1). After a
    /// `key_by`, it runs on its workers instead.
    pub parallelism: Option<usize>,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// One branch of a `branch` operator: its name and its predicate, a
/// condition on a JSON field (`field`, `op`, `value`, as `field_filter`)
/// or a `filter`-world `plugin` (the records it keeps).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchSpec {
    /// The output's name (read as `<operator>.<name>`); not `default`.
    pub name: String,
    /// The JSON field (dotted path) to compare.
    pub field: Option<String>,
    /// `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `exists` or `regex`.
    pub op: Option<crate::operators::builtin::Compare>,
    /// The constant to compare with (a pattern for `regex`; none for
    /// `exists`).
    pub value: Option<toml::Value>,
    /// Or a plugin of the `filter` world, relative to the manifest's folder.
    pub plugin: Option<ConfigString>,
    /// `batch` (default) or `record`: how calls cross into `plugin`.
    #[serde(default)]
    pub call: CallMode,
    /// How long one call of `plugin` may run.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance of `plugin` may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel one call of `plugin` may burn; unlimited when absent.
    pub fuel: Option<u64>,
}

/// The `lookup_join` operator: each record of `input` with the row of its
/// key in `table`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupJoinOperatorSpec {
    /// The operator's name; `lookup_join` when absent.
    pub name: Option<String>,
    /// The stream (keyed by the join key).
    pub input: String,
    /// The table: a keyed stream read as a changelog, the latest value per
    /// key (an empty value deletes the key).
    pub table: String,
    /// `latest` (default: the row when the record is processed) or
    /// `event_time` (the row valid at the record's event time).
    #[serde(default)]
    pub as_of: crate::operators::join::AsOf,
    /// `inner` (default: records without a row are dropped) or `left`
    /// (they leave with `"table": null`).
    #[serde(default)]
    pub join: crate::operators::join::JoinKind,
    /// Stream records at or before the watermark when they arrive (as of
    /// `event_time`): `drop` (default) or `side-output`; counted either way.
    #[serde(default)]
    pub late: LateSpec,
    /// A global table: every worker reads the whole table, so `input`
    /// needs no `key_by` (joined as of `latest` only).
    #[serde(default)]
    pub global: bool,
    /// With `global`: the JSON field (dotted path) of a stream record
    /// holding its join key; the record's key when absent.
    pub key_field: Option<String>,
    /// With `global`: the most rows the table may hold (1,000,000 when
    /// absent); a change adding one more stops the pipeline.
    pub max_rows: Option<u64>,
    /// What to do with a stream record without `key_field` (with
    /// `global`) and with a pair the plugin fails on (its JSON document
    /// goes to the policy): `fail` (default), `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// With `global` and an `input` that is not keyed: its workers
    /// (default 1).
    pub parallelism: Option<usize>,
    /// A `join`-world plugin computing each output; the JSON document of
    /// both sides when absent.
    pub plugin: Option<JoinPluginSpec>,
}

/// The `interval_join` operator: a `left` record at time `t` joins each
/// `right` record of its key at a time in `[t + lower, t + upper]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalJoinOperatorSpec {
    /// The operator's name; `interval_join` when absent.
    pub name: Option<String>,
    /// The left stream (keyed): a source's or an earlier operator's name.
    pub left: String,
    /// The right stream (keyed, by the same parallelism).
    pub right: String,
    /// The earliest right record a left one joins, relative to it: a
    /// duration, negative for before it (`"-5s"`).
    #[serde(with = "signed_ms")]
    pub lower: i64,
    /// The latest right record a left one joins, relative to it (`"10s"`).
    #[serde(with = "signed_ms")]
    pub upper: i64,
    /// `inner` (default: joined pairs only), `left`, `right` or `full`
    /// (also the records of that side that joined nothing, once the
    /// watermark passed their interval).
    #[serde(default)]
    pub join: crate::operators::join::JoinKind,
    /// Records at or before the watermark when they arrive: `drop`
    /// (default) or `side-output` (to `[late_output]`); counted either way.
    #[serde(default)]
    pub late: LateSpec,
    /// A `join`-world plugin computing each output; the JSON document of
    /// both sides when absent.
    pub plugin: Option<JoinPluginSpec>,
    /// What to do with a pair the plugin fails on (its JSON document goes
    /// to the policy): `fail` (default), `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
}

/// A duration with an optional leading `-` (`"-5s"`, `"1m 30s"`), in ms.
mod signed_ms {
    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        let (sign, magnitude) = match text.trim().strip_prefix('-') {
            Some(rest) => (-1, rest.trim()),
            None => (1, text.trim()),
        };
        let duration = humantime_serde::re::humantime::parse_duration(magnitude).map_err(|e| {
            D::Error::custom(format!(
                "`{text}` is not a duration such as \"-5s\" or \"10s\": {e}"
            ))
        })?;
        let ms = i64::try_from(duration.as_millis())
            .map_err(|_| D::Error::custom(format!("`{text}` is too long a duration")))?;
        Ok(sign * ms)
    }
}

/// The `field_filter` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldFilterSpec {
    /// The operator's name; `field_filter` when absent.
    pub name: Option<String>,
    /// The JSON field (dotted path) to compare.
    pub field: String,
    /// `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `exists` or `regex`.
    pub op: crate::operators::builtin::Compare,
    /// The constant to compare with (a pattern for `regex`; none for
    /// `exists`).
    pub value: Option<toml::Value>,
    /// What to do with a record whose value is not JSON.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The `project` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    /// The operator's name; `project` when absent.
    pub name: Option<String>,
    /// The fields (dotted paths) to keep.
    pub fields: Vec<String>,
    /// What to do with a record whose value is not a JSON object.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The `rename` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameSpec {
    /// The operator's name; `rename` when absent.
    pub name: Option<String>,
    /// `old = "new"` for each field (dotted paths).
    pub fields: std::collections::BTreeMap<String, String>,
    /// What to do with a record whose value is not a JSON object.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The `set` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    /// The operator's name; `set` when absent.
    pub name: Option<String>,
    /// `field = value` for each field (dotted paths; any TOML value).
    pub fields: std::collections::BTreeMap<String, toml::Value>,
    /// What to do with a record whose value is not a JSON object.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The `aggregate` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateSpec {
    /// The operator's name; `aggregate` when absent.
    pub name: Option<String>,
    /// Any of `count`, `sum`, `min`, `max`, `avg`.
    #[serde(default = "defaults::aggregates")]
    pub aggregates: Vec<crate::operators::window::AggregateKind>,
    /// The JSON field (dotted path) of the number; the value itself as
    /// decimal text when absent.
    pub field: Option<String>,
    /// What to do with a record that has no number.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// A built-in window operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowOperatorSpec {
    /// The operator's name; `window` when absent.
    pub name: Option<String>,
    /// `tumbling`, `sliding` or `session`.
    pub window: WindowKind,
    /// Window length (tumbling, sliding).
    #[serde(default, with = "humantime_serde::option")]
    pub size: Option<Duration>,
    /// Distance between window starts (sliding).
    #[serde(default, with = "humantime_serde::option")]
    pub slide: Option<Duration>,
    /// Inactivity that closes a session (session).
    #[serde(default, with = "humantime_serde::option")]
    pub gap: Option<Duration>,
    /// How long after its end a window still takes records (and emits its
    /// result again).
    #[serde(default, with = "humantime_serde")]
    pub allowed_lateness: Duration,
    /// The aggregates of each result: `count` (default), `sum`, `min`,
    /// `max`, `avg`. Not with `plugin`.
    pub aggregates: Option<Vec<crate::operators::window::AggregateKind>>,
    /// The JSON field (dotted path) of the number to aggregate; the value
    /// itself as decimal text when absent. Not with `plugin`.
    pub field: Option<String>,
    /// A plugin that computes each window's result instead of the built-in
    /// aggregates: of the `window` world (called with all of a window's
    /// records) or of the `aggregate` world (an accumulator grown record by
    /// record). Relative to the manifest's folder.
    pub plugin: Option<ConfigString>,
    /// How long one call of `plugin` may run.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance of `plugin` may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel (about one unit per Wasm instruction) one call may burn;
    /// unlimited when absent. Counting fuel slows the plugin down.
    pub fuel: Option<u64>,
    /// The most records one input record may turn into; more fails that
    /// record.
    #[serde(default = "defaults::max_outputs_per_record")]
    pub max_outputs_per_record: u32,
    /// What the plugin may reach; nothing when absent.
    #[serde(default)]
    pub grants: GrantsSpec,
    /// Records too late for every window: `drop` (default) or `side-output`
    /// (to `[late_output]`); counted either way.
    #[serde(default)]
    pub late: LateSpec,
    /// What to do with a record that has no number to aggregate.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// `event` (default: the records' event time, fired by watermarks) or
    /// `processing` (the wall clock; tumbling and sliding windows only).
    #[serde(default)]
    pub time: TimeDomain,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// Which time windows follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeDomain {
    /// The records' event time.
    #[default]
    Event,
    /// The wall clock when a record is handled.
    Processing,
}

/// A window shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// Fixed, non-overlapping.
    Tumbling,
    /// Fixed length, overlapping.
    Sliding,
    /// Per key, closed by inactivity.
    Session,
}

/// What happens to records too late for their windows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LateSpec {
    /// Dropped (counted).
    #[default]
    Drop,
    /// Sent to `[late_output]` (counted).
    SideOutput,
}

impl OperatorSpec {
    /// The `input` and `inputs` it names (neither: the operator before it).
    pub fn wiring(&self) -> (Option<&String>, Option<&Vec<String>>) {
        let (input, inputs) = match self {
            Self::Map(p) | Self::Filter(p) | Self::FlatMap(p) | Self::Reduce(p) | Self::Process(p) => {
                (&p.input, &p.inputs)
            }
            Self::CoProcess(_) => return (None, None),
            Self::KeyBy(k) => (&k.input, &k.inputs),
            Self::Window(w) => (&w.input, &w.inputs),
            Self::FieldFilter(f) => (&f.input, &f.inputs),
            Self::Project(p) => (&p.input, &p.inputs),
            Self::Rename(r) => (&r.input, &r.inputs),
            Self::Set(s) => (&s.input, &s.inputs),
            Self::Aggregate(a) => (&a.input, &a.inputs),
            Self::Branch(b) => (&b.input, &b.inputs),
            Self::IntervalJoin(_) | Self::LookupJoin(_) => return (None, None),
        };
        (input.as_ref(), inputs.as_ref())
    }

    /// The plugin settings, for operators that run a plugin.
    pub fn plugin(&self) -> Option<&PluginOperatorSpec> {
        match self {
            Self::Map(p)
            | Self::Filter(p)
            | Self::FlatMap(p)
            | Self::Reduce(p)
            | Self::Process(p)
            | Self::CoProcess(p) => Some(p),
            _ => None,
        }
    }

    /// The plugin settings, mutable.
    pub fn plugin_mut(&mut self) -> Option<&mut PluginOperatorSpec> {
        match self {
            Self::Map(p)
            | Self::Filter(p)
            | Self::FlatMap(p)
            | Self::Reduce(p)
            | Self::Process(p)
            | Self::CoProcess(p) => Some(p),
            _ => None,
        }
    }

    /// The world of the plugin the operator runs.
    pub fn world(&self) -> Option<crate::plugin::World> {
        use crate::plugin::World;
        match self {
            Self::Map(_) => Some(World::Map),
            Self::Filter(_) => Some(World::Filter),
            Self::FlatMap(_) => Some(World::FlatMap),
            Self::Reduce(_) => Some(World::Reduce),
            Self::Process(_) => Some(World::Process),
            Self::CoProcess(_) => Some(World::CoProcess),
            _ => None,
        }
    }
}

/// An operator whose logic is a plugin.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginOperatorSpec {
    /// The operator's name (unique in the pipeline); the plugin file's stem
    /// when absent.
    pub name: Option<String>,
    /// The component file, relative to the manifest's folder.
    pub plugin: ConfigString,
    /// What to do with a record the plugin fails on: `fail` (default),
    /// `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// `batch` (default: one call per batch) or `record` (one call per record).
    #[serde(default)]
    pub call: CallMode,
    /// How long one call may run before it is interrupted and counts as a
    /// failure.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel (about one unit per Wasm instruction) one call may burn;
    /// unlimited when absent. Counting fuel slows the plugin down.
    pub fuel: Option<u64>,
    /// The most records one input record may turn into; more fails that
    /// record.
    #[serde(default = "defaults::max_outputs_per_record")]
    pub max_outputs_per_record: u32,
    /// What the plugin may reach; nothing when absent.
    #[serde(default)]
    pub grants: GrantsSpec,
    /// Workers for a stateless operator before any `key_by` (default 1).
    /// After a `key_by`, operators run on its workers instead.
    pub parallelism: Option<usize>,
    /// `process` operators: how long each named state lives after its last
    /// write (`{ declines = "60s" }`); without an entry, state lives until
    /// the plugin clears it.
    #[serde(default)]
    pub state_ttl: std::collections::BTreeMap<String, humantime_serde::Serde<Duration>>,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
    /// `co_process` operators: the keyed stream handed to `on-left`.
    pub left: Option<String>,
    /// `co_process` operators: the keyed stream handed to `on-right`.
    pub right: Option<String>,
}

/// The plugin of a join: a `join`-world component that makes each pair's
/// output records instead of the JSON document of both sides. Written as
/// the file (`plugin = "x.wasm"`) or as a table with its limits
/// (`plugin = { path = "x.wasm", timeout = "2s" }`).
#[derive(Debug)]
pub struct JoinPluginSpec {
    /// The component file, relative to the manifest's folder.
    pub path: ConfigString,
    /// Its call mode and limits.
    pub settings: JoinPluginSettings,
}

/// The settings of a join's plugin besides its file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinPluginSettings {
    /// `batch` (default: one call per batch of pairs) or `record`.
    #[serde(default)]
    pub call: CallMode,
    /// How long one call may run.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel one call may burn; unlimited when absent.
    pub fuel: Option<u64>,
    /// The most records one pair may turn into; more fails that pair.
    #[serde(default = "defaults::max_outputs_per_record")]
    pub max_outputs_per_record: u32,
}

impl<'de> Deserialize<'de> for JoinPluginSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Table {
            path: ConfigString,
            #[serde(flatten)]
            settings: toml::Table,
        }
        #[derive(Deserialize)]
        #[serde(
            untagged,
            expecting = "a plugin file, or a table with `path` and the plugin's limits"
        )]
        enum Written {
            File(ConfigString),
            Table(Table),
        }
        let (path, settings) = match Written::deserialize(d)? {
            Written::File(path) => (path, toml::Table::new()),
            Written::Table(t) => (t.path, t.settings),
        };
        let settings = toml::Value::Table(settings)
            .try_into()
            .map_err(|e: toml::de::Error| serde::de::Error::custom(e.message()))?;
        Ok(Self { path, settings })
    }
}

/// What an operator's plugin may reach beyond nothing (WASI capabilities).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantsSpec {
    /// A directory (relative to the manifest) the plugin reads, not writes,
    /// as `/data`.
    pub dir: Option<ConfigString>,
    /// Environment variables the plugin sees, with the values they have when
    /// the pipeline starts.
    #[serde(default)]
    pub env: Vec<String>,
    /// The real wall and monotonic clocks (else frozen at 0).
    #[serde(default)]
    pub clocks: bool,
    /// Real randomness (else zeros).
    #[serde(default)]
    pub random: bool,
}

/// The `key_by` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyBySpec {
    /// The number of keyed workers (default 1).
    #[serde(default = "defaults::one_usize")]
    pub parallelism: usize,
    /// Key by this JSON field (dotted path) of the value; by the record's
    /// key when absent.
    pub field: Option<String>,
    /// What to do with a record without the field (with `field`).
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
    /// The operator's name (what others name as their `input`); `key_by`
    /// when absent.
    pub name: Option<String>,
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

    /// Records one input record may turn into.
    pub const fn max_outputs_per_record() -> u32 {
        10_000
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
    /// One.
    pub const fn one_usize() -> usize {
        1
    }
    /// Per-call deadline.
    pub const fn plugin_timeout() -> Duration {
        Duration::from_secs(1)
    }
    /// Window aggregates.
    pub fn aggregates() -> Vec<crate::operators::window::AggregateKind> {
        vec![crate::operators::window::AggregateKind::Count]
    }
    /// Instance memory limit.
    pub const fn memory_limit_mb() -> u64 {
        64
    }
    /// The largest plugin the admin API accepts, in MiB.
    pub const fn max_plugin_mb() -> u64 {
        64
    }
    /// Time between checkpoints.
    pub const fn checkpoint_interval() -> Duration {
        Duration::from_secs(10)
    }
    /// The rows a global table may hold.
    pub const fn max_global_rows() -> u64 {
        1_000_000
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
