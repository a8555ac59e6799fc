//! The connectors a manifest can name: each `type = "…"` of a source or
//! sink table and the spec it parses into. Adding a connector is its own
//! folder (its spec implementing [`SourceConfig`] or [`SinkConfig`]) and one
//! line here.

use super::config::{SinkConfig, SourceConfig};
use super::file::{FileSinkSpec, FileSourceSpec};
use super::generator::GeneratorSpec;
use super::kafka::{KafkaSinkSpec, KafkaSourceSpec};
use super::postgres::PostgresSinkSpec;
use super::{blackhole::BlackholeSpec, stdout::StdoutSpec};
use serde::Deserialize;

/// An enum of connector specs tagged by `type`, and its dispatch to the
/// connector's trait.
macro_rules! registry {
    ($(#[$meta:meta])* $name:ident: $config:ident { $($(#[$doc:meta])* $variant:ident($spec:ty),)* }) => {
        $(#[$meta])*
        #[derive(Debug, Deserialize)]
        #[serde(tag = "type", rename_all = "snake_case")]
        pub enum $name {
            $($(#[$doc])* $variant(Box<$spec>),)*
        }

        impl $name {
            /// The connector's spec.
            pub fn config(&self) -> &dyn $config {
                match self {
                    $(Self::$variant(spec) => spec.as_ref(),)*
                }
            }

            /// The connector's spec, to fill its `${VAR}`s.
            pub fn config_mut(&mut self) -> &mut dyn $config {
                match self {
                    $(Self::$variant(spec) => spec.as_mut(),)*
                }
            }
        }
    };
}

registry! {
    /// Where records come from: a `[source]` or `[[sources]]` table.
    SourceSpec: SourceConfig {
        /// Deterministic generated records.
        Generator(GeneratorSpec),
        /// A bounded file of lines or JSON lines.
        File(FileSourceSpec),
        /// Kafka topics.
        Kafka(KafkaSourceSpec),
    }
}

registry! {
    /// Where records go: a `[sink]`, `[[sinks]]`, `[dead_letter]` or
    /// `[late_output]` table.
    SinkSpec: SinkConfig {
        /// Standard output.
        Stdout(StdoutSpec),
        /// A file.
        File(FileSinkSpec),
        /// Discards everything (benchmarks).
        Blackhole(BlackholeSpec),
        /// A Kafka topic.
        Kafka(KafkaSinkSpec),
        /// A PostgreSQL table.
        Postgres(PostgresSinkSpec),
    }
}
