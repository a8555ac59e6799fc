//! A pipeline's plan cut to start at one operator: its stage keeps the
//! operator and those after it, reading the replay's one source; the
//! stages downstream of it and the sinks they feed stay; the rest goes.

use super::ReplayError;
use crate::connectors::{Endpoint, OpenSource};
use crate::plan::{Plan, Producer};

/// Cuts `plan` to start at `operator`, which reads `source`; the operators
/// that keep keyed state from there on, if any, are refused (`stateful`
/// names them), as a separate run would start their state empty.
pub fn start_at(
    plan: &mut Plan,
    operator: &str,
    stateful: &dyn Fn(&str) -> bool,
    source: Endpoint<OpenSource>,
) -> Result<(), ReplayError> {
    let refused = |why: String| ReplayError::Refused {
        operator: operator.to_owned(),
        why,
    };
    let (first, at) = plan
        .stages
        .iter()
        .enumerate()
        .find_map(|(s, stage)| Some((s, stage.operators.iter().position(|op| op.name == operator)?)))
        .ok_or_else(|| {
            let names: Vec<String> = plan
                .stages
                .iter()
                .flat_map(|s| &s.operators)
                .map(|op| format!("`{}`", op.name))
                .collect();
            refused(format!(
                "the pipeline has no such operator (it has {})",
                names.join(", ")
            ))
        })?;
    if at == 0 && !plan.stages[first].input_numbers.is_empty() {
        return Err(refused(
            "it reads two inputs (a join or a co-process): its dead letters are not records of one input"
                .into(),
        ));
    }
    // The stages the operator's output reaches, in order.
    let mut kept = vec![false; plan.stages.len()];
    kept[first] = true;
    for s in first + 1..plan.stages.len() {
        kept[s] = plan.stages[s].inputs.iter().any(|p| from_kept(*p, &kept));
    }
    for (s, stage) in plan.stages.iter().enumerate().filter(|(s, _)| kept[*s]) {
        let from = if s == first { at } else { 0 };
        if let Some(op) = stage.operators[from..].iter().find(|op| stateful(&op.name)) {
            return Err(refused(format!(
                "operator `{}` on its way to the sinks keeps keyed state, which a replay (a run of its own) would start empty: replay the dead letters of operators whose way to the sinks keeps no state",
                op.name
            )));
        }
        if s != first
            && let Some(other) = stage.inputs.iter().find(|p| !from_kept(**p, &kept))
        {
            return Err(refused(format!(
                "operator `{}` on its way to the sinks also reads `{}`, which a replay does not run",
                stage.operators[0].name,
                plan.stream_name(*other)
            )));
        }
    }
    let renumbered: Vec<Option<usize>> = kept
        .iter()
        .scan(0, |next, &keep| {
            Some(keep.then(|| {
                *next += 1;
                *next - 1
            }))
        })
        .collect();
    let renumber = |p: Producer| match p {
        Producer::Stage(s) => renumbered[s].map(Producer::Stage),
        Producer::Output(s, n) => renumbered[s].map(|s| Producer::Output(s, n)),
        Producer::Source(_) => None,
    };
    let mut stages = Vec::new();
    for (s, mut stage) in std::mem::take(&mut plan.stages).into_iter().enumerate() {
        if !kept[s] {
            continue;
        }
        if s == first {
            stage.operators.drain(..at);
            stage.inputs = vec![Producer::Source(0)];
            stage.input_numbers.clear();
            stage.broadcast_input = None;
        } else {
            stage.inputs = stage.inputs.into_iter().filter_map(renumber).collect();
        }
        stages.push(stage);
    }
    plan.stages = stages;
    for sink in &mut plan.sinks {
        sink.inputs = sink.inputs.iter().filter_map(|p| renumber(*p)).collect();
    }
    plan.sinks.retain(|sink| !sink.inputs.is_empty());
    plan.sources = vec![source];
    Ok(())
}

/// Whether `p` is the output of a kept stage.
fn from_kept(p: Producer, kept: &[bool]) -> bool {
    matches!(p, Producer::Stage(s) | Producer::Output(s, _) if kept[s])
}
