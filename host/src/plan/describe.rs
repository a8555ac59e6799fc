//! The plan as text, for `mailer describe`.

use super::{Plan, Producer, Routing};
use crate::operators::branch::{DEFAULT_OUTPUT, PredicateNode};
use crate::operators::join::{AsOf, JoinKind, JoinNode, JoinSpec};
use crate::operators::wasm::WasmNode;
use crate::operators::window::WindowNode;
use crate::operators::{NodeKind, OperatorNode};
use std::fmt::Write;

/// Sources, stages (parallelism, routing, what each reads), edges and
/// capacities, sinks, each plugin's world and digest.
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
    let linear = is_linear(plan);
    for source in &plan.sources {
        match linear {
            true => writeln!(s, "source: {}", source.description),
            false => writeln!(s, "source `{}`: {}", source.name, source.description),
        }
        .expect("a String takes any text");
    }
    if !linear {
        let _ = writeln!(s, "every {edge}");
    }
    for stage in &plan.stages {
        if linear {
            let _ = writeln!(s, "  | {edge}");
        }
        let routing = match (stage.routing, stage.parallelism) {
            (Routing::Hash { key_groups }, _) => format!("keyed by hash over {key_groups} key groups"),
            (Routing::RoundRobin, 1) => "one worker".to_owned(),
            (Routing::RoundRobin, _) => "round robin".to_owned(),
        };
        let reads = match linear {
            true => String::new(),
            false => format!(", reads {}", reads(plan, &stage.inputs, &stage.input_numbers)),
        };
        let _ = writeln!(
            s,
            "stage `{}`: parallelism {}, {routing}{reads}",
            stage.name, stage.parallelism
        );
        for op in &stage.operators {
            let _ = writeln!(s, "  - `{}`: {}", op.name, describe_operator(op));
        }
    }
    for sink in &plan.sinks {
        match linear {
            true => writeln!(s, "  | {edge}\nsink: {}", sink.end.description),
            false => writeln!(
                s,
                "sink `{}`: {}, reads {}",
                sink.end.name,
                sink.end.description,
                reads(plan, &sink.inputs, &[])
            ),
        }
        .expect("a String takes any text");
    }
    if let Some(dl) = &plan.dead_letter {
        let _ = writeln!(s, "dead letter: {}", dl.description);
    }
    if let Some(late) = &plan.late_output {
        let _ = writeln!(s, "late output: {}", late.description);
    }
    let _ = writeln!(s, "state: {:?}, {} key groups", plan.state, plan.key_groups);
    if let Some(c) = &plan.checkpoint {
        let _ = match &c.bucket {
            Some(url) => writeln!(
                s,
                "checkpoints: every {:?} to {url} (written first into {}), keeping {}",
                c.interval,
                c.dir.display(),
                c.keep
            ),
            None => writeln!(
                s,
                "checkpoints: every {:?} to {}, keeping {}",
                c.interval,
                c.dir.display(),
                c.keep
            ),
        };
    }
    s
}

/// The graph in Graphviz's DOT language: sources, stages and sinks as
/// nodes, one arrow per edge.
pub fn describe_dot(plan: &Plan) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "digraph {} {{\n  rankdir=LR;", quoted(&plan.name));
    for source in &plan.sources {
        let label = format!("{}\n{}", source.name, source.description);
        let _ = writeln!(
            s,
            "  {} [shape=cds, label={}];",
            quoted(&source.name),
            quoted(&label)
        );
    }
    for stage in &plan.stages {
        let ops: Vec<&str> = stage.operators.iter().map(|o| o.name.as_str()).collect();
        let label = format!("{} ×{}\n{}", stage.name, stage.parallelism, ops.join(" → "));
        let _ = writeln!(
            s,
            "  {} [shape=box, label={}];",
            quoted(&stage.name),
            quoted(&label)
        );
        for &input in &stage.inputs {
            let _ = writeln!(
                s,
                "  {} -> {}{};",
                quoted(plan.producer_name(input)),
                quoted(&stage.name),
                edge_label(plan, input)
            );
        }
    }
    for sink in &plan.sinks {
        let label = format!("{}\n{}", sink.end.name, sink.end.description);
        let _ = writeln!(
            s,
            "  {} [shape=folder, label={}];",
            quoted(&sink.end.name),
            quoted(&label)
        );
        for &input in &sink.inputs {
            let _ = writeln!(
                s,
                "  {} -> {}{};",
                quoted(plan.producer_name(input)),
                quoted(&sink.end.name),
                edge_label(plan, input)
            );
        }
    }
    s.push_str("}\n");
    s
}

/// The label of an edge from a branch's output (its name), else nothing.
fn edge_label(plan: &Plan, from: Producer) -> String {
    match from {
        Producer::Output(..) => format!(" [label={}]", quoted(&plan.stream_name(from))),
        _ => String::new(),
    }
}

