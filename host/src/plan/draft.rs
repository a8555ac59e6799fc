//! A pipeline's graph before planning: its sources, its steps (operators
//! and `key_by`s, each naming the streams it reads) and its sinks. Manifests
//! and the Rust builder both make one; [`Draft::place`] turns it into stages
//! the same way for both.

use super::place::Placer;
use super::{OperatorStage, SinkNode};
use crate::connectors::{Endpoint, OpenSink, OpenSource};
use crate::manifest::Stream;
use crate::operators::Step;

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
