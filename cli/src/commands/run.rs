//! `mailer run`: a pipeline run until its sources end or a signal drains
//! it, restarted from the committed checkpoint when a restart cures what
//! stopped it; SIGUSR1 asks it for the savepoint `mailer savepoint` asked.

use super::{Migrate, plan_of, savepoint};
use anyhow::{Context, Result};
use mailer::checkpoint::{Location, StartFrom};
use mailer::launch::Resume;
use mailer::plan;
use mailer::plugin::PluginEngine;
use mailer::progress::ProgressDisplay;
use mailer::runtime::{Control, Shutdown};
use std::path::PathBuf;

/// The arguments of `mailer run`.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline manifest (TOML).
    pub manifest: PathBuf,
    /// Start from the beginning, ignoring the pipeline's checkpoints.
    #[arg(long, conflicts_with_all = ["from_savepoint", "from_checkpoint"])]
    pub fresh: bool,
    /// Start from this savepoint (a folder or `s3://bucket/prefix`
    /// `mailer savepoint` wrote), at whatever keyed parallelism the
    /// manifest now says.
    #[arg(long, value_name = "DIR", conflicts_with = "from_checkpoint")]
    pub from_savepoint: Option<String>,
    /// Start from this checkpoint of the pipeline's checkpoint folder,
    /// whatever the sink committed (when a restart is refused and you
    /// choose knowingly where to resume).
    #[arg(long, value_name = "ID")]
    pub from_checkpoint: Option<u64>,
    /// Resume state even where a plugin declares an older state version
    /// than the state's (a downgrade: the plugin reads state that a
    /// newer version migrated and it may not understand).
    #[arg(long)]
    pub force: bool,
    /// Where a plugin declares a higher state version than the state it
    /// resumes: migrate each key's state when the key is next handled
    /// (`lazy`), or every key in the background too (`eager`).
    #[arg(long, value_enum, default_value = "lazy")]
    pub migrate: Migrate,
}

/// Runs the pipeline of `args`.
pub fn run(args: Args) -> Result<()> {
    let Args {
        manifest,
        fresh,
        from_savepoint,
        from_checkpoint,
        force,
        migrate,
    } = args;
    let make_plan = || plan_of(&manifest);
    let resume = Resume {
        allow_state_downgrade: force,
        migrate_every_key: migrate == Migrate::Eager,
    };
    let (plan, engine) = make_plan()?;
    for warning in &plan.warnings {
        tracing::warn!(pipeline = %plan.name, "{warning}");
    }
    let start = match (from_savepoint, from_checkpoint) {
        (Some(at), _) => {
            StartFrom::Savepoint(Location::parse(&at).map_err(|e| anyhow::anyhow!("--from-savepoint: {e}"))?)
        }
        (None, Some(id)) => StartFrom::Checkpoint(id),
        (None, None) if fresh => StartFrom::Fresh,
        (None, None) => StartFrom::Resume,
    };
    let name = plan.name.clone();
    let (shutdown, control) = (Shutdown::new(), Control::new());
    watch_signals(
        &shutdown,
        &control,
        plan.checkpoint.as_ref().map(|c| c.dir.clone()),
    )?;
    let progress = ProgressDisplay::start(plan.telemetry.clone());
    let report = launch_restarting(plan, engine, (start, resume), make_plan, &shutdown, &control);
    drop(progress);
    let report = report?;
    tracing::info!(
        pipeline = %name,
        source_records = report.source_records,
        sink_records = report.sink_records,
        dead_lettered = report.dead_lettered,
        late_records = report.late_records,
        plugin_traps = report.plugin_traps,
        plugin_timeouts = report.plugin_timeouts,
        checkpoints = report.checkpoints_completed,
        failed_checkpoints = report.checkpoints_failed,
        drained = report.cancelled,
        secs = report.elapsed.as_secs_f64(),
        "pipeline finished"
    );
    Ok(())
}

/// Restarts within this long of each other count towards [`MAX_RESTARTS`].
const RESTART_WINDOW: std::time::Duration = std::time::Duration::from_secs(600);
/// Restarts a run may make within [`RESTART_WINDOW`] before it stops.
const MAX_RESTARTS: usize = 3;

/// Runs `plan`, and again from the committed checkpoint, planned anew by
/// `make_plan`, each time a failure a restart cures stops it (the brokers
/// aborted a stalled transaction), up to [`MAX_RESTARTS`] within
/// [`RESTART_WINDOW`].
fn launch_restarting(
    mut plan: plan::Plan,
    mut engine: PluginEngine,
    (mut start, resume): (StartFrom, Resume),
    make_plan: impl Fn() -> Result<(plan::Plan, PluginEngine)>,
    shutdown: &Shutdown,
    control: &Control,
) -> Result<mailer::runtime::RunReport> {
    let mut restarts: Vec<std::time::Instant> = Vec::new();
    loop {
        let (name, telemetry) = (plan.name.clone(), plan.telemetry.clone());
        // A failed run cancels its own flags only: a restart starts clean.
        match mailer::launch::launch(plan, engine, &start, resume, &shutdown.for_one_run(), control) {
            Err(e) if e.restart_cures() && !shutdown.is_cancelled() => {
                restarts.retain(|at| at.elapsed() < RESTART_WINDOW);
                if restarts.len() >= MAX_RESTARTS {
                    anyhow::bail!(
                        "{e}; not restarting again: {MAX_RESTARTS} restarts within {RESTART_WINDOW:?} already (raise the sink's `transaction.timeout.ms`, or find what stalls the process)"
                    );
                }
                restarts.push(std::time::Instant::now());
                tracing::warn!(pipeline = %name, "{e}; restarting from the committed checkpoint");
                (plan, engine) = make_plan()?;
                // The progress line and the metrics go on counting.
                plan.telemetry = telemetry;
                start = StartFrom::Resume;
            }
            report => return Ok(report?),
        }
    }
}

/// The first SIGINT or SIGTERM drains the pipeline (C3); a second one
/// aborts at once. SIGUSR1 asks for the savepoint `mailer savepoint` wrote
/// into the checkpoint folder `checkpoints`.
fn watch_signals(shutdown: &Shutdown, control: &Control, checkpoints: Option<PathBuf>) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGUSR1])
        .context("installing signal handlers")?;
    let (shutdown, control) = (shutdown.clone(), control.clone());
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
                if signal == SIGUSR1 {
                    match checkpoints.as_deref().map(savepoint::take_request) {
                        Some(Ok(request)) => {
                            tracing::info!(target = %request.target, stop = request.stop, "savepoint requested");
                            control.request_savepoint(request);
                        }
                        Some(Err(e)) => tracing::warn!(error = %e, "ignoring a savepoint signal"),
                        None => tracing::warn!("ignoring a savepoint signal: the pipeline has no [checkpoint]"),
                    }
                    continue;
                }
                if shutdown.is_cancelled() {
                    tracing::warn!(signal, "second signal: aborting");
                    shutdown.abort();
                } else {
                    tracing::info!(signal, "signal received: draining the pipeline");
                    shutdown.cancel();
                }
            }
        })?;
    Ok(())
}
