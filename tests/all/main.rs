//! Integration tests: whole pipelines run by the `mailer` binary (or the
//! library) against real files, processes and signals. One test binary, a
//! module per area. The plugins must be built first (`just plugins`).

mod admin;
mod backpressure;
mod branch;
mod checkpoints;
mod cluster;
mod cluster_admin;
mod cluster_built_in_code;
mod cluster_churn;
mod cluster_faults;
mod cluster_runs;
mod cluster_topics;
mod co_process;
mod dashboard;
mod failure_policies;
mod golden;
mod graph;
mod joins;
mod kafka;
mod kafka_faults;
mod kafka_recovery;
mod kafka_security;
mod languages;
mod manifests;
mod metrics;
mod pipeline_tests;
mod postgres;
mod process;
mod quickstart;
mod recovery;
mod replay;
mod s3_checkpoints;
mod sandbox;
mod sandbox_raw;
mod scaffold;
mod sdk_worlds;
mod shutdown;
mod state_migration;
mod state_queries;
mod support;
mod swap;
mod tap;
mod trials;
mod windows;
mod word_count;
