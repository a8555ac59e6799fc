//! The `mailer` command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use mailer::manifest::Manifest;
use mailer::plan;
use mailer::plugin::PluginEngine;
use mailer::runtime::{self, Shutdown};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// mailer: stream processing with sandboxed WebAssembly operators.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Log format on standard error.
    #[arg(long, value_enum, default_value_t = LogFormat::Human, global = true)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Runs a pipeline until its source ends or SIGINT/SIGTERM drains it.
    /// With `[checkpoint]` in the manifest, it resumes from the newest
    /// complete checkpoint of the pipeline.
    Run {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
        /// Start from the beginning, ignoring the pipeline's checkpoints.
        #[arg(long)]
        fresh: bool,
    },
    /// Checks a manifest and its plugins; exits non-zero on any problem.
    Validate {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
    },
    /// Prints the stage plan: stages, parallelism, edges, plugins.
    Describe {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MAILER_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn plan_of(manifest: &Path) -> Result<(plan::Plan, PluginEngine)> {
    let m = Manifest::load(manifest)?;
    let engine = PluginEngine::new()?;
    let plan = plan::build(&m, &engine)?;
    Ok((plan, engine))
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Validate { manifest } => {
            let (plan, _engine) = plan_of(&manifest)?;
            println!("{}: ok (pipeline `{}`)", manifest.display(), plan.name);
            Ok(())
        }
        Command::Describe { manifest } => {
            let (plan, _engine) = plan_of(&manifest)?;
            print!("{}", plan::describe(&plan));
            Ok(())
        }
        Command::Run { manifest, fresh } => {
            let (mut plan, _engine) = plan_of(&manifest)?;
            if !fresh {
                plan.restore = mailer::checkpoint::Restore::latest(&plan)?;
            }
            let name = plan.name.clone();
            let shutdown = Shutdown::new();
            watch_signals(&shutdown)?;
            tracing::info!(pipeline = %name, "pipeline started");
            let report =
                runtime::run(plan, &shutdown).with_context(|| format!("pipeline `{name}` failed"))?;
            tracing::info!(
                pipeline = %name,
                source_records = report.source_records,
                sink_records = report.sink_records,
                dead_lettered = report.dead_lettered,
                late_records = report.late_records,
                drained = report.cancelled,
                secs = report.elapsed.as_secs_f64(),
                "pipeline finished"
            );
            Ok(())
        }
    }
}

/// The first SIGINT or SIGTERM drains the pipeline (C3); a second one
/// aborts at once.
fn watch_signals(shutdown: &Shutdown) -> Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).context("installing signal handlers")?;
    let shutdown = shutdown.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            for signal in signals.forever() {
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
