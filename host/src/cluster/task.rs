//! A task's operators: the chains of one part's stages, run one after
//! another as direct calls (a task is one partition's work on one thread),
//! and a keyed task's state, each keyed operator's backend recording its
//! changes for the operator's changelog topic.

use super::kept::{KeptMark, KeptStates};
use super::topics::{TopicError, TopicRole, topic_name};
use super::watermarks::UpstreamWatermarks;
use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::metrics::TaskStats;
use crate::operators::{Chain, InstanceContext, InstantiateError, Produced, StateOpener};
use crate::plan::{Part, Plan};
use crate::record::Record;
use crate::state::{MemoryBackend, SharedChangelog, StateBackend, StateError, StateQuery};
use crate::swap::SwapPoint;
use std::cell::RefCell;
use std::sync::Arc;

/// Why a task cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// An operator could not be instantiated.
    #[error("operator `{operator}`: {cause}")]
    Instantiate {
        /// The operator.
        operator: String,
        /// Why.
        cause: InstantiateError,
    },
    /// A changelog topic cannot be named.
    #[error(transparent)]
    Topic(#[from] TopicError),
}

/// The chains of a part's stages, in order.
pub struct PartChains(Vec<Chain>);

impl PartChains {
    /// `part`'s operators as task `task` of `tasks` runs them; keyed state
    /// opened by `open_state` (the plan's backend when `None`).
    pub fn instantiate(
        plan: &Plan,
        part: &Part,
        (task, tasks): (usize, usize),
        open_state: Option<&StateOpener<'_>>,
    ) -> Result<Self, TaskError> {
        let mut chains = Vec::new();
        for &s in &part.stages {
            let stage = &plan.stages[s];
            // Operators are numbered across the plan's stages, in order.
            let first_op: u16 = plan.stages[..s].iter().map(|s| s.operators.len() as u16).sum();
            let mut ops = Vec::with_capacity(stage.operators.len());
            for (op_index, node) in (first_op..).zip(&stage.operators) {
                let ctx = InstanceContext {
                    dead_letter: None,
                    late_output: None,
                    state: &plan.state,
                    stage: &stage.name,
                    worker: task,
                    op_index,
                    key_groups: plan.key_groups,
                    parallelism: tasks,
                    restore: None,
                    open_state,
                };
                ops.push(node.instantiate(&ctx).map_err(|cause| TaskError::Instantiate {
                    operator: node.name.clone(),
                    cause,
                })?);
            }
            chains.push(Chain::new(ops));
        }
        Ok(Self(chains))
    }

    /// Runs `batch` through every chain; what the last one produced.
    pub fn on_records(&mut self, batch: Batch) -> Result<Vec<Batch>, OperatorError> {
        self.on_input(0, batch)
    }

    /// Runs `batch`, of input `input` of the first operator (a join's 0 or
    /// 1), through every chain; what the last one produced.
    pub fn on_input(&mut self, input: usize, batch: Batch) -> Result<Vec<Batch>, OperatorError> {
        let mut chains = self.0.iter_mut();
        let mut carried = match chains.next() {
            Some(first) => vec![stream(first.on_input(input, batch)?)],
            None => vec![batch],
        };
        for chain in chains {
            carried = carried
                .into_iter()
                .map(|b| chain.on_records(b).map(stream))
                .collect::<Result<_, _>>()?;
        }
        Ok(nonempty(carried))
    }

    /// The operator of `swap` runs its plugin from now on, its state kept;
    /// how many instances switched.
    pub fn on_swap(&mut self, swap: &SwapPoint) -> Result<usize, OperatorError> {
        let mut swapped = 0;
        for chain in &mut self.0 {
            swapped += chain.on_swap(swap)?;
        }
        Ok(swapped)
    }

    /// Answers `query` from the state of the operators it names.
    pub fn on_query(&mut self, query: &StateQuery) {
        for chain in &mut self.0 {
            chain.on_query(query);
        }
    }

    /// Event time reached `watermark`: each chain fires what it holds back.
    pub fn on_watermark(&mut self, watermark: i64) -> Result<Vec<Batch>, OperatorError> {
        self.on_time(|chain| chain.on_watermark(watermark))
    }

    /// Processing time reached `now` (ms): each chain fires its timers due.
    pub fn on_processing_time(&mut self, now: i64) -> Result<Vec<Batch>, OperatorError> {
        self.on_time(|chain| chain.on_processing_time(now))
    }

    /// Time moved: each chain, in order, takes what the chains before it
    /// fired, then fires itself (as time follows the records on an edge).
    fn on_time(
        &mut self,
        fire: impl Fn(&mut Chain) -> Result<Produced, OperatorError>,
    ) -> Result<Vec<Batch>, OperatorError> {
        let mut carried = Vec::new();
        for chain in &mut self.0 {
            let mut next = carried
                .into_iter()
                .map(|b| chain.on_records(b).map(stream))
                .collect::<Result<Vec<_>, _>>()?;
            next.push(stream(fire(chain)?));
            carried = next;
        }
        Ok(nonempty(carried))
    }
}

fn nonempty(batches: Vec<Batch>) -> Vec<Batch> {
    batches.into_iter().filter(|b| !b.is_empty()).collect()
}

/// The one stream a chain of cluster mode produces (a branch, which would
/// split it, is refused by the planner).
fn stream(produced: Produced) -> Batch {
    match produced {
        Produced::Stream(batch) => batch,
        Produced::Outputs(_) => unreachable!("cluster mode plans no branch"),
    }
}

