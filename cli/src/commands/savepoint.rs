//! `mailer savepoint`: a savepoint request is a file in the running
//! pipeline's checkpoint folder (`SAVEPOINT`) and a SIGUSR1 to the process
//! that holds the folder's lock, which takes the savepoint at the source's
//! next batch and answers in `SAVEPOINT.done`, or in `SAVEPOINT.failed`
//! when it cannot write it.

use anyhow::{Context, Result, bail};
use mailer::checkpoint::{Location, SavepointRequest};
use mailer::checkpoint::{SAVEPOINT_DONE, SAVEPOINT_FAILED, SavepointFailure, lock_holder};
use mailer::plan::Plan;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The arguments of `mailer savepoint`.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline manifest (TOML); it must have `[checkpoint]`.
    pub manifest: PathBuf,
    /// Where to write it: a new folder, or `s3://bucket/prefix`
    /// (reached with the manifest's `[checkpoint.s3]`);
    /// `<checkpoint path>/../savepoints/sp-<time>` when absent.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<String>,
    /// Stop the pipeline once the savepoint is written.
    #[arg(long)]
    pub stop: bool,
}

/// Asks for the savepoint of `args`; prints where it is.
pub fn run(args: Args) -> Result<()> {
    let (plan, _engine) = super::plan_of(&args.manifest)?;
    let target = request(&plan, args.dir, args.stop)?;
    println!("{target}");
    Ok(())
}

const REQUEST: &str = "SAVEPOINT";
/// How long `mailer savepoint` waits for the savepoint.
const WAIT: Duration = Duration::from_secs(300);

/// The request `mailer savepoint` left in the checkpoint folder `dir`.
pub fn take_request(dir: &Path) -> Result<SavepointRequest> {
    let path = dir.join(REQUEST);
    let text = std::fs::read(&path).with_context(|| format!("reading `{}`", path.display()))?;
    let _ = std::fs::remove_file(&path);
    serde_json::from_slice(&text).with_context(|| format!("`{}` is not a savepoint request", path.display()))
}

/// Asks the running pipeline of `plan` for a savepoint in `dir` (a folder
/// or a bucket prefix) and waits until it is written; where it is.
pub fn request(plan: &Plan, dir: Option<String>, stop: bool) -> Result<String> {
    let Some(c) = &plan.checkpoint else {
        bail!(
            "pipeline `{}` has no `[checkpoint]` section: savepoints are checkpoints, add one",
            plan.name
        );
    };
    let Some(pid) = lock_holder(&c.dir)? else {
        bail!(
            "pipeline `{}` is not running (nothing holds `{}`): start it with `mailer run`",
            plan.name,
            c.dir.join(mailer::checkpoint::LOCK_FILE).display()
        );
    };
    let target = match dir
        .as_deref()
        .map(Location::parse)
        .transpose()
        .map_err(anyhow::Error::msg)?
    {
        Some(Location::Folder(d)) => Location::Folder(std::path::absolute(d)?),
        Some(bucket) => bucket,
        None => Location::Folder(
            c.dir
                .parent()
                .unwrap_or(&c.dir)
                .join("savepoints")
                .join(format!("sp-{}", mailer::clock::now_ms())),
        ),
    };
    if let Location::Folder(d) = &target
        && d.exists()
    {
        bail!("`{}` already exists: name a new folder with --dir", d.display());
    }
    if let (Location::Bucket(url), Some(checkpoints)) = (&target, &c.bucket)
        && (checkpoints.contains(url) || url.contains(checkpoints))
    {
        bail!(
            "`{url}` overlaps the pipeline's checkpoints in `{checkpoints}`, whose old files are deleted as checkpoints are pruned: give a prefix outside it"
        );
    }
    let target = target.to_string();
    let request = SavepointRequest {
        target: target.clone(),
        stop,
    };
    let (failed, done) = (c.dir.join(SAVEPOINT_FAILED), c.dir.join(SAVEPOINT_DONE));
    let _ = std::fs::remove_file(&failed);
    let _ = std::fs::remove_file(&done);
    let tmp = c.dir.join(format!("{REQUEST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&request)?)?;
    std::fs::rename(&tmp, c.dir.join(REQUEST))?;
    // SAFETY: kill(2) with a process id and a signal number; no memory is shared.
    if unsafe { libc::kill(pid as i32, libc::SIGUSR1) } != 0 {
        bail!(
            "cannot signal pipeline `{}` (process {pid}): {}; is it still running?",
            plan.name,
            std::io::Error::last_os_error()
        );
    }
    // The pipeline says when the savepoint is complete, or why it could
    // not write it.
    let started = Instant::now();
    while std::fs::read_to_string(&done).ok().as_deref() != Some(target.as_str()) {
        if let Some(reason) = failure_of(&failed, &target) {
            bail!("the pipeline could not write the savepoint: {reason}");
        }
        if started.elapsed() > WAIT {
            bail!("no savepoint after {WAIT:?}: see the pipeline's log");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(target)
}

/// The reason in `failed` when it is about the savepoint at `target`.
fn failure_of(failed: &Path, target: &str) -> Option<String> {
    let text = std::fs::read(failed).ok()?;
    let failure: SavepointFailure = serde_json::from_slice(&text).ok()?;
    (failure.target == target).then_some(failure.reason)
}
