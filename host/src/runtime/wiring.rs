//! The edges of a pipeline's graph: one bounded edge from each producer (a
//! source or a stage) to each stage or sink reading it, and a union merge in
//! front of a reader of several streams.
//!
//! A producer read by several sends every message to each of its readers
//! ([`Outlet`]): fan-out is as bounded as any edge. A union aligns markers
//! over its inputs and lets a finished input stop holding them back
//! ([`Ends::Separately`], contract C1). In front of an operator of two
//! inputs the merge also tags each input's records with its number.

use super::align::{Ends, merge_aligned};
use super::stage::{StageHandle, spawn_stage};
use super::{EdgeReceiver, EdgeSender, Outlet, Shutdown, edge};
use crate::metrics::{EdgeEntry, StageStats};
use crate::plan::{Plan, Producer};

/// Every edge of a plan, made before any thread starts.
pub(super) struct Wiring {
    /// What each source reads into, then what each stage writes into (and,
    /// after a branch, which of its outputs each reader reads).
    outlets: Vec<Vec<(EdgeSender, Option<usize>)>>,
    sources: usize,
    /// The input of each stage, then of each sink.
    inputs: Vec<Option<EdgeReceiver>>,
    /// The edges between stages, for the metrics.
    pub edges: Vec<EdgeEntry>,
}

impl Wiring {
    /// The edges of `plan`, each holding `messages`; the union merges are
    /// started into `handles`.
    pub(super) fn new(
        plan: &Plan,
        messages: usize,
        shutdown: &Shutdown,
        handles: &mut Vec<StageHandle>,
    ) -> std::io::Result<Self> {
        let mut wiring = Self {
            outlets: (0..plan.sources.len() + plan.stages.len())
                .map(|_| Vec::new())
                .collect(),
            sources: plan.sources.len(),
            inputs: Vec::new(),
            edges: Vec::new(),
        };
        let readers = plan
            .stages
            .iter()
            .map(|s| (s.name.as_str(), s.inputs.as_slice(), s.input_numbers.clone()))
            .chain(
                plan.sinks
                    .iter()
                    .map(|s| (s.end.name.as_str(), s.inputs.as_slice(), Vec::new())),
            );
        for (name, inputs, tags) in readers {
            let mut from: Vec<EdgeReceiver> = inputs
                .iter()
                .map(|&p| wiring.connect(plan.producer_name(p), p, name, messages, shutdown))
                .collect();
            let input = match from.len() {
                1 if tags.is_empty() => from.pop().expect("one"),
                _ => {
                    let (tx, rx) = edge(format!("{name} union -> {name}"), messages, shutdown);
                    let (stats, shutdown) = (StageStats::new(format!("{name} union")), shutdown.clone());
                    handles.push(spawn_stage(format!("{name} union"), move || {
                        merge_aligned(from, &tags, tx.into(), Ends::Separately, &shutdown, &stats);
                        Ok(())
                    })?);
                    rx
                }
            };
            wiring.inputs.push(Some(input));
        }
        Ok(wiring)
    }

    fn connect(
        &mut self,
        from: &str,
        producer: Producer,
        to: &str,
        messages: usize,
        shutdown: &Shutdown,
    ) -> EdgeReceiver {
        let (tx, rx) = edge(format!("{from} -> {to}"), messages, shutdown);
        self.edges.push(EdgeEntry {
            from: from.to_owned(),
            to: to.to_owned(),
            stats: tx.stats().clone(),
        });
        let (slot, output) = self.slot(producer);
        self.outlets[slot].push((tx, output));
        rx
    }

    /// The outlet `producer` writes into, and the output of it read.
    fn slot(&self, producer: Producer) -> (usize, Option<usize>) {
        match producer {
            Producer::Source(i) => (i, None),
            Producer::Stage(i) => (self.sources + i, None),
            Producer::Output(i, n) => (self.sources + i, Some(n)),
        }
    }

    /// Where `producer` writes: to every reader of its stream (after a
    /// branch, each reader its output's records).
    pub(super) fn outlet(&mut self, producer: Producer) -> Outlet {
        let (slot, _) = self.slot(producer);
        let readers = std::mem::take(&mut self.outlets[slot]);
        match readers.iter().any(|(_, output)| output.is_some()) {
            true => Outlet::split(readers),
            false => Outlet::new(readers.into_iter().map(|(reader, _)| reader).collect()),
        }
    }

    /// What stage `i` reads.
    pub(super) fn stage_input(&mut self, i: usize) -> EdgeReceiver {
        self.inputs[i].take().expect("each stage's input is taken once")
    }

    /// What sink `i` reads.
    pub(super) fn sink_input(&mut self, stages: usize, i: usize) -> EdgeReceiver {
        self.inputs[stages + i]
            .take()
            .expect("each sink's input is taken once")
    }
}
