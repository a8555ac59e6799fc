//! Cluster mode's plan: the `[cluster]` settings, and the pipeline cut at
//! each `key_by` into parts (sub-topologies) that tasks run. The first part
//! reads the source's partitions; each later one reads its repartition
//! topic, one task per partition, each task owning the key groups of
//! worker `partition` of as many workers as the topic has partitions.

use super::{NodeKind, OperatorStage, Plan, Producer, Routing};
use crate::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec};
use crate::manifest::ClusterSpec;
use std::ops::Range;
use std::time::Duration;

/// How this process takes part in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// The consumer group.
    pub group: String,
    /// This process's stable name (its transactional id).
    pub instance_id: Option<String>,
    /// Whether it joins the group under `instance_id`.
    pub static_membership: bool,
    /// Partitions of each repartition topic; the source's when `None`.
    pub repartition_partitions: Option<u32>,
    /// Warm copies of each keyed task's state on other processes.
    pub standby_replicas: usize,
    /// How often a process commits.
    pub commit_interval: Duration,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// How partitions move.
    pub rebalancing: crate::manifest::Rebalancing,
    /// The source (its brokers are the cluster's).
    pub source: KafkaSourceSpec,
    /// The sink.
    pub sink: KafkaSinkSpec,
    /// The parts, in order.
    pub parts: Vec<Part>,
}

impl ClusterSettings {
    /// The settings `spec` for `plan`, which reads `source` and writes
    /// `sink`: the plan cut into its parts, or why it cannot be.
    pub fn new(
        spec: &ClusterSpec,
        source: &KafkaSourceSpec,
        sink: &KafkaSinkSpec,
        plan: &Plan,
    ) -> Result<Self, String> {
        Ok(Self {
            group: spec.group.clone(),
            instance_id: spec.instance_id.as_ref().map(|i| i.value().to_owned()),
            static_membership: spec.static_membership,
            repartition_partitions: spec.repartition_partitions,
            standby_replicas: spec.standby_replicas as usize,
            commit_interval: spec.commit_interval,
            session_timeout: spec.session_timeout,
            rebalancing: spec.rebalance,
            source: source.clone(),
            sink: sink.clone(),
            parts: cluster_parts(plan)?,
        })
    }
}

/// One part of the pipeline: the stages a task of it runs, one after
/// another, on the records of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its stages (indexes into [`Plan::stages`]).
    pub stages: Range<usize>,
    /// For a keyed part: the operator its repartition topic is named after
    /// (its first one). `None` for the first part, which reads the source.
    pub repartition_by: Option<String>,
}

/// The parts of `plan`: it must be linear (one source, stages each reading
/// the one before, one sink); a new part starts at each keyed stage.
fn cluster_parts(plan: &Plan) -> Result<Vec<Part>, String> {
    if plan.sources.len() != 1 || plan.sinks.len() != 1 {
        return Err("cluster mode runs a linear pipeline: one source, one sink".into());
    }
    let mut parts = vec![Part {
        stages: 0..0,
        repartition_by: None,
    }];
    for (i, stage) in plan.stages.iter().enumerate() {
        check_linear(i, stage)?;
        if stage.routing != Routing::RoundRobin {
            parts.push(Part {
                stages: i..i,
                repartition_by: Some(stage.operators[0].name.clone()),
            });
        }
        parts.last_mut().expect("the source's part").stages.end = i + 1;
    }
    if plan.sinks[0].inputs != [Producer::in_chain(plan.stages.len())] {
        return Err("cluster mode runs a linear pipeline: the sink reads the last operator".into());
    }
    Ok(parts)
}

fn check_linear(i: usize, stage: &OperatorStage) -> Result<(), String> {
    for op in &stage.operators {
        let what = match &op.kind {
            NodeKind::Join(_) => "a join",
            NodeKind::Branch(_) => "a branch",
            _ => continue,
        };
        return Err(format!(
            "cluster mode runs a linear pipeline for now: operator `{}` is {what}",
            op.name
        ));
    }
    if stage.inputs != [Producer::in_chain(i)] {
        return Err(format!(
            "cluster mode runs a linear pipeline for now: operator `{}` reads more than the operator before it",
            stage.operators[0].name
        ));
    }
    Ok(())
}
