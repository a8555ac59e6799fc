//! Runs a plan: opens the ends, instantiates every operator, wires the
//! stages with bounded edges, and supervises the run to its end.

use super::parallel::spawn_parallel;
use super::stages::{
    SinkCheckpoints, SourceCheckpoints, SourceReport, SourceTime, StageError, StageHandle, StageStats,
    run_chain, run_sink, run_source, spawn_stage,
};
use super::{Shutdown, edge};
use crate::batch::Batch;
use crate::checkpoint::{
    CheckpointSettings, CheckpointStore, CoordinatorSetup, OperatorMeta, WorkerCheckpoints, run_coordinator,
};
use crate::connectors::{ConnectorError, Sink};
use crate::metrics::{EdgeEntry, OperatorEntry, RunGraph, StageEntry};
use crate::operator::Chain;
use crate::plan::Plan;
use crate::plan::{Endpoint, InstanceContext, InstantiateError, NodeKind, OpenSink};
use crate::record::Record;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// How often the source sends the processing time when an operator needs it.
const PROCESSING_TICK: Duration = Duration::from_millis(50);

/// What a finished run did.
#[derive(Debug, Clone, PartialEq, Eq)]
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
        what: &'static str,
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

/// Runs `plan` until its source ends, `shutdown` is cancelled, or a stage
/// fails; returns what it did.
pub fn run(plan: Plan, shutdown: &Shutdown) -> Result<RunReport, RunError> {
    let span = tracing::info_span!("run", pipeline = %plan.name);
    let _run = span.enter();
    let started = Instant::now();
    let messages = plan.edge_messages();
    let operators = operator_entries(&plan);
    let mut handles: Vec<StageHandle> = Vec::new();

    // How each checkpoint ended, for a sink that commits with them (the
    // receiver is dropped for any other sink, and the coordinator's sends
    // then fail at once).
    let (outcomes_tx, outcomes) = flume::bounded(64);
    let checkpoints = match &plan.checkpoint {
        Some(settings) => Some(start_checkpoints(
            &plan,
            settings,
            shutdown,
            Some(outcomes_tx),
            &mut handles,
        )?),
        None => None,
    };
    let (dead_letter_tx, dead_letter) =
        side_output(plan.dead_letter, "the dead-letter sink", plan.edge_capacity)?;
    let (late_tx, late_output) = side_output(plan.late_output, "the late-record sink", plan.edge_capacity)?;
    let sink = (plan.sink.open)(dead_letter_tx.clone()).map_err(|cause| RunError::Open {
        what: "the sink",
        cause,
    })?;
    let outcomes = sink.commits_with_checkpoints().then_some(outcomes);
    let checkpoint_stats = checkpoints.as_ref().map(|c| c.stats.clone()).unwrap_or_default();

    // Every instance exists before any thread starts, so a plugin that
    // cannot be instantiated stops the run before it begins.
    let mut stage_chains = Vec::with_capacity(plan.stages.len());
    let mut first_op = 0u16;
    for stage in &plan.stages {
        let mut chains = Vec::with_capacity(stage.parallelism);
        for worker in 0..stage.parallelism {
            let ops = stage
                .operators
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    let ctx = InstanceContext {
                        dead_letter: dead_letter_tx.clone(),
                        late_output: late_tx.clone(),
                        state: &plan.state,
                        stage: &stage.name,
                        worker,
                        op_index: first_op + i as u16,
                        key_groups: plan.key_groups,
                        parallelism: stage.parallelism,
                        restore: plan.restore.as_ref(),
                    };
                    node.instantiate(&ctx).map_err(|cause| RunError::Instantiate {
                        operator: node.name.clone(),
                        cause,
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let chain = Chain::new(ops);
            chains.push(match &checkpoints {
                Some(c) => chain.with_checkpoints(WorkerCheckpoints {
                    dir: c.store.dir().to_owned(),
                    worker,
                    parallelism: stage.parallelism,
                    backend: plan.state.name(),
                    events: c.events.clone(),
                }),
                None => chain,
            });
        }
        first_op += stage.operators.len() as u16;
        stage_chains.push(chains);
    }
    let mut source = (plan.source.open)(dead_letter_tx.clone()).map_err(|cause| RunError::Open {
        what: "the source",
        cause,
    })?;
    if let Some(r) = &plan.restore {
        source.seek(&r.metadata.source).map_err(|cause| RunError::Open {
            what: "the source at the checkpoint's position",
            cause,
        })?;
        tracing::info!(checkpoint = r.metadata.id, position = %r.metadata.source, "resuming from a checkpoint");
    }
    drop((dead_letter_tx, late_tx));
    let sink_events = checkpoints.as_ref().map(|c| c.events.clone());

    let mut graph = RunGraph {
        checkpoints: checkpoints.as_ref().map(|c| c.stats.clone()),
        operators: operators.clone(),
        ..RunGraph::default()
    };
    let mut add_stage = |stats: &Arc<StageStats>, workers: usize, operators: Vec<String>| {
        graph.stages.push(StageEntry {
            stats: stats.clone(),
            workers,
            operators,
        });
    };
    let names: Vec<&str> = std::iter::once("source")
        .chain(plan.stages.iter().map(|s| s.name.as_str()))
        .chain(["sink"])
        .collect();
    let mut edges = Vec::new();
    let mut next_edge = |i: usize| {
        let (tx, rx) = edge(format!("{} -> {}", names[i], names[i + 1]), messages, shutdown);
        edges.push(EdgeEntry {
            from: names[i].to_owned(),
            to: names[i + 1].to_owned(),
            stats: tx.stats().clone(),
        });
        (tx, rx)
    };

    let source_stats = StageStats::new("source");
    add_stage(&source_stats, 1, Vec::new());
    let (tx, mut rx) = next_edge(0);
    {
        let processing_time = plan
            .stages
            .iter()
            .flat_map(|s| &s.operators)
            .any(|op| matches!(&op.kind, NodeKind::Window { spec, .. } if spec.processing_time));
        let time = SourceTime {
            watermarks: plan.watermark,
            ticks: processing_time.then_some(PROCESSING_TICK),
        };
        let report = SourceReport {
            stats: source_stats.clone(),
            telemetry: plan.telemetry.clone(),
        };
        let (shutdown, batch) = (shutdown.clone(), plan.batch_size);
        handles.push(spawn_stage("source".into(), move || {
            run_source(source, tx, batch, time, checkpoints, shutdown, report)
        })?);
    }
    for (i, (stage, chains)) in plan.stages.iter().zip(stage_chains).enumerate() {
        let (next_tx, next_rx) = next_edge(i + 1);
        let stats = StageStats::new(stage.name.clone());
        let operators = stage.operators.iter().map(|o| o.name.clone()).collect();
        add_stage(&stats, chains.len(), operators);
        if chains.len() == 1 {
            let chain = chains.into_iter().next().expect("one chain");
            let input = rx;
            handles.push(spawn_stage(stage.name.clone(), move || {
                run_chain(chain, input, next_tx, stats)
            })?);
        } else {
            handles.extend(spawn_parallel(
                stats,
                chains,
                stage.routing,
                rx,
                next_tx,
                messages,
                shutdown,
            )?);
        }
        rx = next_rx;
    }
    let sink_stats = StageStats::new("sink");
    add_stage(&sink_stats, 1, Vec::new());
    {
        let stats = sink_stats.clone();
        let acks = sink_events.map(|events| SinkCheckpoints {
            events,
            outcomes,
            shutdown: shutdown.clone(),
        });
        handles.push(spawn_stage("sink".into(), move || {
            run_sink(sink, rx, stats, acks)
        })?);
    }
    let dead_letter_stats = StageStats::new("dead-letter");
    if let Some((sink, rx)) = dead_letter {
        add_stage(&dead_letter_stats, 1, Vec::new());
        let (stats, batch) = (dead_letter_stats.clone(), plan.batch_size);
        handles.push(spawn_stage("dead-letter".into(), move || {
            run_side_output(sink, rx, batch, &stats)
        })?);
    }
    if let Some((sink, rx)) = late_output {
        let stats = StageStats::new("late-output");
        add_stage(&stats, 1, Vec::new());
        let batch = plan.batch_size;
        handles.push(spawn_stage("late-output".into(), move || {
            run_side_output(sink, rx, batch, &stats)
        })?);
    }
    graph.edges = edges;
    plan.telemetry.started(graph);

    let cancelled = supervise(handles, shutdown, plan.shutdown_timeout)?;
    let late_records = operators
        .iter()
        .filter_map(|o| o.late.as_ref())
        .map(|c| c.load(Ordering::Relaxed))
        .sum();
    let sum = |f: fn(&crate::metrics::CallStats) -> u64| operators.iter().map(|o| f(&o.calls)).sum();
    Ok(RunReport {
        source_records: source_stats.records_out.load(Ordering::Relaxed),
        sink_records: sink_stats.records_out.load(Ordering::Relaxed),
        dead_lettered: dead_letter_stats.records_out.load(Ordering::Relaxed),
        late_records,
        plugin_traps: sum(|c| c.traps.load(Ordering::Relaxed)),
        plugin_timeouts: sum(|c| {
            c.deadline_hits.load(Ordering::Relaxed) + c.fuel_exhausted.load(Ordering::Relaxed)
        }),
        checkpoints_completed: checkpoint_stats.completed.load(Ordering::Relaxed),
        checkpoints_failed: checkpoint_stats.failed.load(Ordering::Relaxed),
        cancelled,
        elapsed: started.elapsed(),
    })
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
                NodeKind::Window { late_records, .. } => Some(late_records.clone()),
                _ => None,
            },
        })
        .collect()
}