/// A keyed operator's state and the changelog its changes go to.
pub struct Changelog {
    /// The changelog topic.
    pub topic: String,
    /// The state's name in the process's state folder.
    pub state_name: String,
    /// The backend, recording changes.
    pub state: SharedChangelog,
    /// Where the state it opened with stands in the changelog, when it
    /// opened with a kept state (else it is empty: the changelog's start).
    pub kept: Option<KeptMark>,
}

/// One keyed task: a repartition partition's records through its part's
/// operators, with the state of the key groups the partition stands for.
pub struct KeyedTask {
    /// Its operators.
    pub chains: PartChains,
    /// Its keyed operators' state, one changelog each.
    pub changelogs: Vec<Changelog>,
    /// Its event time: the minimum over the tasks feeding it.
    pub watermarks: UpstreamWatermarks,
    /// The watermark its changelog holds.
    pub logged_watermark: Option<i64>,
    /// The watermark last marked to the next part.
    pub marked_watermark: Option<i64>,
    /// Records read and not yet run (a poll's worth).
    pub pending: Pending,
    /// Its counts, in the metrics (the engine registers them).
    pub stats: Arc<TaskStats>,
}

/// The records a keyed task read and has not run yet, in the order read,
/// as runs of one input each (a join's two inputs share its partition).
#[derive(Default)]
pub struct Pending(Vec<(usize, Vec<Record>)>);

impl Pending {
    /// Adds `rec`, of input `input`.
    pub fn push(&mut self, input: usize, rec: Record) {
        match self.0.last_mut() {
            Some((last, run)) if *last == input => run.push(rec),
            _ => self.0.push((input, vec![rec])),
        }
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The runs waiting, in order, leaving none.
    pub fn take(&mut self) -> Vec<(usize, Vec<Record>)> {
        std::mem::take(&mut self.0)
    }
}

/// Where a keyed operator's state may start instead of empty, given its
/// changelog topic and state name: a state this process kept, and where it
/// stands in the changelog.
pub type WarmSource<'a> = dyn FnMut(&str, &str) -> Option<(Box<dyn StateBackend>, KeptMark)> + 'a;

impl KeyedTask {
    /// Task `partition` of `partitions` of `part`, its keyed operators on
    /// backends recording changes: the states `warm` gives, else fresh
    /// ones of the plan's kind; `upstream` tasks feed it.
    pub fn new(
        plan: &Plan,
        part: &Part,
        (partition, partitions): (usize, usize),
        upstream: usize,
        warm: &mut WarmSource<'_>,
    ) -> Result<Self, TaskError> {
        let opened: RefCell<Vec<Changelog>> = RefCell::new(Vec::new());
        let warm = RefCell::new(warm);
        let stage = &plan.stages[part.stages[0]].name;
        let open = |operator: &str| -> Result<Box<dyn StateBackend>, StateError> {
            let state_name = format!("{stage}-{operator}");
            let topic = topic_name(&plan.name, operator, TopicRole::Changelog)
                .map_err(|e| StateError::Restore(e.to_string()))?;
            let (backend, kept) = match (warm.borrow_mut())(&topic, &state_name) {
                Some((backend, mark)) => (backend, Some(mark)),
                None => (plan.state.open(&state_name, partition)?, None),
            };
            let state = SharedChangelog::new(backend);
            opened.borrow_mut().push(Changelog {
                topic,
                state_name,
                state: state.clone(),
                kept,
            });
            Ok(Box::new(state))
        };
        let chains = PartChains::instantiate(
            plan,
            part,
            (partition, partitions),
            Some(&open as &StateOpener<'_>),
        )?;
        Ok(Self {
            chains,
            changelogs: opened.into_inner(),
            watermarks: UpstreamWatermarks::new(upstream),
            logged_watermark: None,
            marked_watermark: None,
            pending: Pending::default(),
            stats: Arc::default(),
        })
    }

    /// Ends the task: each keyed operator's changelog topic and its state
    /// (changes not taken are dropped: the task was committed before).
    pub fn into_states(self) -> Vec<(String, Box<dyn StateBackend>)> {
        // The operators hold the other handles of each state.
        drop(self.chains);
        self.changelogs
            .into_iter()
            .filter_map(|log| Some((log.topic, log.state.into_backend()?)))
            .collect()
    }
}

/// The changelog topics of `part`'s keyed operators, found by making its
/// operators once with their state in memory.
pub fn changelog_topics(plan: &Plan, part: &Part, partitions: usize) -> Result<Vec<String>, TaskError> {
    let operators = RefCell::new(Vec::new());
    let open = |operator: &str| -> Result<Box<dyn StateBackend>, StateError> {
        operators.borrow_mut().push(operator.to_owned());
        Ok(Box::new(MemoryBackend::default()))
    };
    PartChains::instantiate(plan, part, (0, partitions), Some(&open as &StateOpener<'_>))?;
    let topics = operators
        .into_inner()
        .iter()
        .map(|operator| topic_name(&plan.name, operator, TopicRole::Changelog))
        .collect::<Result<_, TopicError>>()?;
    Ok(topics)
}

/// A copy of the state `kept` for task `task` of `name`, and where it
/// stands; none when nothing was kept or the copy cannot be opened (the
/// task then restores from its changelog's start).
pub fn open_kept(
    plan: &Plan,
    kept: Option<&KeptStates>,
    name: &str,
    task: usize,
) -> Option<(Box<dyn StateBackend>, KeptMark)> {
    let kept = kept?;
    let (snapshot, mark) = kept.take(name, task as i32)?;
    let opened = plan.state.restore(name, task, &[snapshot], &|_| true);
    kept.discard(name, task as i32);
    match opened {
        Ok(backend) => Some((backend, mark)),
        Err(e) => {
            tracing::warn!(state = name, task, error = %e, "a kept state cannot be opened; the task restores from its changelog's start");
            None
        }
    }
}
