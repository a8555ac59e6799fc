//! A pipeline's graph before planning: its sources, its steps (operators
//! and `key_by`s, each naming the streams it reads) and its sinks. Manifests
//! and the Rust builder both make one; [`Draft::place`] turns it into stages
//! the same way for both.

use super::place::Placer;
use super::{OperatorNode, OperatorStage, SinkNode};
use crate::connectors::{Endpoint, OpenSink, OpenSource};
use crate::manifest::Stream;

/// One step of the graph.
pub enum Step {
    /// An operator, at `parallelism` (ignored after a `key_by`: it runs on
    /// the keyed workers).
    Operator {
        /// What runs.
        node: OperatorNode,
        /// Its workers, when it is stateless and starts a stage.
        parallelism: usize,
    },
    /// An operator telling its inputs apart (a join), on the keyed workers
    /// of the keyed streams it reads (else on `parallelism` workers): the
    /// step's `i`-th stream feeds its input number `input_numbers[i]`.
    Apart {
        /// What runs.
        node: OperatorNode,
        /// The input number of each stream read.
        input_numbers: Vec<usize>,
        /// Its workers, when no stream it reads is keyed.
        parallelism: usize,
        /// The input number whose records every worker gets (a global
        /// table's), if any; it does not decide where the operator runs.
        broadcast: Option<usize>,
    },
    /// A branch, at `parallelism` (ignored after a `key_by`), ending its
    /// stage: what reads one of its outputs reads [`Stream::Output`].
    Branch {
        /// What runs.
        node: OperatorNode,
        /// Its workers, when it starts a stage.
        parallelism: usize,
    },
    /// Repartitions by key: what reads it runs on `parallelism` workers,
    /// each owning a range of key groups.
    KeyBy {
        /// The operator setting each record's key first, if the records do
        /// not carry it already.
        key: Option<OperatorNode>,
        /// The keyed workers.
        parallelism: usize,
    },
}

/// A pipeline's graph before planning.
#[derive(Default)]
pub struct Draft {
    /// The sources, in order (a [`Stream::Source`] indexes them).
    pub sources: Vec<Endpoint<OpenSource>>,
    /// The steps, each with the streams it reads (earlier steps only: a
    /// [`Stream::Operator`] indexes them).
    pub steps: Vec<(Vec<Stream>, Step)>,
    /// The sinks, each with the streams it reads.
    pub sinks: Vec<(Endpoint<OpenSink>, Vec<Stream>)>,
}

/// A draft placed into stages.
pub struct Placed {
    /// The sources.
    pub sources: Vec<Endpoint<OpenSource>>,
    /// The stages.
    pub stages: Vec<OperatorStage>,
    /// The sinks, each with what it reads.
    pub sinks: Vec<SinkNode>,
}

impl Draft {
    /// Places the steps into stages over `key_groups` key groups.
    pub fn place(self, key_groups: u32) -> Placed {
        let operator_inputs: Vec<Vec<Stream>> = self.steps.iter().map(|(i, _)| i.clone()).collect();
        let sink_inputs: Vec<Vec<Stream>> = self.sinks.iter().map(|(_, i)| i.clone()).collect();
        let mut placer = Placer::new(&operator_inputs, &sink_inputs, key_groups);
        for (inputs, step) in self.steps {
            match step {
                Step::Operator { node, parallelism } => placer.operator(&inputs, node, parallelism),
                Step::Apart {
                    node,
                    input_numbers,
                    parallelism,
                    broadcast,
                } => placer.apart(&inputs, &input_numbers, node, (parallelism, broadcast)),
                Step::Branch { node, parallelism } => placer.branch(&inputs, node, parallelism),
                Step::KeyBy { key, parallelism } => placer.key_by(&inputs, key, parallelism),
            }
        }
        let sinks = self
            .sinks
            .into_iter()
            .map(|(end, inputs)| SinkNode {
                end,
                inputs: placer.sink(&inputs),
            })
            .collect();
        Placed {
            sources: self.sources,
            stages: placer.into_stages(),
            sinks,
        }
    }
}
