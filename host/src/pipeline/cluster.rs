//! Pipelines built in code that read and write Kafka
//! ([`Pipeline::kafka_source`], [`Stream::kafka_sink`]), and cluster mode
//! ([`Pipeline::cluster`]): the manifest's `[cluster]`, checked by the same
//! rules and run by the same engine.

use super::{Inner, Pipeline, Stream};
use crate::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec};
use crate::connectors::{ConnectorContext, SinkConfig, SourceConfig};
use crate::manifest::{
    ClusterPart, ClusterSpec, NOT_KAFKA_SINK, NOT_KAFKA_SOURCE, check_cluster_settings, check_cluster_source,
};
use crate::plan::{ClusterSettings, Plan};
use std::path::Path;

/// Cluster mode's settings, and the Kafka sources and sinks of a pipeline
/// being built.
#[derive(Default)]
pub(super) struct ClusterParts {
    spec: Option<ClusterSpec>,
    sources: Vec<KafkaSourceSpec>,
    sinks: Vec<KafkaSinkSpec>,
}

impl Pipeline {
    /// Runs this pipeline as one process of a cluster, as a manifest's
    /// `[cluster]` does (docs/manifest.md): every process runs the same
    /// pipeline, consumer group `spec.group` splits the Kafka source's
    /// partitions among them, and keyed state follows its partitions
    /// through changelog topics. The pipeline then reads
    /// [`kafka_source`](Self::kafka_source)s, writes one
    /// [`kafka_sink`](Stream::kafka_sink) on the same brokers, and has no
    /// branch, global table, checkpoints, admin API or dead-letter sink.
    pub fn cluster(self, spec: ClusterSpec) -> Self {
        self.inner.borrow_mut().cluster.spec = Some(spec);
        self
    }

    /// Reads the Kafka topics of `spec`, as a source named `name`.
    pub fn kafka_source(&self, name: &str, spec: KafkaSourceSpec) -> Stream {
        let endpoint = {
            let mut inner = self.inner.borrow_mut();
            if let Err(p) = spec.check(&context(&inner.name)) {
                inner
                    .problems
                    .push(format!("Kafka source `{name}`: {}", p.message));
            }
            let endpoint = spec.endpoint(&context(&inner.name), name);
            inner.cluster.sources.push(spec);
            endpoint
        };
        self.add_source(endpoint)
    }
}

impl Stream {
    /// Writes the stream to the Kafka topic of `spec`, as a sink named
    /// `name`. Exactly once (`spec.exactly_once`) in cluster mode only:
    /// each commit interval is one transaction there.
    pub fn kafka_sink(&self, name: &str, spec: KafkaSinkSpec) {
        let endpoint = {
            let mut inner = self.inner.borrow_mut();
            let endpoint = spec.endpoint(&context(&inner.name), name);
            inner.cluster.sinks.push(spec);
            endpoint
        };
        self.add_sink(endpoint);
    }
}

impl ClusterParts {
    /// What keeps `pipeline` from running as built: in cluster mode, each
    /// rule of `[cluster]` it breaks; otherwise an exactly-once Kafka sink.
    pub(super) fn problems(&self, pipeline: &Inner) -> Vec<String> {
        let Some(spec) = &self.spec else {
            return self
                .sinks
                .iter()
                .filter(|s| s.exactly_once)
                .map(|s| {
                    format!(
                        "the Kafka sink of topic `{}` is exactly once: in code, that runs in cluster mode (`Pipeline::cluster`) only",
                        s.topic
                    )
                })
                .collect();
        };
        let mut problems = Vec::new();
        let draft = &pipeline.draft;
        if pipeline.settings.checkpoint.is_some() {
            problems.push("cluster mode takes no checkpoints: state lives in changelog topics".to_owned());
        }
        if pipeline.dead_letter.is_some() {
            problems.push("the dead-letter sink is not built for cluster mode yet".to_owned());
        }
        if draft.sources.len() != self.sources.len() {
            problems.push(NOT_KAFKA_SOURCE.to_owned());
        }
        let ([first, ..], [sink]) = (self.sources.as_slice(), self.sinks.as_slice()) else {
            if draft.sinks.len() != self.sinks.len() {
                problems.push(NOT_KAFKA_SINK.to_owned());
            } else {
                problems.push("cluster mode reads Kafka sources and writes one Kafka sink".to_owned());
            }
            return problems;
        };
        if draft.sinks.len() != 1 {
            problems.push("cluster mode writes one Kafka sink".to_owned());
        }
        for (i, source) in self.sources.iter().enumerate() {
            let same_client = if i == 0 {
                Ok(())
            } else {
                check_cluster_source(first, source)
            };
            let checked = same_client
                .and_then(|()| check_cluster_settings(spec, pipeline.settings.key_groups, source, sink));
            if let Err(p) = checked {
                let part = match p.at {
                    ClusterPart::Cluster => "cluster",
                    ClusterPart::Source => "Kafka source",
                    ClusterPart::Sink => "Kafka sink",
                };
                let problem = format!("{part} `{}`: {}", p.key, p.message);
                if !problems.contains(&problem) {
                    problems.push(problem);
                }
            }
        }
        problems
    }

    /// Cluster mode's settings for `plan`, when it runs in cluster mode
    /// (after [`problems`](Self::problems) found none).
    pub(super) fn settings(&self, plan: &Plan) -> Result<Option<ClusterSettings>, String> {
        let (Some(spec), [sink]) = (&self.spec, self.sinks.as_slice()) else {
            return Ok(None);
        };
        ClusterSettings::new(spec, &self.sources, sink, plan).map(Some)
    }
}

/// What a Kafka connector of pipeline `name` is checked and opened with:
/// a pipeline built in code has no manifest folder, and its exactly-once
/// sinks run in cluster mode, which takes no checkpoints.
fn context(name: &str) -> ConnectorContext<'_> {
    ConnectorContext {
        pipeline: name,
        dir: Path::new("."),
        checkpoint_interval: None,
        tolerable_failures: 0,
    }
}