/// A DOT string literal.
fn quoted(text: &str) -> String {
    format!(
        "\"{}\"",
        text.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    )
}

/// What a stage or sink reads, as text: one stream, a union, or (with
/// `input_numbers`) each stream as the input it feeds.
fn reads(plan: &Plan, inputs: &[Producer], input_numbers: &[usize]) -> String {
    let names: Vec<String> = inputs
        .iter()
        .map(|&p| format!("`{}`", plan.stream_name(p)))
        .collect();
    if !input_numbers.is_empty() {
        let each: Vec<String> = names
            .iter()
            .zip(input_numbers)
            .map(|(name, n)| format!("{name} as input {n}"))
            .collect();
        return each.join(", ");
    }
    match names.as_slice() {
        [one] => one.clone(),
        many => format!("the union of {}", many.join(", ")),
    }
}

/// Whether the plan is a chain: one source, each stage reading the one
/// before it, one sink reading the last.
fn is_linear(plan: &Plan) -> bool {
    let chained = plan
        .stages
        .iter()
        .enumerate()
        .all(|(i, stage)| stage.inputs == [Producer::in_chain(i)]);
    let last = Producer::in_chain(plan.stages.len());
    chained && plan.sources.len() == 1 && matches!(plan.sinks.as_slice(), [sink] if sink.inputs == [last])
}

/// One operator: what runs it and its limits.
fn describe_operator(op: &OperatorNode) -> String {
    match &op.kind {
        NodeKind::Plugin(WasmNode {
            plugin, limits, mode, ..
        }) => format!(
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
        NodeKind::Branch(b) => {
            let each: Vec<String> = b
                .branches
                .iter()
                .map(|(name, predicate)| format!("`{}.{name}` {}", op.name, describe_predicate(predicate)))
                .collect();
            format!(
                "branch: {}, else `{}.{DEFAULT_OUTPUT}`; on error {}",
                each.join(", "),
                op.name,
                policy_name(op.policy)
            )
        }
        NodeKind::Join(JoinNode {
            spec,
            side_output,
            plugin,
            ..
        }) => {
            let output = match plugin {
                Some((p, _, _)) => format!(
                    "output by plugin `{}` world `{}` sha256 {}, on error {}",
                    p.path().display(),
                    p.world(),
                    p.digest(),
                    policy_name(op.policy)
                ),
                None => "output JSON".to_owned(),
            };
            let what = match spec {
                JoinSpec::Interval(i) => format!(
                    "interval join of input 0 (left) with input 1 (right) from {} to {} ms after it, {}",
                    i.lower,
                    i.upper,
                    match i.kind {
                        JoinKind::Inner => "inner",
                        JoinKind::Left => "left",
                        JoinKind::Right => "right",
                        JoinKind::Full => "full",
                    }
                ),
                JoinSpec::Lookup(l) => format!(
                    "join of input 0 (stream) with the table of input 1 as of {}, {}",
                    match l.as_of {
                        AsOf::Latest => "latest",
                        AsOf::EventTime => "event_time",
                    },
                    if l.keep_unmatched { "left" } else { "inner" }
                ),
                JoinSpec::Global(g) => {
                    return format!(
                        "join of input 0 (stream) with the global table of input 1 (every worker reads all of it, at most {} rows) by {}, as of latest, {}, {output}, on error {}",
                        g.max_rows,
                        g.key_field
                            .as_ref()
                            .map_or("the record's key".to_owned(), |f| format!("field `{f}`")),
                        if g.keep_unmatched { "left" } else { "inner" },
                        policy_name(op.policy)
                    );
                }
            };
            format!("{what}, {output}, late records {}", late_way(*side_output))
        }
        NodeKind::Window(WindowNode {
            spec,
            plugin,
            side_output,
            ..
        }) => {
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
                late_way(*side_output),
            )
        }
    }
}

/// What a branch tests.
fn describe_predicate(p: &PredicateNode) -> String {
    match p {
        PredicateNode::Field(c) => format!("if {c}"),
        PredicateNode::Plugin { plugin, .. } => format!(
            "if plugin `{}` (world `{}`, sha256 {}) keeps it",
            plugin.path().display(),
            plugin.world(),
            plugin.digest()
        ),
        PredicateNode::Native(_) => "if a native predicate holds".to_owned(),
    }
}

fn late_way(side_output: bool) -> &'static str {
    match side_output {
        true => "to the late output",
        false => "dropped",
    }
}

fn policy_name(p: crate::failure::FailurePolicy) -> &'static str {
    match p {
        crate::failure::FailurePolicy::Fail => "fail",
        crate::failure::FailurePolicy::Skip => "skip",
        crate::failure::FailurePolicy::DeadLetter => "dead-letter",
    }
}
