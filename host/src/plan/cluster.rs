//! Cluster mode's plan: the `[cluster]` settings, and the pipeline cut at
//! each keyed stage into parts (sub-topologies) that tasks run. A source
//! part runs what reads one source, on the partitions of its topics; a
//! keyed part reads its repartition topic, one task per partition, each
//! task owning the key groups of worker `partition` of as many workers as
//! the topic has partitions. Each part feeds one input of the next keyed
//! part, or the sink: the parts form a tree whose root writes the sink (a
//! join's two inputs are two parts feeding one).

use super::{OperatorStage, Plan, Producer, Routing};
use crate::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec};
use crate::manifest::ClusterSpec;
use crate::operators::NodeKind;
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
    /// Partitions of each repartition topic; the widest source's when `None`.
    pub repartition_partitions: Option<u32>,
    /// Warm copies of each keyed task's state on other processes.
    pub standby_replicas: usize,
    /// How often a process commits.
    pub commit_interval: Duration,
    /// `session.timeout.ms`.
    pub session_timeout: Duration,
    /// How partitions move.
    pub rebalancing: crate::manifest::Rebalancing,
    /// The replicas of each topic the cluster makes; the smaller of 3 and
    /// the brokers listed when `None`.
    pub replication_factor: Option<usize>,
    /// The least time between two purges of the repartition topics.
    pub purge_interval: Duration,
    /// The admin addresses, besides `[admin] listen`'s, the CLI may send
    /// the admin token to.
    pub admin_addresses: Vec<crate::manifest::AdminAddress>,
    /// The sources, in the plan's order (the first one's brokers, security
    /// and options are the cluster's: one consumer reads them all).
    pub sources: Vec<KafkaSourceSpec>,
    /// The sink.
    pub sink: KafkaSinkSpec,
    /// The parts: one per source (in the sources' order), then the keyed
    /// ones in the plan's order.
    pub parts: Vec<Part>,
}

impl ClusterSettings {
    /// The settings `spec` for `plan`, which reads `sources` and writes
    /// `sink`: the plan cut into its parts, or why it cannot be.
    pub fn new(
        spec: &ClusterSpec,
        sources: &[KafkaSourceSpec],
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
            replication_factor: spec.replication_factor.map(|n| usize::from(n.get())),
            purge_interval: spec.purge_interval,
            admin_addresses: spec.admin_addresses.clone(),
            sources: sources.to_vec(),
            sink: sink.clone(),
            parts: cluster_parts(plan)?,
        })
    }

    /// The source whose brokers, security and options the cluster's
    /// clients use.
    pub fn brokers(&self) -> &KafkaSourceSpec {
        &self.sources[0]
    }

    /// The keyed parts, each with its repartition topic's operator.
    pub fn keyed_parts(&self) -> impl Iterator<Item = (&Part, &str)> {
        self.parts.iter().filter_map(|p| match &p.reads {
            PartInput::Repartition { by } => Some((p, by.as_str())),
            PartInput::Source(_) => None,
        })
    }
}

/// What a part reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartInput {
    /// The partitions of source `i`'s topics.
    Source(usize),
    /// Its repartition topic, named after operator `by` (its first).
    Repartition {
        /// The operator.
        by: String,
    },
}

/// Where a part's output goes: input `input` of part `part` (a keyed one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Feed {
    /// The part (an index into [`ClusterSettings::parts`]).
    pub part: usize,
    /// The input of its first operator (0, or 1 for a join's second).
    pub input: usize,
}

/// One part of the pipeline: the stages a task of it runs, one after
/// another, on the records of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// Its stages (indexes into [`Plan::stages`]), in order.
    pub stages: Vec<usize>,
    /// What it reads.
    pub reads: PartInput,
    /// Where its output goes; `None`: to the sink.
    pub feeds: Option<Feed>,
    /// How many inputs its first operator tells apart (a join's two).
    pub inputs: usize,
}

/// A part being cut: the part and the producer its output is (its last
/// stage, or its source while it has none).
struct Cut {
    part: Part,
    tail: Producer,
}

/// The parts of `plan`: a part per source, running the stateless stages
/// that read it; a new part at each keyed stage, fed by the parts whose
/// outputs it reads. Each part's output has one reader (a stage or the
/// one sink), and no branch or global table is cut yet.
fn cluster_parts(plan: &Plan) -> Result<Vec<Part>, String> {
    if plan.sinks.len() != 1 {
        return Err("cluster mode writes one sink".into());
    }
    let mut cuts: Vec<Cut> = (0..plan.sources.len())
        .map(|i| Cut {
            part: Part {
                stages: Vec::new(),
                reads: PartInput::Source(i),
                feeds: None,
                inputs: 1,
            },
            tail: Producer::Source(i),
        })
        .collect();
    let mut part_of_stage = Vec::with_capacity(plan.stages.len());
    for (i, stage) in plan.stages.iter().enumerate() {
        check_cuttable(stage)?;
        let part = if stage.routing == Routing::RoundRobin {
            let [from] = stage.inputs[..] else {
                return Err(not_cut(stage, "reads the union of several streams"));
            };
            let k = fed_part(&cuts, &part_of_stage, from, stage)?;
            cuts[k].part.stages.push(i);
            cuts[k].tail = Producer::Stage(i);
            k
        } else {
            let k = cuts.len();
            let numbers = if stage.input_numbers.is_empty() {
                vec![0; stage.inputs.len()]
            } else {
                stage.input_numbers.clone()
            };
            for (&from, &input) in stage.inputs.iter().zip(&numbers) {
                let upstream = fed_part(&cuts, &part_of_stage, from, stage)?;
                cuts[upstream].part.feeds = Some(Feed { part: k, input });
            }
            cuts.push(Cut {
                part: Part {
                    stages: vec![i],
                    reads: PartInput::Repartition {
                        by: stage.operators[0].name.clone(),
                    },
                    feeds: None,
                    inputs: numbers.iter().max().map_or(1, |n| n + 1),
                },
                tail: Producer::Stage(i),
            });
            k
        };
        part_of_stage.push(part);
    }
    let [from] = plan.sinks[0].inputs[..] else {
        return Err(
            "cluster mode writes one stream to its sink: put the streams it reads through one operator first"
                .into(),
        );
    };
    let Some(last) = cuts.iter().position(|c| c.tail == from) else {
        return Err("cluster mode writes one stream to its sink: the last operator of a part".into());
    };
    if let Some(c) = cuts
        .iter()
        .enumerate()
        .find(|(k, c)| *k != last && c.part.feeds.is_none())
    {
        let what = match c.1.tail {
            Producer::Source(i) => format!("source `{}`", plan.sources[i].name),
            other => format!("stage `{}`", plan.producer_name(other)),
        };
        return Err(format!(
            "cluster mode cuts a pipeline into parts each feeding one operator or the sink: {what} feeds neither"
        ));
    }
    Ok(cuts.into_iter().map(|c| c.part).collect())
}

