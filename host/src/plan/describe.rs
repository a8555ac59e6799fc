//! The plan as text, for `mailer describe`.

use super::{NodeKind, OperatorNode, Plan, Routing};
use std::fmt::Write;

/// Stages, parallelism, edges and capacities, each plugin's world and digest.
pub fn describe(plan: &Plan) -> String {
    let mut s = String::new();
    let edge = format!(
        "edge: capacity {} records ({} batches of up to {})",
        plan.edge_capacity,
        plan.edge_messages(),
        plan.batch_size
    );
    let _ = writeln!(
        s,
        "pipeline `{}` (manifest sha256 {})",
        plan.name, plan.manifest_hash
    );
    let _ = writeln!(s, "source: {}", plan.source.description);
    for stage in &plan.stages {
        let _ = writeln!(s, "  | {edge}");
        let routing = match (stage.routing, stage.parallelism) {
            (Routing::Hash { key_groups }, _) => format!("keyed by hash over {key_groups} key groups"),
            (Routing::RoundRobin, 1) => "one worker".to_owned(),
            (Routing::RoundRobin, _) => "round robin".to_owned(),
        };
        let _ = writeln!(
            s,
            "stage `{}`: parallelism {}, {routing}",
            stage.name, stage.parallelism
        );
        for op in &stage.operators {
            let _ = writeln!(s, "  - `{}`: {}", op.name, describe_operator(op));
        }
    }
    let _ = writeln!(s, "  | {edge}");
    let _ = writeln!(s, "sink: {}", plan.sink.description);
    if let Some(dl) = &plan.dead_letter {
        let _ = writeln!(s, "dead letter: {}", dl.description);
    }
    if let Some(late) = &plan.late_output {
        let _ = writeln!(s, "late output: {}", late.description);
    }
    let _ = writeln!(s, "state: {:?}, {} key groups", plan.state, plan.key_groups);
    s
}

/// One operator: what runs it and its limits.
fn describe_operator(op: &OperatorNode) -> String {
    match &op.kind {
        NodeKind::Plugin {
            plugin, limits, mode, ..
        } => format!(
            "plugin `{}` world `{}` sha256 {} ({} bytes), calls per {}, timeout {:?}, memory {} MiB, on error {}",
            plugin.path().display(),
            plugin.world(),
            plugin.digest(),
            plugin.size(),
            match mode {
                crate::plugin::CallMode::Batch => "batch",
                crate::plugin::CallMode::Record => "record",
            },
            limits.timeout,
            limits.memory_bytes >> 20,
            policy_name(op.policy),
        ),
        NodeKind::Native(_) => "native".to_owned(),
        NodeKind::Window {
            spec,
            plugin,
            side_output,
            ..
        } => {
            let result = match plugin {
                Some((p, _)) => format!(
                    "plugin `{}` world `{}` sha256 {}",
                    p.path().display(),
                    p.world(),
                    p.digest()
                ),
                None => {
                    let names: Vec<&str> = spec.aggregates.iter().map(|a| a.name()).collect();
                    format!("aggregates {}", names.join(", "))
                }
            };
            format!(
                "window {:?}, allowed lateness {} ms, {result}, late records {}",
                spec.assigner,
                spec.allowed_lateness,
                if *side_output {
                    "to the late output"
                } else {
                    "dropped"
                },
            )
        }
    }
}

fn policy_name(p: crate::operator::FailurePolicy) -> &'static str {
    match p {
        crate::operator::FailurePolicy::Fail => "fail",
        crate::operator::FailurePolicy::Skip => "skip",
        crate::operator::FailurePolicy::DeadLetter => "dead-letter",
    }
}