/// Starts the checkpoint coordinator; what the source needs to start
/// checkpoints (and the workers to acknowledge them).
fn start_checkpoints(
    plan: &Plan,
    settings: &CheckpointSettings,
    shutdown: &Shutdown,
    outcomes: Option<flume::Sender<(u64, bool)>>,
    handles: &mut Vec<StageHandle>,
) -> Result<SourceCheckpoints, RunError> {
    let store = CheckpointStore::open(&settings.dir, settings.keep)?;
    let next_id = plan
        .restore
        .as_ref()
        .map_or(0, |r| r.metadata.id)
        .max(store.newest_id()?)
        + 1;
    let (events, rx) = flume::bounded(1024);
    let stats = plan.telemetry.checkpoint_stats();
    let operators = plan
        .stages
        .iter()
        .flat_map(|s| &s.operators)
        .map(|op| {
            let plugin = op.plugin();
            OperatorMeta {
                name: op.name.clone(),
                world: plugin.map(|p| p.world().to_string()),
                plugin_digest: plugin.map(|p| p.digest().to_owned()),
                manifest_digest: plan.swapped_from.get(&op.name).cloned(),
            }
        })
        .collect();
    let setup = CoordinatorSetup {
        store: store.clone(),
        expected_acks: plan.stages.iter().map(|s| s.parallelism).sum::<usize>() + 1,
        pipeline: plan.name.clone(),
        manifest_hash: plan.manifest_hash.clone(),
        key_groups: plan.key_groups,
        operators,
        tolerable_failures: settings.tolerable_failures,
        stats: stats.clone(),
        shutdown: shutdown.clone(),
        outcomes,
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

/// A side output's channel and opened sink, when the plan has one.
type SideOutput = (
    Option<flume::Sender<Record>>,
    Option<(Box<dyn Sink>, flume::Receiver<Record>)>,
);

fn side_output(
    end: Option<Endpoint<OpenSink>>,
    what: &'static str,
    capacity: usize,
) -> Result<SideOutput, RunError> {
    let Some(end) = end else {
        return Ok((None, None));
    };
    let sink = (end.open)(None).map_err(|cause| RunError::Open { what, cause })?;
    let (tx, rx) = flume::bounded(capacity);
    Ok((Some(tx), Some((sink, rx))))
}

/// Writes the records of a side output (dead letters, late records) in
/// batches until every operator let go of the channel.
fn run_side_output(
    mut sink: Box<dyn Sink>,
    rx: flume::Receiver<Record>,
    batch_size: usize,
    stats: &Arc<StageStats>,
) -> Result<(), StageError> {
    while let Ok(first) = rx.recv() {
        let mut records = vec![first];
        records.extend(rx.try_iter().take(batch_size.saturating_sub(1)));
        let batch = Batch::Records(records);
        sink.write(&batch).map_err(StageError::Sink)?;
        sink.flush().map_err(StageError::Sink)?;
        stats.records_out.fetch_add(batch.len() as u64, Ordering::Relaxed);
    }
    sink.close().map_err(StageError::Sink)
}