/// The part whose output is `from`, which `stage` reads: its only reader.
fn fed_part(
    cuts: &[Cut],
    part_of_stage: &[usize],
    from: Producer,
    stage: &OperatorStage,
) -> Result<usize, String> {
    let k = match from {
        Producer::Source(i) => i,
        Producer::Stage(s) => part_of_stage[s],
        Producer::Output(..) => return Err(not_cut(stage, "reads a branch's output")),
    };
    let cut = &cuts[k];
    if cut.tail != from || cut.part.feeds.is_some() {
        return Err(not_cut(stage, "reads a stream another operator reads too"));
    }
    Ok(k)
}

fn not_cut(stage: &OperatorStage, why: &str) -> String {
    format!(
        "cluster mode cannot cut this pipeline into parts yet: operator `{}` {why}",
        stage.operators[0].name
    )
}

fn check_cuttable(stage: &OperatorStage) -> Result<(), String> {
    for op in &stage.operators {
        if matches!(op.kind, NodeKind::Branch(_)) {
            return Err(format!(
                "cluster mode runs no branch yet: operator `{}` is one",
                op.name
            ));
        }
    }
    if stage.broadcast_input.is_some() {
        return Err(format!(
            "cluster mode keeps no global table yet: operator `{}` joins one; a lookup join with a keyed table (without `global`) runs in cluster mode",
            stage.operators[0].name
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::Manifest;
    use crate::plugin::PluginEngine;

    /// Orders joined with a customers table in cluster mode; `table` and
    /// `join` add to the customers source and the join.
    fn joined(table: &str, join: &str) -> String {
        format!(
            r#"
[pipeline]
name = "shop"

[[sources]]
name = "orders"
type = "kafka"
bootstrap_servers = "127.0.0.1:9"
topics = ["orders"]
group_id = "g"
format = "json"

[[sources]]
name = "customers"
type = "kafka"
bootstrap_servers = "127.0.0.1:9"
topics = ["customers"]
group_id = "g"
{table}

[[operators]]
name = "orders-by-customer"
type = "key_by"
input = "orders"
field = "customer"

[[operators]]
name = "customers-by-id"
type = "key_by"
input = "customers"

[[operators]]
name = "enriched"
type = "lookup_join"
input = "orders-by-customer"
table = "customers-by-id"
{join}

[[sinks]]
name = "out"
type = "kafka"
input = "enriched"
bootstrap_servers = "127.0.0.1:9"
topic = "out"

[cluster]
group = "shop"
"#
        )
    }

    fn cut(text: &str) -> Result<Vec<Part>, String> {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::parse(&dir.path().join("p.toml"), text.to_owned(), |_| None)
            .map_err(|e| e.to_string())?;
        let plan = super::super::build(&m, &PluginEngine::new().unwrap()).map_err(|e| e.to_string())?;
        Ok(plan.cluster.expect("cluster mode").parts)
    }

    #[test]
    fn a_join_is_a_part_fed_by_both_sources_parts() {
        let parts = cut(&joined("", "")).unwrap();
        let reads: Vec<_> = parts.iter().map(|p| (&p.reads, p.feeds, p.inputs)).collect();
        let keyed = PartInput::Repartition {
            by: "enriched".into(),
        };
        assert_eq!(
            reads,
            [
                (&PartInput::Source(0), Some(Feed { part: 2, input: 0 }), 1),
                (&PartInput::Source(1), Some(Feed { part: 2, input: 1 }), 1),
                (&keyed, None, 2),
            ]
        );
        assert_eq!(
            parts[0].stages.len(),
            1,
            "the orders' key is set in their source's part"
        );
        assert!(parts[1].stages.is_empty(), "the table goes as it is");
    }

    #[test]
    fn what_has_no_part_of_its_own_is_refused_by_name() {
        let global = cut(&joined("", "global = true")).unwrap_err();
        assert!(global.contains("operator `enriched` joins one"), "{global}");
        let options = cut(&joined("options = { \"fetch.wait.max.ms\" = \"5\" }", "")).unwrap_err();
        assert!(
            options
                .contains("one consumer reads every source with the first source's `security` and `options`"),
            "{options}"
        );
        let twice = joined("", "").replace("topics = [\"customers\"]", "topics = [\"orders\"]");
        let twice = cut(&twice).unwrap_err();
        assert!(
            twice.contains("topic `orders` is read by another source too"),
            "{twice}"
        );
    }
}
