//! Checks `[cluster]`: what cluster mode runs (Kafka sources and one Kafka
//! sink, all on the same brokers) and what it does not (checkpoints: state lives
//! in changelog topics; the parts not built yet are refused by name). The
//! rules of the settings themselves ([`check_cluster_settings`]) are shared
//! with pipelines built in code.

use super::spec::*;
use super::{Manifest, ManifestError};
use crate::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec, StartFrom};

/// Where a rule of cluster mode is broken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterPart {
    /// The cluster settings.
    Cluster,
    /// The Kafka source.
    Source,
    /// The Kafka sink.
    Sink,
}

/// A rule of cluster mode broken: where, which setting, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterProblem {
    /// The part the setting belongs to.
    pub at: ClusterPart,
    /// The setting.
    pub key: &'static str,
    /// What is wrong and what to do.
    pub message: String,
}

pub(super) fn check_cluster(m: &Manifest) -> Result<(), ManifestError> {
    let Some(c) = &m.spec.cluster else {
        return Ok(());
    };
    let span = c.span();
    let not_here = |section: &str, why: &str| {
        Err(m.error_at(&span, "group", format!("cluster mode runs no `{section}`: {why}")))
    };
    if m.spec.checkpoint.is_some() {
        return not_here(
            "[checkpoint]",
            "its state lives in changelog topics and commits with Kafka transactions; remove `[checkpoint]`",
        );
    }
    if m.spec.dead_letter.is_some() || m.spec.late_output.is_some() {
        return not_here(
            "[dead_letter] or [late_output]",
            "side outputs are not built for cluster mode yet; use `on_error = \"fail\"` or `\"skip\"`",
        );
    }
    let sinks = m.sinks();
    let [sink] = sinks.as_slice() else {
        return not_here("[[sinks]]", "it writes one Kafka sink, `[sink]`");
    };
    let SinkSpec::Kafka(out) = sink.spec else {
        return Err(m.error_at(&sink.span, "type", NOT_KAFKA_SINK));
    };
    let key_groups = m.spec.pipeline.get_ref().max_parallelism;
    let sources = m.sources();
    let mut first: Option<&KafkaSourceSpec> = None;
    let mut topics = std::collections::HashSet::new();
    for source in &sources {
        let SourceSpec::Kafka(kafka) = source.spec else {
            return Err(m.error_at(&source.span, "type", NOT_KAFKA_SOURCE));
        };
        if let Some(topic) = kafka.topics.iter().find(|t| !topics.insert(t.as_str())) {
            return Err(m.error_at(
                &source.span,
                "topics",
                format!("topic `{topic}` is read by another source too: in cluster mode one consumer reads each topic once, so each source reads topics of its own"),
            ));
        }
        let checked = match first {
            None => check_cluster_settings(c.get_ref(), key_groups, kafka, out),
            Some(first) => check_cluster_source(first, kafka)
                .and_then(|()| check_cluster_settings(c.get_ref(), key_groups, kafka, out)),
        };
        checked.map_err(|p| {
            let at = match p.at {
                ClusterPart::Cluster => &span,
                ClusterPart::Source => &source.span,
                ClusterPart::Sink => &sink.span,
            };
            m.error_at(at, p.key, p.message)
        })?;
        first.get_or_insert(kafka);
    }
    Ok(())
}

/// One consumer reads every source of a cluster, with the first source's
/// client settings: a later `source` names the same brokers and sets no
/// client settings of its own.
pub fn check_cluster_source(first: &KafkaSourceSpec, source: &KafkaSourceSpec) -> Result<(), ClusterProblem> {
    let problem = |key, message: &str| {
        Err(ClusterProblem {
            at: ClusterPart::Source,
            key,
            message: message.to_owned(),
        })
    };
    if source.bootstrap_servers.value() != first.bootstrap_servers.value() {
        return problem(
            "bootstrap_servers",
            "in cluster mode one consumer reads every source: it must name the first source's brokers",
        );
    }
    if source.security.is_some() || !source.options.is_empty() {
        let key = if source.security.is_some() {
            "security"
        } else {
            "options"
        };
        return problem(
            key,
            "in cluster mode one consumer reads every source with the first source's `security` and `options`: set them there only",
        );
    }
    Ok(())
}

/// Why a source other than Kafka cannot run in cluster mode.
pub const NOT_KAFKA_SOURCE: &str =
    "cluster mode reads a Kafka source only: the group splits its partitions among the processes";

/// Why a sink other than Kafka cannot run in cluster mode.
pub const NOT_KAFKA_SINK: &str = "cluster mode writes a Kafka sink only: its records commit in the same transactions as the group's offsets";

/// The rules of cluster mode for its settings `spec` (in a pipeline of
/// `key_groups` key groups), its Kafka `source` and its Kafka `sink`.
pub fn check_cluster_settings(
    spec: &ClusterSpec,
    key_groups: u32,
    source: &KafkaSourceSpec,
    sink: &KafkaSinkSpec,
) -> Result<(), ClusterProblem> {
    let problem = |at, key, message: String| Err(ClusterProblem { at, key, message });
    let refuse = |key, message: &str| problem(ClusterPart::Cluster, key, message.to_owned());
    if spec.group.trim().is_empty() {
        return refuse(
            "group",
            "group must not be empty: name the consumer group the processes share",
        );
    }
    if spec.commit_interval.is_zero() {
        return refuse("commit_interval", "commit_interval must be longer than 0");
    }
    if spec.session_timeout < std::time::Duration::from_secs(1) {
        return refuse("session_timeout", "session_timeout must be at least 1s");
    }
    if let Some(n) = spec.repartition_partitions
        && !(1..=key_groups).contains(&n)
    {
        return problem(
            ClusterPart::Cluster,
            "repartition_partitions",
            format!(
                "repartition_partitions {n} is out of range: expected 1 to the pipeline's max_parallelism ({key_groups}), as each keyed task owns at least one key group"
            ),
        );
    }
    if spec.static_membership && spec.instance_id.is_none() {
        return refuse(
            "static_membership",
            "static membership joins the group under `instance_id`: set `instance_id = \"${VAR}\"` (a different value per process)",
        );
    }
    if source.bounded {
        return problem(
            ClusterPart::Source,
            "bounded",
            "a cluster's processes run until stopped: remove `bounded`".into(),
        );
    }
    if !matches!(source.start, StartFrom::Earliest | StartFrom::Committed) {
        return problem(
            ClusterPart::Source,
            "start",
            "in cluster mode the group's committed offsets say where each partition resumes, and a partition without one is read from its beginning: use `earliest` or `committed`".into(),
        );
    }
    if sink.bootstrap_servers.value() != source.bootstrap_servers.value() {
        return problem(
            ClusterPart::Sink,
            "bootstrap_servers",
            "in cluster mode the sink writes in the same transactions as the source's group: it must name the source's brokers".into(),
        );
    }
    Ok(())
}
