//! The manifest settings of the PostgreSQL sink.

use crate::config_string::ConfigString;
use crate::failure::FailurePolicy;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The `postgres` sink.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresSinkSpec {
    /// The connection string (`postgres://user:password@host:port/db` or
    /// `host=… user=…`); use `${VAR}`: it is never shown.
    pub dsn: ConfigString,
    /// The table written to, `name` or `schema.name`.
    pub table: String,
    /// Each column written and where its value comes from.
    pub columns: BTreeMap<String, ColumnSpec>,
    /// `insert` (default) or `upsert`.
    #[serde(default)]
    pub mode: WriteMode,
    /// `upsert`: the columns of the table's unique key; a row whose key is
    /// already there updates it.
    #[serde(default)]
    pub conflict_columns: Vec<String>,
    /// Write each checkpoint interval's rows in one database transaction
    /// that also records the checkpoint (needs `[checkpoint]`).
    #[serde(default)]
    pub exactly_once: bool,
    /// How long a write is retried through connection losses and other
    /// transient errors before the pipeline stops.
    #[serde(default = "default_retry_timeout", with = "humantime_serde")]
    pub retry_timeout: Duration,
    /// TLS: `disable`, `prefer` (TLS when the server offers it), `require`
    /// (no certificate check), `verify-full` (the certificate and host name
    /// checked against `ca_file`, or the system's roots); by default the
    /// DSN's `sslmode` (itself `prefer` by default).
    pub tls: Option<TlsMode>,
    /// A CA certificate file (PEM) for `verify-full`.
    pub ca_file: Option<ConfigString>,
    /// `exactly_once`: the table (in the target's schema) recording each
    /// pipeline's last committed checkpoint.
    #[serde(default = "default_progress_table")]
    pub progress_table: String,
    /// A record the mapping cannot turn into a row (not JSON, a field of the
    /// wrong type): `fail` (default), `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
}

fn default_retry_timeout() -> Duration {
    Duration::from_secs(120)
}

fn default_progress_table() -> String {
    "mailer_progress".to_owned()
}

/// How rows are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteMode {
    /// Every record is a new row.
    #[default]
    Insert,
    /// A row whose conflict columns match an existing one replaces its
    /// other columns.
    Upsert,
}

/// TLS to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Never.
    Disable,
    /// When the server offers it.
    Prefer,
    /// Always, without checking the certificate.
    Require,
    /// Always, checking the certificate and the host name.
    VerifyFull,
}

/// One column: where its value comes from, and its type.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    /// A field of the record's JSON value (dotted path).
    pub field: Option<String>,
    /// Or a part of the record: `key`, `timestamp` or `value`.
    pub from: Option<RecordPart>,
    /// The value's type: `text`, `integer`, `float`, `boolean`,
    /// `timestamp` or `jsonb`.
    #[serde(rename = "type")]
    pub kind: ColumnType,
}

/// A part of a record other than a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordPart {
    /// The key (UTF-8).
    Key,
    /// The event time.
    Timestamp,
    /// The whole value.
    Value,
}

/// The type a column's value is written as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ColumnType {
    /// Text (`text`, `varchar`, `char`).
    Text,
    /// A whole number (`smallint`, `integer`, `bigint`, `numeric`).
    Integer,
    /// A number (`real`, `double precision`, `numeric`).
    Float,
    /// `boolean`.
    Boolean,
    /// A point in time (`timestamptz`, `timestamp`), from milliseconds
    /// since 1970 or an RFC 3339 string.
    Timestamp,
    /// A JSON document (`jsonb`, `json`).
    Jsonb,
}

impl ColumnType {
    /// The manifest's name of the type.
    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Integer => "integer",
            ColumnType::Float => "float",
            ColumnType::Boolean => "boolean",
            ColumnType::Timestamp => "timestamp",
            ColumnType::Jsonb => "jsonb",
        }
    }

    /// The type with an article, for messages ("an integer").
    pub fn described(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Integer => "an integer",
            ColumnType::Float => "a float",
            ColumnType::Boolean => "a boolean",
            ColumnType::Timestamp => "a timestamp",
            ColumnType::Jsonb => "JSON",
        }
    }

    /// Whether a column of the PostgreSQL type `typname` (as in `pg_type`)
    /// takes values of this type.
    pub fn fits(self, typname: &str) -> bool {
        let accepted: &[&str] = match self {
            ColumnType::Text => &["text", "varchar", "bpchar", "name", "citext"],
            ColumnType::Integer => &["int2", "int4", "int8", "numeric"],
            ColumnType::Float => &["float4", "float8", "numeric"],
            ColumnType::Boolean => &["bool"],
            ColumnType::Timestamp => &["timestamptz", "timestamp"],
            ColumnType::Jsonb => &["jsonb", "json"],
        };
        accepted.contains(&typname)
    }
}
