//! Checks `[cluster]`: what cluster mode runs (one Kafka source, one Kafka
//! sink on the same brokers) and what it does not (checkpoints: state lives
//! in changelog topics; the parts not built yet are refused by name).

use super::spec::*;
use super::{Manifest, ManifestError};
use crate::connectors::kafka::StartFrom;

pub(super) fn check_cluster(m: &Manifest) -> Result<(), ManifestError> {
    let Some(c) = &m.spec.cluster else {
        return Ok(());
    };
    let span = c.span();
    let spec = c.get_ref();
    let refuse = |key: &str, message: String| Err(m.error_at(&span, key, message));
    if spec.group.trim().is_empty() {
        return refuse(
            "group",
            "group must not be empty: name the consumer group the processes share".into(),
        );
    }
    if spec.commit_interval.is_zero() {
        return refuse("commit_interval", "commit_interval must be longer than 0".into());
    }
    if spec.session_timeout < std::time::Duration::from_secs(1) {
        return refuse("session_timeout", "session_timeout must be at least 1s".into());
    }
    let key_groups = m.spec.pipeline.get_ref().max_parallelism;
    if let Some(n) = spec.repartition_partitions
        && !(1..=key_groups).contains(&n)
    {
        return refuse(
            "repartition_partitions",
            format!(
                "repartition_partitions {n} is out of range: expected 1 to the pipeline's max_parallelism ({key_groups}), as each keyed task owns at least one key group"
            ),
        );
    }
    if spec.static_membership && spec.instance_id.is_none() {
        return refuse(
            "static_membership",
            "static membership joins the group under `instance_id`: set `instance_id = \"${VAR}\"` (a different value per process)".into(),
        );
    }
    if spec.standby_replicas > 0 {
        return refuse(
            "standby_replicas",
            "standby replicas are not built yet: a moved task restores from its changelog; set standby_replicas = 0".into(),
        );
    }
    let not_here = |section: &str, why: &str| {
        Err(m.error_at(&span, "group", format!("cluster mode runs no `{section}`: {why}")))
    };
    if m.spec.checkpoint.is_some() {
        return not_here(
            "[checkpoint]",
            "its state lives in changelog topics and commits with Kafka transactions; remove `[checkpoint]`",
        );
    }
    if m.spec.admin.is_some() {
        return not_here(
            "[admin]",
            "the admin API is not built for cluster mode yet; remove `[admin]`",
        );
    }
    if m.spec.dead_letter.is_some() || m.spec.late_output.is_some() {
        return not_here(
            "[dead_letter] or [late_output]",
            "side outputs are not built for cluster mode yet; use `on_error = \"fail\"` or `\"skip\"`",
        );
    }
    let sources = m.sources();
    let [source] = sources.as_slice() else {
        return not_here("[[sources]]", "it reads one Kafka source, `[source]`");
    };
    let SourceSpec::Kafka(kafka) = source.spec else {
        return Err(m.error_at(
            &source.span,
            "type",
            "cluster mode reads a Kafka source only: the group splits its partitions among the processes",
        ));
    };
    if kafka.bounded {
        return Err(m.error_at(
            &source.span,
            "bounded",
            "a cluster's processes run until stopped: remove `bounded`",
        ));
    }
    if !matches!(kafka.start, StartFrom::Earliest | StartFrom::Committed) {
        return Err(m.error_at(
            &source.span,
            "start",
            "in cluster mode the group's committed offsets say where each partition resumes, and a partition without one is read from its beginning: use `earliest` or `committed`",
        ));
    }
    let sinks = m.sinks();
    let [sink] = sinks.as_slice() else {
        return not_here("[[sinks]]", "it writes one Kafka sink, `[sink]`");
    };
    let SinkSpec::Kafka(out) = sink.spec else {
        return Err(m.error_at(
            &sink.span,
            "type",
            "cluster mode writes a Kafka sink only: its records commit in the same transactions as the group's offsets",
        ));
    };
    if out.bootstrap_servers.value() != kafka.bootstrap_servers.value() {
        return Err(m.error_at(
            &sink.span,
            "bootstrap_servers",
            "in cluster mode the sink writes in the same transactions as the source's group: it must name the source's brokers",
        ));
    }
    Ok(())
}
