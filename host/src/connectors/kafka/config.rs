//! The manifest settings of the Kafka source and sink.

use crate::config_string::ConfigString;
use crate::failure::FailurePolicy;
use serde::Deserialize;
use std::collections::BTreeMap;

/// The `kafka` source.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceSpec {
    /// `host:port` of one or more brokers, comma-separated.
    pub bootstrap_servers: ConfigString,
    /// The topics to read; every partition of each is read.
    pub topics: Vec<String>,
    /// The consumer group offsets are committed to (informational: resuming
    /// uses the checkpoint's offsets).
    pub group_id: String,
    /// Where to start without a checkpoint: `earliest` (default), `latest`,
    /// `committed` (the group's offsets; earliest where there are none), or
    /// `{ timestamp = <ms> }`.
    #[serde(default)]
    pub start: StartFrom,
    /// How values are read: `bytes` (default), `string` (must be UTF-8) or
    /// `json` (must be a JSON document; enables `key_field` and
    /// `timestamp_field`).
    #[serde(default)]
    pub format: KafkaFormat,
    /// `json`: the field (dotted path) that becomes the key, instead of the
    /// Kafka key.
    pub key_field: Option<String>,
    /// `json`: the field (dotted path, ms) that becomes the event time,
    /// instead of the Kafka timestamp.
    pub timestamp_field: Option<String>,
    /// Stop once every partition reached the end it had when the pipeline
    /// started (a bounded read); by default the source runs until stopped.
    #[serde(default)]
    pub bounded: bool,
    /// The largest record (key, value and headers) it passes on; a larger
    /// one follows `on_error`.
    #[serde(default = "crate::connectors::config::default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// How often an unbounded source looks for partitions added to its
    /// topics (read from their beginning).
    #[serde(default = "default_partition_discovery", with = "humantime_serde")]
    pub partition_discovery: std::time::Duration,
    /// What happens to a record the `format` cannot read (not UTF-8, not
    /// JSON, no key or time field): `fail` (default), `skip` or
    /// `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// TLS and SASL.
    pub security: Option<KafkaSecurity>,
    /// More librdkafka settings, `{ "fetch.min.bytes" = "1" }`.
    #[serde(default)]
    pub options: BTreeMap<String, ConfigString>,
}

impl KafkaSourceSpec {
    /// A source reading every partition of `topics` on `bootstrap_servers`
    /// as group `group_id`, with the manifest's defaults for the rest (raw
    /// bytes from the earliest offset, unbounded).
    pub fn new(bootstrap_servers: &str, topics: &[&str], group_id: &str) -> Self {
        Self {
            bootstrap_servers: ConfigString::new(bootstrap_servers),
            topics: topics.iter().map(|t| (*t).to_owned()).collect(),
            group_id: group_id.to_owned(),
            start: StartFrom::default(),
            format: KafkaFormat::default(),
            key_field: None,
            timestamp_field: None,
            bounded: false,
            max_record_bytes: crate::connectors::config::default_max_record_bytes(),
            partition_discovery: default_partition_discovery(),
            on_error: FailurePolicy::default(),
            security: None,
            options: BTreeMap::new(),
        }
    }
}

/// Where a Kafka source starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StartFrom {
    /// The oldest record of each partition.
    #[default]
    Earliest,
    /// Only records that arrive after the start.
    Latest,
    /// The consumer group's committed offsets.
    Committed,
    /// The first record at or after this time (ms).
    Timestamp(i64),
}

/// How a Kafka source reads values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KafkaFormat {
    /// As they are.
    #[default]
    Bytes,
    /// UTF-8 text.
    String,
    /// A JSON document.
    Json,
}

/// The `kafka` sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSinkSpec {
    /// `host:port` of one or more brokers, comma-separated.
    pub bootstrap_servers: ConfigString,
    /// The topic written to.
    pub topic: String,
    /// How long the producer waits to fill a batch (`linger.ms`).
    #[serde(default = "default_linger", with = "humantime_serde")]
    pub linger: std::time::Duration,
    /// The partition of every record; by default Kafka's partitioner picks
    /// one from the key.
    pub partition: Option<i32>,
    /// Write each checkpoint interval's output in one Kafka transaction,
    /// committed once the checkpoint is durable (needs `[checkpoint]`;
    /// consumers read with `isolation.level=read_committed`).
    #[serde(default)]
    pub exactly_once: bool,
    /// With `exactly_once`: the compacted topic where each transaction also
    /// records which checkpoint's output it commits (made when missing).
    #[serde(default = "default_commit_topic")]
    pub commit_topic: String,
    /// How long the producer retries a record through broker errors and
    /// outages before the pipeline stops (`message.timeout.ms`).
    #[serde(default = "default_delivery_timeout", with = "humantime_serde")]
    pub delivery_timeout: std::time::Duration,
    /// What happens to a record the brokers refuse for itself (too large,
    /// invalid): `fail` (default), `skip` or `dead-letter`. Outages are
    /// retried, never skipped.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// TLS and SASL.
    pub security: Option<KafkaSecurity>,
    /// More librdkafka settings, `{ "compression.type" = "lz4" }`.
    #[serde(default)]
    pub options: BTreeMap<String, ConfigString>,
}

