//! Where an operator goes in the graph: chained after what it reads, apart
//! (a join's two inputs), ending its stage (a branch), or repartitioning by
//! key. Each operator kind builds its step; the planner places the steps.

use super::OperatorNode;

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
