//! Runs a plan: opens the ends, instantiates every operator, wires the
//! stages with bounded edges, and supervises the run to its end.

use super::side_stage::SideStage;
use super::sink::SinkCheckpoints;
use super::source::{SourceCheckpoints, SourceTime};
use super::spawn::Spawner;
use super::stage::{StageError, StageHandle, spawn_stage};
use super::wiring::Wiring;
use super::{Control, RunHandles, RunStart, Shutdown};
use crate::checkpoint::{
    CheckpointSettings, CheckpointStats, CheckpointStore, CoordinatorSetup, Restore, WorkerCheckpoints,
    run_coordinator,
};
use crate::connectors::{ConnectorError, Endpoint, OpenSink, OpenSource, Sink, Source};
use crate::failure::SideOutput;
use crate::metrics::{OperatorEntry, RunGraph, StageStats};
use crate::operators::NodeKind;
use crate::operators::{Chain, InstanceContext, InstantiateError};
use crate::plan::{OperatorStage, Plan, SinkNode};
use crate::state::BackendKind;
use crate::tap::Taps;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often the source sends the processing time when an operator needs it.
const PROCESSING_TICK: Duration = Duration::from_millis(50);

/// What a finished run did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunReport {
    /// Records the source produced.
    pub source_records: u64,
    /// Records the sink wrote.
    pub sink_records: u64,
    /// Records sent to the dead-letter sink.
    pub dead_lettered: u64,
    /// Records too late for their windows (dropped or sent to the late output).
    pub late_records: u64,
    /// Plugin calls that trapped.
    pub plugin_traps: u64,
    /// Plugin calls stopped at their deadline or when their fuel ran out.
    pub plugin_timeouts: u64,
    /// Checkpoints completed.
    pub checkpoints_completed: u64,
    /// Checkpoints that failed.
    pub checkpoints_failed: u64,
    /// Whether the run was cancelled (drained) rather than run to its end.
    pub cancelled: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A source or sink could not be opened.
    #[error("cannot open {what}: {cause}")]
    Open {
        /// Which end.
        what: String,
        /// Why (in the message, not a chained source, so it shows once).
        cause: ConnectorError,
    },
    /// An operator could not be instantiated.
    #[error("operator `{operator}`: {cause}")]
    Instantiate {
        /// The operator.
        operator: String,
        /// Why (in the message, not a chained source, so it shows once).
        cause: InstantiateError,
    },
    /// A thread could not be started.
    #[error("cannot start a stage thread: {0}")]
    Spawn(#[from] std::io::Error),
    /// A stage failed.
    #[error(transparent)]
    Stage(#[from] StageError),
    /// The checkpoint folder cannot be used.
    #[error(transparent)]
    Checkpoint(#[from] crate::checkpoint::StoreError),
    /// The graceful drain took longer than the shutdown timeout.
    #[error("the drain took longer than the shutdown timeout ({0:?}): blocked stages were aborted")]
    Aborted(Duration),
}

/// Runs `plan` until its sources end, `shutdown` is cancelled, or a stage
/// fails; returns what it did.
pub fn run(plan: Plan, shutdown: &Shutdown) -> Result<RunReport, RunError> {
    run_with(plan, shutdown, &Control::new())
}

/// [`run`], taking the savepoints and plugin swaps `control` asks for.
pub fn run_with(plan: Plan, shutdown: &Shutdown, control: &Control) -> Result<RunReport, RunError> {
    run_from(plan, RunStart::default(), shutdown, control)
}

/// [`run_with`] from `start`: the checkpoint it resumes, as the launch of
/// a run decided it.
pub fn run_from(
    mut plan: Plan,
    start: RunStart,
    shutdown: &Shutdown,
    control: &Control,
) -> Result<RunReport, RunError> {
    let span = tracing::info_span!("run", pipeline = %plan.name);
    let _run = span.enter();
    let started = Instant::now();
    let operators = operator_entries(&plan);
    let loads_table = plan.table_sources();
    let mut handles: Vec<StageHandle> = Vec::new();

    // How each checkpoint ended, for a sink that commits with them (the
    // receiver is dropped when no sink does, and the coordinator's sends
    // then fail at once).
    let (outcomes_tx, outcomes) = flume::bounded(64);
    let RunStart {
        store,
        restore,
        swapped_from,
    } = start;
    let store = match (store, &plan.checkpoint) {
        (None, Some(settings)) => Some(CheckpointStore::open_settings(settings)?),
        (store, _) => store,
    };
    let mut checkpoints = match (&plan.checkpoint, store) {
        (Some(settings), Some(store)) => Some(start_checkpoints(
            &plan,
            (restore.as_ref(), &swapped_from),
            settings,
            store,
            &RunHandles {
                shutdown: shutdown.clone(),
                control: control.clone(),
            },
            Some(outcomes_tx),
            &mut handles,
        )?),
        _ => None,
    };
    let messages = plan.edge_messages();
    let wiring = Wiring::new(&plan, messages, shutdown, &mut handles)?;
    let checkpoint_stats = checkpoints.as_ref().map(|c| c.stats.clone()).unwrap_or_default();
    let opened = open_all(&mut plan, restore.as_ref(), outcomes, &mut checkpoints, shutdown)?;
    let time = SourceTime {
        watermarks: plan.watermark,
        ticks: plan
            .stages
            .iter()
            .flat_map(|s| &s.operators)
            .any(|op| matches!(&op.kind, NodeKind::Window(w) if w.spec.processing_time))
            .then_some(PROCESSING_TICK),
    };
    let graph = RunGraph {
        checkpoints: checkpoints.as_ref().map(|c| c.stats.clone()),
        operators: operators.clone(),
        ..RunGraph::default()
    };
    let mut spawner = Spawner {
        wiring,
        graph,
        handles,
        shutdown,
        messages,
        batch_size: plan.batch_size,
    };
    let source_stats = spawner.sources(
        opened.sources,
        &loads_table,
        time,
        checkpoints,
        control,
        plan.telemetry.clone(),
    )?;
    spawner.stages(&plan.stages, opened.chains)?;
    let sink_stats = spawner.sinks(plan.stages.len(), opened.sinks)?;
    let dead_letter_stats = spawner.side_stages(opened.side_stages)?;
    let Spawner {
        wiring,
        mut graph,
        handles,
        ..
    } = spawner;
    graph.edges = wiring.edges;
    plan.telemetry.started(graph);

    let cancelled = supervise(handles, shutdown, plan.shutdown_timeout)?;
    let counts = Counts {
        sources: &source_stats,
        sinks: &sink_stats,
        dead_letter: &dead_letter_stats,
    };
    Ok(report(&operators, counts, &checkpoint_stats, cancelled, started))
}

/// Everything a run opens before its threads start, so that nothing runs
/// when any of it fails.
struct Opened {
    sinks: Vec<OpenedSink>,
    /// Every worker's chain, by stage.
    chains: Vec<Vec<Chain>>,
    sources: Vec<OpenedSource>,
    side_stages: Vec<(SideStage, Option<SinkCheckpoints>)>,
}

/// Opens the side outputs' sinks, the sinks (resumed where the checkpoint
/// restored says), every operator instance, and the sources (at the
/// checkpoint's positions).
fn open_all(
    plan: &mut Plan,
    restore: Option<&Restore>,
    outcomes: flume::Receiver<(u64, bool)>,
    checkpoints: &mut Option<SourceCheckpoints>,
    shutdown: &Shutdown,
) -> Result<Opened, RunError> {
    let mut dead_letter = side_stage(plan.dead_letter.take(), plan.edge_capacity, restore)?;
    let mut late_output = side_stage(plan.late_output.take(), plan.edge_capacity, restore)?;
    let sinks = open_sinks(
        std::mem::take(&mut plan.sinks),
        &mut dead_letter,
        outcomes,
        checkpoints.as_ref(),
        shutdown,
        restore,
    )?;
    let stage_chains = instantiate_stages(
        &plan.stages,
        &plan.state,
        plan.key_groups,
        restore,
        (&mut dead_letter, &mut late_output),
        checkpoints.as_ref(),
        &plan.telemetry.taps,
    )?;
    let source_dead_letter = dead_letter.as_mut().map(SideStage::channel);
    let sources = open_sources(
        std::mem::take(&mut plan.sources),
        source_dead_letter.clone(),
        restore,
    )?;
    match checkpoints.as_mut() {
        Some(c) => c.side_outputs = source_dead_letter.into_iter().collect(),
        // Held by nobody else, it would keep the side output's stage open.
        None => drop(source_dead_letter),
    }
    let side_stages: Vec<(SideStage, Option<SinkCheckpoints>)> = [dead_letter, late_output]
        .into_iter()
        .flatten()
        .map(|stage| {
            let acks = sink_checkpoints(checkpoints.as_ref(), stage.name, None, Vec::new(), shutdown);
            (stage, acks)
        })
        .collect();

    Ok(Opened {
        sinks,
        chains: stage_chains,
        sources,
        side_stages,
    })
}

/// A sink opened, named, with its part in checkpoints.
type OpenedSink = (String, Box<dyn Sink>, Option<SinkCheckpoints>);

/// Opens every sink, each resumed where the checkpoint `restore` says its
/// output ended; the one that commits with checkpoints (at most one) gets
/// their `outcomes`.
fn open_sinks(
    sinks: Vec<SinkNode>,
    dead_letter: &mut Option<SideStage>,
    outcomes: flume::Receiver<(u64, bool)>,
    checkpoints: Option<&SourceCheckpoints>,
    shutdown: &Shutdown,
    restore: Option<&Restore>,
) -> Result<Vec<OpenedSink>, RunError> {
    let mut outcomes = Some(outcomes);
    let mut opened = Vec::with_capacity(sinks.len());
    for node in sinks {
        let name = node.end.name;
        let channel = dead_letter.as_mut().map(SideStage::channel);
        let mut sink = (node.end.open)(channel.clone()).map_err(|cause| RunError::Open {
            what: end_name("sink", &name),
            cause,
        })?;
        resume(sink.as_mut(), &name, restore)?;
        let commits = match sink.commits_with_checkpoints() {
            false => None,
            true => Some(outcomes.take().ok_or_else(|| RunError::Open {
                what: end_name("sink", &name),
                cause: ConnectorError::Unsupported(
                    "only one sink of a pipeline can commit with the checkpoints".into(),
                ),
            })?),
        };
        let acks = sink_checkpoints(
            checkpoints,
            &name,
            commits,
            channel.into_iter().collect(),
            shutdown,
        );
        opened.push((name, sink, acks));
    }
    Ok(opened)
}

/// A source opened, with its name.
type OpenedSource = (String, Box<dyn Source>);

/// Opens every source, each at the position the checkpoint `restore` holds
/// for it; they may send what they cannot read to `dead_letter`.
fn open_sources(
    sources: Vec<Endpoint<OpenSource>>,
    dead_letter: Option<SideOutput>,
    restore: Option<&Restore>,
) -> Result<Vec<OpenedSource>, RunError> {
    let names: Vec<&str> = sources.iter().map(|s| s.name.as_str()).collect();
    let positions = match restore {
        Some(r) => Some(r.metadata.positions_of(&names).map_err(|reason| RunError::Open {
            what: "the sources at the checkpoint's positions".into(),
            cause: ConnectorError::Unsupported(reason),
        })?),
        None => None,
    };
    let mut opened = Vec::with_capacity(sources.len());
    for (i, end) in sources.into_iter().enumerate() {
        let mut source = (end.open)(dead_letter.clone()).map_err(|cause| RunError::Open {
            what: end_name("source", &end.name),
            cause,
        })?;
        if let (Some(positions), Some(r)) = (&positions, restore) {
            source.seek(&positions[i]).map_err(|cause| RunError::Open {
                what: format!("{} at the checkpoint's position", end_name("source", &end.name)),
                cause,
            })?;
            tracing::info!(checkpoint = r.metadata.id, source = %end.name, position = %positions[i], "resuming from a checkpoint");
        }
        opened.push((end.name, source));
    }
    Ok(opened)
}

/// How a source or sink is named in errors: `the sink` for a linear
/// pipeline's, else by its name.
fn end_name(kind: &str, name: &str) -> String {
    match name == kind {
        true => format!("the {kind}"),
        false => format!("{kind} `{name}`"),
    }
}

/// How sink `name` takes part in checkpoints, when they are on.
fn sink_checkpoints(
    checkpoints: Option<&SourceCheckpoints>,
    name: &str,
    outcomes: Option<flume::Receiver<(u64, bool)>>,
    side_outputs: Vec<SideOutput>,
    shutdown: &Shutdown,
) -> Option<SinkCheckpoints> {
    checkpoints.map(|c| SinkCheckpoints {
        name: name.to_owned(),
        events: c.events.clone(),
        store: c.store.clone(),
        outcomes,
        side_outputs,
        shutdown: shutdown.clone(),
    })
}

/// Every worker's chain of every stage, with its side outputs, its taps
/// and its part in checkpoints. All instances exist before any thread starts, so a
/// plugin that cannot be instantiated stops the run before it begins.
fn instantiate_stages(
    stages: &[OperatorStage],
    state: &BackendKind,
    key_groups: u32,
    restore: Option<&Restore>,
    (dead_letter, late_output): (&mut Option<SideStage>, &mut Option<SideStage>),
    checkpoints: Option<&SourceCheckpoints>,
    taps: &Taps,
) -> Result<Vec<Vec<Chain>>, RunError> {
    let mut stage_chains = Vec::with_capacity(stages.len());
    let mut first_op = 0u16;
    for stage in stages {
        let mut chains = Vec::with_capacity(stage.parallelism);
        for worker in 0..stage.parallelism {
            let worker_dead_letter = dead_letter.as_mut().map(SideStage::channel);
            let worker_late = late_output.as_mut().map(SideStage::channel);
            let ops = stage
                .operators
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    let ctx = InstanceContext {
                        dead_letter: worker_dead_letter.clone(),
                        late_output: worker_late.clone(),
                        state,
                        stage: &stage.name,
                        worker,
                        op_index: first_op + i as u16,
                        key_groups,
                        parallelism: stage.parallelism,
                        restore,
                        open_state: None,
                    };
                    node.instantiate(&ctx).map_err(|cause| RunError::Instantiate {
                        operator: node.name.clone(),
                        cause,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let chain = Chain::new(ops)
                .with_taps(taps)
                .with_side_outputs(worker_dead_letter.into_iter().chain(worker_late).collect());
            chains.push(match checkpoints {
                Some(c) => chain.with_checkpoints(WorkerCheckpoints {
                    dir: c.store.dir().to_owned(),
                    worker,
                    parallelism: stage.parallelism,
                    backend: state.name(),
                    events: c.events.clone(),
                }),
                None => chain,
            });
        }
        first_op += stage.operators.len() as u16;
        stage_chains.push(chains);
    }
    Ok(stage_chains)
}

/// The counters of the ends of a run.
struct Counts<'a> {
    sources: &'a [Arc<StageStats>],
    sinks: &'a [Arc<StageStats>],
    dead_letter: &'a StageStats,
}

/// What the run did, from its counters.
fn report(
    operators: &[OperatorEntry],
    counts: Counts<'_>,
    checkpoints: &CheckpointStats,
    cancelled: bool,
    started: Instant,
) -> RunReport {
    let late_records = operators
        .iter()
        .filter_map(|o| o.late.as_ref())
        .map(|c| c.load(Ordering::Relaxed))
        .sum();
    let sum = |f: fn(&crate::plugin::CallStats) -> u64| operators.iter().map(|o| f(&o.calls)).sum();
    RunReport {
        source_records: out_of(counts.sources),
        sink_records: out_of(counts.sinks),
        dead_lettered: counts.dead_letter.records_out.load(Ordering::Relaxed),
        late_records,
        plugin_traps: sum(|c| c.traps.load(Ordering::Relaxed)),
        plugin_timeouts: sum(|c| {
            c.deadline_hits.load(Ordering::Relaxed) + c.fuel_exhausted.load(Ordering::Relaxed)
        }),
        checkpoints_completed: checkpoints.completed.load(Ordering::Relaxed),
        checkpoints_failed: checkpoints.failed.load(Ordering::Relaxed),
        cancelled,
        elapsed: started.elapsed(),
    }
}

/// The records out of `stages`, summed.
fn out_of(stages: &[Arc<StageStats>]) -> u64 {
    stages.iter().map(|s| s.records_out.load(Ordering::Relaxed)).sum()
}

/// Every operator of the plan with its counters, for the metrics.
fn operator_entries(plan: &Plan) -> Vec<OperatorEntry> {
    plan.stages
        .iter()
        .flat_map(|s| s.operators.iter().map(move |op| (s, op)))
        .map(|(stage, op)| OperatorEntry {
            name: op.name.clone(),
            stage: stage.name.clone(),
            failures: op.failures.clone(),
            calls: op.calls.clone(),
            late: match &op.kind {
                NodeKind::Window(w) => Some(w.late_records.clone()),
                NodeKind::Join(j) => Some(j.late_records.clone()),
                _ => None,
            },
        })
        .collect()
}

/// Starts the checkpoint coordinator; what the source needs to start
/// checkpoints (and the workers to acknowledge them).
fn start_checkpoints(
    plan: &Plan,
    (restore, swapped_from): (Option<&Restore>, &BTreeMap<String, String>),
    settings: &CheckpointSettings,
    store: CheckpointStore,
    control: &RunHandles,
    outcomes: Option<flume::Sender<(u64, bool)>>,
    handles: &mut Vec<StageHandle>,
) -> Result<SourceCheckpoints, RunError> {
    if let (Some(r), Some(_)) = (restore, &plan.committed_checkpoint) {
        // The checkpoint the sink's output is committed up to: a restart
        // before the next commit resumes from it, so it is kept.
        store.set_committed(r.metadata.id);
    }
    let next_id = restore.map_or(0, |r| r.metadata.id).max(store.newest_id()?) + 1;
    let (events, rx) = flume::bounded(1024);
    let stats = plan.telemetry.checkpoint_stats();
    let operators = plan.operator_metas(swapped_from);
    let plugin_files = plan
        .plugin_operators()
        .into_iter()
        .map(|op| (op.plugin.digest().to_owned(), op.plugin.path().to_owned()))
        .collect();
    let setup = CoordinatorSetup {
        store: store.clone(),
        // Every operator worker, every sink, and each side output's sink.
        expected_acks: plan.stages.iter().map(|s| s.parallelism).sum::<usize>()
            + plan.sinks.len()
            + usize::from(plan.dead_letter.is_some())
            + usize::from(plan.late_output.is_some()),
        pipeline: plan.name.clone(),
        manifest_hash: plan.manifest_hash.clone(),
        key_groups: plan.key_groups,
        operators,
        plugin_files,
        tolerable_failures: settings.tolerable_failures,
        interval: settings.interval,
        timeout: settings.timeout,
        stats: stats.clone(),
        control: Arc::new(control.clone()),
        outcomes,
        s3: settings.s3.clone(),
    };
    handles.push(spawn_stage("checkpoints".into(), move || {
        run_coordinator(setup, rx).map_err(StageError::Checkpoint)
    })?);
    Ok(SourceCheckpoints {
        store,
        interval: settings.interval,
        next_id,
        events,
        stats,
        side_outputs: Vec::new(),
    })
}

/// Waits for every stage. The first failure cancels the run (the source
/// stops, the rest drains); past the shutdown timeout after a cancel, blocked
/// stages are aborted. Returns whether the run was cancelled.
fn supervise(
    mut handles: Vec<StageHandle>,
    shutdown: &Shutdown,
    timeout: Duration,
) -> Result<bool, RunError> {
    let mut first_error: Option<RunError> = None;
    let mut cancelled_at: Option<Instant> = None;
    while !handles.is_empty() {
        if shutdown.is_cancelled() && cancelled_at.is_none() {
            cancelled_at = Some(Instant::now());
        }
        if cancelled_at.is_some_and(|t| t.elapsed() > timeout) && !shutdown.is_aborted() {
            tracing::error!(timeout = ?timeout, "shutdown timeout passed: aborting blocked stages");
            shutdown.abort();
            first_error.get_or_insert(RunError::Aborted(timeout));
        }
        if cancelled_at.is_some_and(|t| t.elapsed() > timeout.saturating_mul(2)) {
            // A stage blocked where no abort reaches (a call into a
            // database that does not answer) is left behind: the run ends
            // as a crash would, and the next one resumes from its
            // checkpoint.
            let blocked: Vec<&str> = handles.iter().map(|(name, _)| name.as_str()).collect();
            tracing::error!(stages = %blocked.join(", "), "stages still blocked twice the shutdown timeout after the stop: leaving them");
            break;
        }
        let (done, running): (Vec<StageHandle>, Vec<StageHandle>) =
            handles.into_iter().partition(|(_, h)| h.is_finished());
        handles = running;
        for (name, h) in done {
            let result = h
                .join()
                .unwrap_or_else(|_| Err(StageError::Panicked(name.clone())));
            if let Err(e) = result {
                tracing::error!(stage = %name, error = %e, "stage failed; stopping the pipeline");
                shutdown.cancel();
                first_error.get_or_insert(RunError::Stage(e));
            }
        }
        if !handles.is_empty() {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(cancelled_at.is_some()),
    }
}

/// Lets a sink continue from where the checkpoint `restore` says its
/// output ended (or start fresh without one).
fn resume(sink: &mut dyn Sink, name: &str, restore: Option<&Restore>) -> Result<(), RunError> {
    let position = restore.and_then(|r| r.metadata.sinks.get(name));
    sink.resume(position).map_err(|cause| RunError::Open {
        what: format!("{} at the checkpoint's position", end_name("sink", name)),
        cause,
    })
}

/// The stage of a side output, when the plan has one: its sink opened and
/// resumed where the checkpoint `restore` says its output ended.
fn side_stage(
    end: Option<Endpoint<OpenSink>>,
    capacity: usize,
    restore: Option<&Restore>,
) -> Result<Option<SideStage>, RunError> {
    let Some(end) = end else {
        return Ok(None);
    };
    let (name, what) = match end.name.as_str() {
        "dead-letter" => ("dead-letter", "the dead-letter sink"),
        _ => ("late-output", "the late-record sink"),
    };
    let sink = (end.open)(None).map_err(|cause| RunError::Open {
        what: what.into(),
        cause,
    })?;
    let mut stage = SideStage::new(name, sink, capacity);
    resume(stage.sink_mut(), name, restore)?;
    Ok(Some(stage))
}