impl KafkaSinkSpec {
    /// A sink writing to `topic` on `bootstrap_servers` at least once, with
    /// the manifest's defaults for the rest.
    pub fn new(bootstrap_servers: &str, topic: &str) -> Self {
        Self {
            bootstrap_servers: ConfigString::new(bootstrap_servers),
            topic: topic.to_owned(),
            linger: default_linger(),
            partition: None,
            exactly_once: false,
            commit_topic: default_commit_topic(),
            delivery_timeout: default_delivery_timeout(),
            on_error: FailurePolicy::default(),
            security: None,
            options: BTreeMap::new(),
        }
    }
}

const fn default_linger() -> std::time::Duration {
    std::time::Duration::from_millis(5)
}

const fn default_partition_discovery() -> std::time::Duration {
    std::time::Duration::from_secs(10)
}

fn default_commit_topic() -> String {
    "mailer-commits".to_owned()
}

const fn default_delivery_timeout() -> std::time::Duration {
    std::time::Duration::from_secs(120)
}

/// TLS and SASL settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSecurity {
    /// `plaintext` (default), `ssl`, `sasl_plaintext` or `sasl_ssl`.
    #[serde(default)]
    pub protocol: SecurityProtocol,
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    pub sasl_mechanism: Option<String>,
    /// The SASL user.
    pub username: Option<ConfigString>,
    /// The SASL password (use `${VAR}`; never shown).
    pub password: Option<ConfigString>,
    /// A CA certificate file for TLS.
    pub ca_location: Option<ConfigString>,
}

/// `security.protocol`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// No TLS, no SASL.
    #[default]
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl SecurityProtocol {
    fn librdkafka(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "plaintext",
            SecurityProtocol::Ssl => "ssl",
            SecurityProtocol::SaslPlaintext => "sasl_plaintext",
            SecurityProtocol::SaslSsl => "sasl_ssl",
        }
    }
}

/// The librdkafka settings of a connection: servers, security, options.
pub fn client_config(
    bootstrap: &ConfigString,
    security: Option<&KafkaSecurity>,
    options: &BTreeMap<String, ConfigString>,
) -> rdkafka::ClientConfig {
    let mut c = rdkafka::ClientConfig::new();
    c.set("bootstrap.servers", bootstrap.value());
    // Asking about a topic never makes it (brokers do by default, with one
    // partition): a missing topic is refused by name, and the cluster's
    // own topics are made with the partitions they need.
    c.set("allow.auto.create.topics", "false");
    if let Some(s) = security {
        c.set("security.protocol", s.protocol.librdkafka());
        if let Some(m) = &s.sasl_mechanism {
            c.set("sasl.mechanism", m);
        }
        if let Some(u) = &s.username {
            c.set("sasl.username", u.value());
        }
        if let Some(p) = &s.password {
            c.set("sasl.password", p.value());
        }
        if let Some(ca) = &s.ca_location {
            c.set("ssl.ca.location", ca.value());
        }
    }
    for (k, v) in options {
        c.set(k, v.value());
    }
    c
}

/// The settings both sinks' producers share: the connection, `linger` and
/// `delivery_timeout`.
pub fn producer_config(spec: &KafkaSinkSpec) -> rdkafka::ClientConfig {
    let mut c = client_config(&spec.bootstrap_servers, spec.security.as_ref(), &spec.options);
    c.set("linger.ms", spec.linger.as_millis().to_string()).set(
        "message.timeout.ms",
        spec.delivery_timeout.as_millis().to_string(),
    );
    c
}

/// The sink's `transaction.timeout.ms`: what its `options` set, else
/// `default`.
pub fn transaction_timeout(spec: &KafkaSinkSpec, default: std::time::Duration) -> std::time::Duration {
    spec.options
        .get("transaction.timeout.ms")
        .and_then(|v| v.value().parse().ok())
        .map_or(default, std::time::Duration::from_millis)
}

/// Makes a producer's settings transactional under `id`, its transactions
/// timing out after [`transaction_timeout`], and no record waiting longer
/// than its transaction may stay open (librdkafka refuses a
/// `message.timeout.ms` above `transaction.timeout.ms`).
pub fn set_transactional(
    config: &mut rdkafka::ClientConfig,
    spec: &KafkaSinkSpec,
    id: &str,
    default_timeout: std::time::Duration,
) {
    let timeout = transaction_timeout(spec, default_timeout);
    config
        .set("transactional.id", id)
        .set("transaction.timeout.ms", timeout.as_millis().to_string())
        .set(
            "message.timeout.ms",
            spec.delivery_timeout.min(timeout).as_millis().to_string(),
        );
}

/// Every `${VAR}` field of a connection, for resolving.
pub fn config_strings<'a>(
    bootstrap: &'a mut ConfigString,
    security: Option<&'a mut KafkaSecurity>,
    options: &'a mut BTreeMap<String, ConfigString>,
) -> Vec<(&'static str, &'a mut ConfigString)> {
    let mut fields = vec![("bootstrap_servers", bootstrap)];
    if let Some(s) = security {
        for (key, field) in [
            ("username", s.username.as_mut()),
            ("password", s.password.as_mut()),
            ("ca_location", s.ca_location.as_mut()),
        ] {
            if let Some(f) = field {
                fields.push((key, f));
            }
        }
    }
    fields.extend(options.values_mut().map(|v| ("options", v)));
    fields
}
