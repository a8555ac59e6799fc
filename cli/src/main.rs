//! `mailer`: the command line of the mailer stream processing engine. Each
//! command is a file of `commands/` (its arguments and what it does); this
//! one parses the command line, starts the logging and runs the command.

mod commands;

use clap::{Parser, Subcommand, ValueEnum};
use commands::{cluster, describe, new_plugin, plugin, replay, run, savepoint, state, tap, test, validate};
use std::io::IsTerminal;
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
    Run(run::Args),
    /// Asks the running pipeline of a manifest for a savepoint: a
    /// checkpoint kept until you remove it; prints its folder.
    Savepoint(savepoint::Args),
    /// Talks to a running pipeline's admin API (its manifest's `[admin]`):
    /// lists, swaps, rolls back and reloads plugins.
    Plugin {
        #[command(subcommand)]
        command: plugin::PluginCommand,
    },
    /// Prints the records leaving a source or an operator of the running
    /// pipeline (key, value, timestamp, headers), through its admin API.
    /// A tap never slows the pipeline: records it cannot print in time are
    /// dropped, and it says how many.
    Tap(tap::Args),
    /// Runs a pipeline on test cases — each a folder of input records per
    /// source and expected records per sink — in place of its sources and
    /// sinks, and compares; exits non-zero when any case differs.
    Test(test::Args),
    /// Feeds the dead letters of an operator (a file the dead-letter sink
    /// wrote with `format = "json"`) back into it — once the manifest
    /// names the fixed plugin — and through what follows it to the sinks,
    /// in a run of its own; what fails again goes to a new dead-letter file.
    Replay(replay::Args),
    /// Reads a keyed operator's state in the running pipeline, through its
    /// admin API (each worker reads its own between two batches).
    State {
        #[command(subcommand)]
        command: state::StateCommand,
    },
    /// Cluster mode (`[cluster]` in the manifest): what the group's
    /// processes hold.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Checks a manifest and its plugins; exits non-zero on any problem.
    Validate(validate::Args),
    /// Prints the stage plan: sources, stages, parallelism, edges, sinks,
    /// plugins.
    Describe(describe::Args),
    /// Makes a plugin project to start from: a small example of a world
    /// (`--world`, a map by default) that builds to a component and passes
    /// its own test, in Rust (`cargo test`), Python (`python3 -m unittest`,
    /// `./build.sh`) or JavaScript (`npm test`, `npm run build`), with a
    /// pipeline running it and a test case of that pipeline (`mailer test
    /// pipeline.toml`).
    NewPlugin(new_plugin::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let done = match cli.command {
        Command::Run(args) => run::run(args),
        Command::Savepoint(args) => savepoint::run(args),
        Command::Plugin { command } => plugin::run(command),
        Command::Tap(args) => tap::run(args),
        Command::Test(args) => test::run(args),
        Command::Replay(args) => replay::run(args),
        Command::State { command } => state::run(&command),
        Command::Cluster { command } => cluster::run(command),
        Command::Validate(args) => validate::run(args),
        Command::Describe(args) => describe::run(args),
        Command::NewPlugin(args) => new_plugin::run(args),
    };
    match done {
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
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
    }
}
