//! The `mailer` command line.

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use mailer::admin::{AdminClient, AdminPeers, ClientError};
use mailer::checkpoint::{Location, StartFrom};
use mailer::connectors::postgres::TableCheck;
use mailer::manifest::Manifest;
use mailer::plan;
use mailer::plugin::PluginEngine;
use mailer::plugin::World;
use mailer::progress::ProgressDisplay;
use mailer::runtime::{Control, Shutdown};
use mailer::scaffold::{self, Language};
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

mod savepoint;

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

#[derive(Subcommand)]
enum PluginCommand {
    /// Prints the plugin operators (name, world, digest, previous versions)
    /// and the swaps so far, as JSON.
    List {
        /// The running pipeline's manifest.
        manifest: PathBuf,
    },
    /// Swaps an operator's plugin for the component in a file (in cluster
    /// mode, on every process of the group); with `--shadow`, runs it
    /// beside the current version instead, comparing their outputs, until
    /// `mailer plugin promote` or `abort`.
    Swap {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The operator's name.
        operator: String,
        /// The new version (`.wasm`).
        plugin: PathBuf,
        /// Run it as a shadow: on the same records as the current version,
        /// its outputs compared (`GET /api/swaps/{id}`) and thrown away.
        #[arg(long)]
        shadow: bool,
        /// The share of records the shadow runs on (above 0, at most 1).
        #[arg(long, default_value_t = 1.0, requires = "shadow")]
        shadow_share: f64,
        /// Run it as a canary on this share of the key groups (`10%` or
        /// `0.1`): it handles their keys, the current version the rest,
        /// until it passes its probation (promoted for every key) or fails
        /// too often (rolled back).
        #[arg(long, value_name = "SHARE", value_parser = parse_share, conflicts_with = "shadow")]
        canary: Option<f64>,
        /// Swap in a version declaring a lower state version than the
        /// running one's (it will read state of a shape it may not know).
        #[arg(long, conflicts_with_all = ["shadow", "canary"])]
        force: bool,
        /// When it declares a higher state version: migrate each key's
        /// state when the key is next handled (`lazy`), or every key in
        /// the background too (`eager`).
        #[arg(long, value_enum, default_value = "lazy", conflicts_with_all = ["shadow", "canary"])]
        migrate: Migrate,
    },
    /// Swaps an operator's shadow in as its version (on probation).
    Promote {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The operator's name.
        operator: String,
    },
    /// Ends an operator's shadow run without swapping it in.
    Abort {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The operator's name.
        operator: String,
    },
    /// Prints one swap (a shadow's: what it compared so far), as JSON.
    Show {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The swap's id (from `list` or `swap`).
        id: u64,
    },
    /// Swaps an operator back to the version before its running one.
    Rollback {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The operator's name.
        operator: String,
        /// Roll back to a version declaring a lower state version than the
        /// running one's (it will read state of a shape it may not know).
        #[arg(long)]
        force: bool,
    },
    /// Re-reads the plugin files the manifest names and swaps each
    /// operator whose file changed.
    Reload {
        /// The running pipeline's manifest.
        manifest: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Human,
    /// One JSON object per line.
    Json,
}

/// How `describe` prints the plan.
#[derive(Clone, Copy, ValueEnum)]
enum DescribeFormat {
    /// Lines of text.
    Text,
    /// Graphviz's DOT language.
    Dot,
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
        #[arg(long, conflicts_with_all = ["from_savepoint", "from_checkpoint"])]
        fresh: bool,
        /// Start from this savepoint (a folder or `s3://bucket/prefix`
        /// `mailer savepoint` wrote), at whatever keyed parallelism the
        /// manifest now says.
        #[arg(long, value_name = "DIR", conflicts_with = "from_checkpoint")]
        from_savepoint: Option<String>,
        /// Start from this checkpoint of the pipeline's checkpoint folder,
        /// whatever the sink committed (when a restart is refused and you
        /// choose knowingly where to resume).
        #[arg(long, value_name = "ID")]
        from_checkpoint: Option<u64>,
        /// Resume state even where a plugin declares an older state version
        /// than the state's (a downgrade: the plugin reads state that a
        /// newer version migrated and it may not understand).
        #[arg(long)]
        force: bool,
        /// Where a plugin declares a higher state version than the state it
        /// resumes: migrate each key's state when the key is next handled
        /// (`lazy`), or every key in the background too (`eager`).
        #[arg(long, value_enum, default_value = "lazy")]
        migrate: Migrate,
    },
    /// Asks the running pipeline of a manifest for a savepoint: a
    /// checkpoint kept until you remove it; prints its folder.
    Savepoint {
        /// The pipeline manifest (TOML); it must have `[checkpoint]`.
        manifest: PathBuf,
        /// Where to write it: a new folder, or `s3://bucket/prefix`
        /// (reached with the manifest's `[checkpoint.s3]`);
        /// `<checkpoint path>/../savepoints/sp-<time>` when absent.
        #[arg(long, value_name = "DIR")]
        dir: Option<String>,
        /// Stop the pipeline once the savepoint is written.
        #[arg(long)]
        stop: bool,
    },
    /// Talks to a running pipeline's admin API (its manifest's `[admin]`):
    /// lists, swaps, rolls back and reloads plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    /// Prints the records leaving a source or an operator of the running
    /// pipeline (key, value, timestamp, headers), through its admin API.
    /// A tap never slows the pipeline: records it cannot print in time are
    /// dropped, and it says how many.
    Tap {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The source or operator whose output to print.
        point: String,
        /// Stop after this many records (default 10, none with `--follow`).
        #[arg(long)]
        limit: Option<u64>,
        /// Print one record in N: `1/N` (or `N`).
        #[arg(long, value_name = "1/N", value_parser = parse_sample, default_value = "1")]
        sample: u64,
        /// Keep printing until interrupted or the pipeline stops.
        #[arg(long)]
        follow: bool,
        /// `text` (`ts=… key=… value`) or `json` (one object per line).
        #[arg(long, value_enum, default_value_t = TapFormat::Text)]
        format: TapFormat,
    },
    /// Runs a pipeline on test cases — each a folder of input records per
    /// source and expected records per sink — in place of its sources and
    /// sinks, and compares; exits non-zero when any case differs.
    Test {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
        /// A case folder (repeatable); by default every folder in
        /// `tests/<manifest name>/` beside the manifest.
        #[arg(long = "case", value_name = "DIR")]
        cases: Vec<PathBuf>,
        /// Write what each sink got as the case's expected records instead
        /// of comparing (review the change before keeping it).
        #[arg(long)]
        update: bool,
    },
    /// Feeds the dead letters of an operator (a file the dead-letter sink
    /// wrote with `format = "json"`) back into it — once the manifest
    /// names the fixed plugin — and through what follows it to the sinks,
    /// in a run of its own; what fails again goes to a new dead-letter file.
    Replay {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
        /// The dead letters: a file the dead-letter sink wrote with
        /// `format = "json"`, or `kafka:<topic>` on the brokers of the
        /// manifest's Kafka `[dead_letter]` (then `--operator` is needed).
        #[arg(long, value_name = "FILE|kafka:TOPIC")]
        dead_letters: String,
        /// The operator whose dead letters to replay (the others' are
        /// passed over); needed when the dead letters name several.
        #[arg(long)]
        operator: Option<String>,
        /// Where the records that fail again go (default: beside the dead
        /// letters, `<name>.failed-again.jsonl`).
        #[arg(long, value_name = "FILE")]
        failed_again: Option<PathBuf>,
    },
    /// Reads a keyed operator's state in the running pipeline, through its
    /// admin API (each worker reads its own between two batches).
    State {
        #[command(subcommand)]
        command: StateCommand,
    },
    /// Cluster mode (`[cluster]` in the manifest): what the group's
    /// processes hold.
    Cluster {
        #[command(subcommand)]
        command: ClusterCommand,
    },
    /// Checks a manifest and its plugins; exits non-zero on any problem.
    Validate {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
    },
    /// Prints the stage plan: sources, stages, parallelism, edges, sinks,
    /// plugins.
    Describe {
        /// The pipeline manifest (TOML).
        manifest: PathBuf,
        /// `text`, or `dot` for Graphviz (`mailer describe --format dot p.toml | dot -Tsvg`).
        #[arg(long, value_enum, default_value_t = DescribeFormat::Text)]
        format: DescribeFormat,
    },
    /// Makes a plugin project to start from: a small example of a world
    /// (`--world`, a map by default) that builds to a component and passes
    /// its own test, in Rust (`cargo test`), Python (`python3 -m unittest`,
    /// `./build.sh`) or JavaScript (`npm test`, `npm run build`), with a
    /// pipeline running it and a test case of that pipeline (`mailer test
    /// pipeline.toml`).
    NewPlugin {
        /// The plugin's language.
        #[arg(long, value_enum, default_value_t = Lang::Rust)]
        lang: Lang,
        /// The plugin's world: what the manifest runs it as.
        #[arg(long, default_value = "map", value_parser = world_parser())]
        world: World,
        /// The plugin's name (and its folder's).
        name: String,
        /// Where to put the folder.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// The `guest-sdk` folder a Rust plugin depends on (default: the
        /// one of the source tree this binary was built from).
        #[arg(long)]
        sdk: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum StateCommand {
    /// Prints the state of one key, as JSON.
    Get {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The keyed operator (a reduce, process, window or aggregate).
        operator: String,
        /// The key, as text.
        key: String,
    },
    /// Prints the state of the first keys (in byte order) starting with a
    /// prefix, as JSON.
    Scan {
        /// The running pipeline's manifest.
        manifest: PathBuf,
        /// The keyed operator.
        operator: String,
        /// Only keys starting with this.
        #[arg(long, default_value = "")]
        prefix: String,
        /// At most this many keys.
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
}

/// How `tap` prints.
#[derive(Clone, Copy, ValueEnum)]
enum TapFormat {
    /// One line per record; dropped counts and the end as `#` lines.
    Text,
    /// The admin API's JSON lines as they come.
    Json,
}

/// `1/N` or `N`: one record in N.
fn parse_sample(s: &str) -> Result<u64, String> {
    let n = s.strip_prefix("1/").unwrap_or(s);
    match n.parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "`{s}` is no sample: write `1/N` (one record in N), N at least 1"
        )),
    }
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Lists the group's members and the partitions (tasks) each holds,
    /// and each partition's committed offset, end and lag, as the brokers
    /// say now.
    Status {
        /// The pipeline manifest (TOML); it must have `[cluster]`.
        manifest: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Lang {
    /// Rust with `mailer-sdk`.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js.
    Js,
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
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).init(),
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
        Command::Plugin { command } => plugin_command(command),
        Command::Test {
            manifest,
            cases,
            update,
        } => test_command(&manifest, cases, update),
        Command::State { command } => state_command(&command),
        Command::Replay {
            manifest,
            dead_letters,
            operator,
            failed_again,
        } => {
            let dead_letters = mailer::replay::DeadLetters::parse(&dead_letters);
            let failed_again = failed_again.unwrap_or_else(|| match &dead_letters {
                mailer::replay::DeadLetters::File(path) => {
                    let stem = path.file_stem().unwrap_or_default().to_string_lossy();
                    path.with_file_name(format!("{stem}.failed-again.jsonl"))
                }
                mailer::replay::DeadLetters::Kafka(topic) => {
                    PathBuf::from(format!("{topic}.failed-again.jsonl"))
                }
            });
            // Relative to the current folder, not the manifest's.
            let failed_again = std::path::absolute(&failed_again).unwrap_or(failed_again);
            let r = mailer::replay::replay(&manifest, &dead_letters, operator.as_deref(), &failed_again)?;
            println!(
                "replayed {} dead letter(s) into operator `{}`: {} record(s) written to the sinks, {} failed again (in {}); {} dead letter(s) of other operators passed over",
                r.replayed,
                r.operator,
                r.written,
                r.failed,
                r.failed_again.display(),
                r.passed_over
            );
            Ok(())
        }
        Command::Tap {
            manifest,
            point,
            limit,
            sample,
            follow,
            format,
        } => {
            let (plan, _engine) = plan_of(&manifest)?;
            anyhow::ensure!(
                plan.cluster.is_none(),
                "{}: `mailer tap` does not run in cluster mode yet",
                manifest.display()
            );
            let limit = limit.or((!follow).then_some(10));
            let mut out = std::io::stdout().lock();
            for line in AdminClient::of(&plan)?.tap(&point, limit, sample)? {
                let line = line?;
                let text = match format {
                    TapFormat::Text => line.text(),
                    TapFormat::Json => line.json(),
                };
                // A closed pipe (`| head`) ends the tap.
                if writeln!(out, "{text}").and_then(|()| out.flush()).is_err() {
                    break;
                }
            }
            Ok(())
        }
        Command::Cluster {
            command: ClusterCommand::Status { manifest },
        } => {
            let (plan, _engine) = plan_of(&manifest)?;
            if plan.cluster.is_none() {
                anyhow::bail!("{}: the pipeline has no `[cluster]` section", manifest.display());
            }
            print!("{}", mailer::cluster::status(&plan)?);
            Ok(())
        }
        Command::Validate { manifest } => {
            let (plan, _engine) = plan_of(&manifest)?;
            for warning in &plan.warnings {
                eprintln!("warning: {warning}");
            }
            for check in &plan.sink_checks {
                match check()? {
                    TableCheck::Fits => {}
                    TableCheck::Unreachable(e) => {
                        eprintln!(
                            "warning: the sink's table was not checked ({e}); it is checked when the pipeline starts"
                        );
                    }
                }
            }
            println!("{}: ok (pipeline `{}`)", manifest.display(), plan.name);
            Ok(())
        }
        Command::Describe { manifest, format } => {
            let (plan, _engine) = plan_of(&manifest)?;
            match format {
                DescribeFormat::Text => print!("{}", plan::describe(&plan)),
                DescribeFormat::Dot => print!("{}", plan::describe_dot(&plan)),
            }
            Ok(())
        }
        Command::NewPlugin {
            lang,
            world,
            name,
            dir,
            sdk,
        } => {
            let language = match lang {
                Lang::Rust => Language::Rust,
                Lang::Python => Language::Python,
                Lang::Js => Language::Js,
            };
            let sdk = sdk.unwrap_or_else(scaffold::built_in_sdk);
            let sdk = std::path::absolute(&sdk).unwrap_or(sdk);
            let project = scaffold::scaffold(language, world, &name, &dir, &sdk)?;
            println!("{}", project.display());
            Ok(())
        }
        Command::Savepoint { manifest, dir, stop } => {
            let (plan, _engine) = plan_of(&manifest)?;
            let target = savepoint::request(&plan, dir, stop)?;
            println!("{target}");
            Ok(())
        }
        Command::Run {
            manifest,
            fresh,
            from_savepoint,
            from_checkpoint,
            force,
            migrate,
        } => {
            let make_plan = || -> Result<_> {
                let (mut plan, engine) = plan_of(&manifest)?;
                plan.allow_state_downgrade = force;
                plan.migrate_every_key = migrate == Migrate::Eager;
                Ok((plan, engine))
            };
            let (plan, engine) = make_plan()?;
            for warning in &plan.warnings {
                tracing::warn!(pipeline = %plan.name, "{warning}");
            }
            let start = match (from_savepoint, from_checkpoint) {
                (Some(at), _) => StartFrom::Savepoint(
                    Location::parse(&at).map_err(|e| anyhow::anyhow!("--from-savepoint: {e}"))?,
                ),
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
            let report = launch_restarting(plan, engine, start, make_plan, &shutdown, &control);
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
    }
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
    mut start: StartFrom,
    make_plan: impl Fn() -> Result<(plan::Plan, PluginEngine)>,
    shutdown: &Shutdown,
    control: &Control,
) -> Result<mailer::runtime::RunReport> {
    let mut restarts: Vec<std::time::Instant> = Vec::new();
    loop {
        let (name, telemetry) = (plan.name.clone(), plan.telemetry.clone());
        // A failed run cancels its own flags only: a restart starts clean.
        match mailer::pipeline::launch(plan, engine, &start, &shutdown.for_one_run(), control) {
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

fn test_command(manifest: &Path, cases: Vec<PathBuf>, update: bool) -> Result<()> {
    use mailer::pipeline_test::{Expectations, cases_folder, default_cases, run_case};
    let expectations = match update {
        true => Expectations::Update,
        false => Expectations::Compare,
    };
    let cases = match cases.is_empty() {
        true => default_cases(manifest),
        false => cases,
    };
    anyhow::ensure!(
        !cases.is_empty(),
        "{}: no test case: make folders in {} (each with input/<source>.jsonl and expected/<sink>.jsonl), or name one with --case",
        manifest.display(),
        cases_folder(manifest).display()
    );
    let mut failed = 0;
    for case in &cases {
        let report = run_case(manifest, case, expectations)?;
        let counts: Vec<String> = report
            .sinks
            .iter()
            .map(|(s, n)| format!("{s}: {n} records"))
            .collect();
        match report.passed() {
            true if update => println!("wrote  {} ({})", case.display(), counts.join(", ")),
            true => println!("ok     {} ({})", case.display(), counts.join(", ")),
            false => {
                failed += 1;
                println!("FAILED {}", case.display());
                for (sink, difference) in &report.differences {
                    println!("  sink `{sink}`: {difference}");
                }
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} cases failed", cases.len());
    Ok(())
}

fn state_command(command: &StateCommand) -> Result<()> {
    let manifest = match command {
        StateCommand::Get { manifest, .. } | StateCommand::Scan { manifest, .. } => manifest,
    };
    let (plan, _engine) = plan_of(manifest)?;
    let ask = |client: &AdminClient| match command {
        StateCommand::Get { operator, key, .. } => client.state_of(operator, key),
        StateCommand::Scan {
            operator,
            prefix,
            limit,
            ..
        } => client.state_scan(operator, prefix, *limit),
    };
    if plan.cluster.is_none() {
        println!(
            "{}",
            serde_json::to_string_pretty(&ask(&AdminClient::of(&plan)?)?)?
        );
        return Ok(());
    }
    // Cluster mode: a key's state is on the process running its task;
    // every process is asked, and a scan merges their keys.
    let (peers, members) = cluster_members(&plan)?;
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    for (member, admin) in &members {
        let addr = admin.with_context(|| {
            format!("process {member} publishes no admin API: start every process with `[admin]`")
        })?;
        // An address the manifest does not list is skipped (and warned of).
        let client = match peers.client(member, addr) {
            Ok(client) => client,
            Err(ClientError::NotListed { addr } | ClientError::PlainOverNetwork { addr }) => {
                skipped.push(format!("{member} at {addr}"));
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("asking process {member}")),
        };
        match ask(&client) {
            Ok(answer) => found.push(answer),
            Err(ClientError::Refused { status: 404, .. }) => {}
            Err(e) => return Err(e).with_context(|| format!("asking process {member}")),
        }
    }
    let not_asked = match skipped.is_empty() {
        true => String::new(),
        false => format!(" (not asked: {})", skipped.join(", ")),
    };
    let answer = match command {
        StateCommand::Get { operator, key, .. } => found.into_iter().next().with_context(|| {
            format!(
                "key \"{key}\" has no state in operator `{operator}` on any of the {} processes asked{not_asked}",
                members.len() - skipped.len()
            )
        })?,
        StateCommand::Scan { operator, limit, .. } => {
            let mut keys: Vec<serde_json::Value> = found
                .iter_mut()
                .flat_map(|a| a["keys"].as_array_mut().map(std::mem::take).unwrap_or_default())
                .collect();
            // In byte order, as one process gives them.
            let bytes = |k: &serde_json::Value| match &k["key"] {
                serde_json::Value::String(text) => text.as_bytes().to_vec(),
                other => hex::decode(other["hex"].as_str().unwrap_or_default()).unwrap_or_default(),
            };
            keys.sort_by_key(bytes);
            keys.truncate(*limit);
            serde_json::json!({ "operator": operator, "keys": keys })
        }
    };
    println!("{}", serde_json::to_string_pretty(&answer)?);
    Ok(())
}

/// The members of a cluster's group: each `client.id` and the admin
/// address it publishes.
type Members = Vec<(String, Option<std::net::SocketAddr>)>;

/// The admin APIs a cluster-mode `plan`'s manifest lets the CLI ask and
/// the group's members now; an error when none runs.
fn cluster_members(plan: &plan::Plan) -> Result<(AdminPeers, Members)> {
    let peers = AdminPeers::of(plan)?;
    let members = mailer::cluster::member_admins(plan)?;
    anyhow::ensure!(
        !members.is_empty(),
        "no process of the cluster's group runs now: nothing to ask"
    );
    Ok((peers, members))
}

fn plugin_command(command: PluginCommand) -> Result<()> {
    let manifest = match &command {
        PluginCommand::List { manifest }
        | PluginCommand::Swap { manifest, .. }
        | PluginCommand::Rollback { manifest, .. }
        | PluginCommand::Promote { manifest, .. }
        | PluginCommand::Abort { manifest, .. }
        | PluginCommand::Show { manifest, .. }
        | PluginCommand::Reload { manifest } => manifest,
    };
    let (plan, _engine) = plan_of(manifest)?;
    if plan.cluster.is_none() {
        let answer = plugin_answer(&AdminClient::of(&plan)?, &command, &plan)?;
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    // Cluster mode: every process, through the admin API it publishes.
    let (peers, members) = cluster_members(&plan)?;
    let mut answers = serde_json::Map::new();
    let mut failed = 0;
    for (member, admin) in &members {
        let answer = match admin {
            Some(addr) => peers
                .client(member, *addr)
                .and_then(|client| plugin_answer(&client, &command, &plan))
                .map_err(|e| e.to_string()),
            None => Err("it publishes no admin API: start every process with `[admin]`".to_owned()),
        };
        let answer = answer.unwrap_or_else(|error| {
            failed += 1;
            serde_json::json!({ "error": error })
        });
        answers.insert(member.clone(), answer);
    }
    println!("{}", serde_json::to_string_pretty(&answers)?);
    anyhow::ensure!(
        failed == 0,
        "{failed} of the {} processes did not answer as asked (see their answers above)",
        members.len()
    );
    Ok(())
}

/// What the admin API behind `client` answers to `command`.
fn plugin_answer(
    client: &AdminClient,
    command: &PluginCommand,
    plan: &plan::Plan,
) -> Result<serde_json::Value, ClientError> {
    Ok(match command {
        PluginCommand::List { .. } => serde_json::json!({
            "pipelines": client.pipelines()?,
            "swaps": client.swaps()?,
        }),
        PluginCommand::Swap {
            operator,
            plugin,
            shadow: true,
            shadow_share,
            ..
        } => client.trial("shadow", operator, plugin, *shadow_share)?,
        PluginCommand::Swap {
            operator,
            plugin,
            canary: Some(share),
            ..
        } => client.trial("canary", operator, plugin, *share)?,
        PluginCommand::Swap {
            operator,
            plugin,
            force,
            migrate,
            ..
        } => client.swap(
            operator,
            plugin,
            mailer::swap::SwapOptions {
                force: *force,
                migrate_every_key: *migrate == Migrate::Eager,
            },
        )?,
        PluginCommand::Rollback { operator, force, .. } => client.rollback(operator, *force)?,
        PluginCommand::Promote { operator, .. } => client.end_shadow(operator, "promote")?,
        PluginCommand::Abort { operator, .. } => client.end_shadow(operator, "abort")?,
        PluginCommand::Show { id, .. } => client.swap_record(*id)?,
        PluginCommand::Reload { .. } => serde_json::Value::Array(client.reload(plan)?),
    })
}

/// When a swap to a plugin of a higher state version migrates the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Migrate {
    /// Each key when it is next handled.
    Lazy,
    /// Every key in the background too, a few after each batch.
    Eager,
}

/// A share as `25%` or `0.25`.
fn parse_share(text: &str) -> Result<f64, String> {
    let share = match text.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => text.trim().parse::<f64>(),
    };
    share.map_err(|_| format!("`{text}` is not a share: give a percentage (`10%`) or a fraction (`0.1`)"))
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

/// `--world`: a world by its WIT name.
fn world_parser() -> impl clap::builder::TypedValueParser<Value = World> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(World::ALL.map(World::wit_name))
        .map(|name| World::from_wit_name(&name).expect("one of the possible values"))
}
