//! Operators into stages, over the manifest's graph.
//!
//! An operator joins the stage of the one stream it reads when it is that
//! stream's only reader and can run on the same workers: any operator after
//! a `key_by` (on its keyed workers), or a stateless one of the stage's
//! parallelism. Otherwise it starts a stage: a keyed one (hash-routed) when
//! it reads a keyed stream, else a round-robin one; a stage reading several
//! streams reads their union. A linear manifest so gets the stages it
//! always had: consecutive stateless operators of one parallelism share a
//! stage, and `key_by` starts a keyed stage that runs every operator after it.

use super::{OperatorStage, Producer, Routing};
use crate::manifest::Stream;
use crate::operators::OperatorNode;

/// An operator's output, as what reads it sees it.
#[derive(Debug, Clone)]
struct Output {
    /// What a stage reading it reads.
    from: Vec<Producer>,
    /// The stage it is the last operator of, when a reader may join it.
    open_stage: Option<usize>,
    /// For a keyed stream: the parallelism of the keyed stage reading it.
    keyed: Option<usize>,
}

/// Places operators, in the manifest's order, into stages.
pub(super) struct Placer {
    stages: Vec<OperatorStage>,
    outputs: Vec<Output>,
    /// How many operators and sinks read each operator's output.
    readers: Vec<usize>,
    key_groups: u32,
}

impl Placer {
    /// A placer for operators read as `operator_inputs` and `sink_inputs` say.
    pub(super) fn new(operator_inputs: &[Vec<Stream>], sink_inputs: &[Vec<Stream>], key_groups: u32) -> Self {
        let mut readers = vec![0; operator_inputs.len()];
        for stream in operator_inputs.iter().chain(sink_inputs).flatten() {
            if let Stream::Operator(i) = stream {
                readers[*i] += 1;
            }
        }
        Self {
            stages: Vec::new(),
            outputs: Vec::with_capacity(operator_inputs.len()),
            readers,
            key_groups,
        }
    }

    /// Places the next operator, reading `inputs`, at `parallelism`.
    pub(super) fn operator(&mut self, inputs: &[Stream], node: OperatorNode, parallelism: usize) {
        let output = self.add(inputs, node, parallelism);
        self.outputs.push(output);
    }

    /// Places the next operator, a branch reading `inputs`: as any operator,
    /// but ending its stage, so each reader of one of its outputs starts a
    /// stage of its own.
    pub(super) fn branch(&mut self, inputs: &[Stream], node: OperatorNode, parallelism: usize) {
        let output = Output {
            open_stage: None,
            ..self.add(inputs, node, parallelism)
        };
        self.outputs.push(output);
    }

    /// Places the next operator, one telling its inputs apart: the stream
    /// `inputs[i]` feeds its input `numbers[i]`. It starts a stage, keyed
    /// when the streams it reads are (a broadcast input aside), else on
    /// `parallelism` round-robin workers; the `broadcast` input reaches
    /// every worker.
    pub(super) fn apart(
        &mut self,
        inputs: &[Stream],
        numbers: &[usize],
        node: OperatorNode,
        (parallelism, broadcast): (usize, Option<usize>),
    ) {
        let keyed = inputs
            .iter()
            .zip(numbers)
            .filter(|(_, n)| Some(**n) != broadcast)
            .find_map(|(s, _)| self.output(*s).keyed);
        let mut from = Vec::new();
        let mut input_numbers = Vec::new();
        for (stream, &number) in inputs.iter().zip(numbers) {
            for p in self.output(*stream).from {
                let known = from
                    .iter()
                    .zip(&input_numbers)
                    .any(|(q, n)| *q == p && *n == number);
                if !known {
                    from.push(p);
                    input_numbers.push(number);
                }
            }
        }
        let output = self.start_stage(from, input_numbers, keyed, parallelism, node);
        self.stages.last_mut().expect("just started").broadcast_input = broadcast;
        self.outputs.push(output);
    }

    /// Places the next operator, a `key_by` reading `inputs`: its `key`
    /// operator (setting each record's key from a field), if any, on the
    /// stream it reads; what reads it runs on `parallelism` keyed workers.
    pub(super) fn key_by(&mut self, inputs: &[Stream], key: Option<OperatorNode>, parallelism: usize) {
        let from = match key {
            Some(node) => self.add(inputs, node, 1).from,
            None => self.union_of(inputs),
        };
        self.outputs.push(Output {
            from,
            open_stage: None,
            keyed: Some(parallelism),
        });
    }

    /// What a sink reading `inputs` reads.
    pub(super) fn sink(&self, inputs: &[Stream]) -> Vec<Producer> {
        self.union_of(inputs)
    }

    /// The stages placed.
    pub(super) fn into_stages(self) -> Vec<OperatorStage> {
        self.stages
    }

    fn output(&self, stream: Stream) -> Output {
        match stream {
            Stream::Source(i) => Output {
                from: vec![Producer::Source(i)],
                open_stage: None,
                keyed: None,
            },
            Stream::Operator(i) => self.outputs[i].clone(),
            Stream::Output(i, n) => {
                let branch = &self.outputs[i];
                Output {
                    from: branch
                        .from
                        .iter()
                        .map(|p| match p {
                            Producer::Stage(k) => Producer::Output(*k, n),
                            _ => unreachable!("a branch ends a stage"),
                        })
                        .collect(),
                    ..branch.clone()
                }
            }
        }
    }

    fn union_of(&self, inputs: &[Stream]) -> Vec<Producer> {
        let mut from = Vec::new();
        for p in inputs.iter().flat_map(|s| self.output(*s).from) {
            if !from.contains(&p) {
                from.push(p);
            }
        }
        from
    }

    fn add(&mut self, inputs: &[Stream], node: OperatorNode, parallelism: usize) -> Output {
        if let [stream] = inputs {
            let input = self.output(*stream);
            let only_reader = matches!(stream, Stream::Operator(i) if self.readers[*i] == 1);
            if let Some(k) = input.open_stage
                && only_reader
                && (input.keyed.is_some() || self.stages[k].parallelism == parallelism)
            {
                self.stages[k].operators.push(node);
                return input;
            }
        }
        let keyed = match inputs {
            [stream] => self.output(*stream).keyed,
            _ => None,
        };
        let from = self.union_of(inputs);
        self.start_stage(from, Vec::new(), keyed, parallelism, node)
    }

    /// A new stage reading `from` (each feeding its input number in
    /// `input_numbers`, when the operator tells them apart), keyed on
    /// `keyed` workers or round-robin on `parallelism`.
    fn start_stage(
        &mut self,
        from: Vec<Producer>,
        input_numbers: Vec<usize>,
        keyed: Option<usize>,
        parallelism: usize,
        node: OperatorNode,
    ) -> Output {
        let k = self.stages.len();
        let (name, routing) = match keyed {
            Some(_) => (
                format!("keyed-{}", k + 1),
                Routing::Hash {
                    key_groups: self.key_groups,
                },
            ),
            None => (format!("stage-{}", k + 1), Routing::RoundRobin),
        };
        self.stages.push(OperatorStage {
            name,
            inputs: from,
            input_numbers,
            parallelism: keyed.unwrap_or(parallelism),
            routing,
            broadcast_input: None,
            operators: vec![node],
        });
        Output {
            from: vec![Producer::Stage(k)],
            open_stage: Some(k),
            keyed,
        }
    }
}
