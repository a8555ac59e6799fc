//! `mailer savepoint`: the running pipeline of a manifest marks itself in
//! its checkpoint folder (`RUNNING`, its process id); a savepoint request is
//! a file there (`SAVEPOINT`) and a SIGUSR1 to that process, which takes the
//! savepoint at the source's next batch.

use anyhow::{Context, Result, bail};
use mailer::plan::Plan;
use mailer::runtime::SavepointRequest;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const RUNNING: &str = "RUNNING";
const REQUEST: &str = "SAVEPOINT";
/// How long `mailer savepoint` waits for the savepoint.
const WAIT: Duration = Duration::from_secs(300);

/// The mark of a running pipeline, removed when dropped.
pub struct Running(Option<PathBuf>);

impl Running {
    /// Marks `plan`'s pipeline as running in this process (when it has
    /// checkpoints).
    pub fn mark(plan: &Plan) -> Result<Self> {
        let Some(c) = &plan.checkpoint else {
            return Ok(Self(None));
        };
        std::fs::create_dir_all(&c.dir).with_context(|| format!("creating `{}`", c.dir.display()))?;
        let path = c.dir.join(RUNNING);
        std::fs::write(&path, std::process::id().to_string())
            .with_context(|| format!("writing `{}`", path.display()))?;
        Ok(Self(Some(path)))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The request `mailer savepoint` left in the checkpoint folder `dir`.
pub fn take_request(dir: &Path) -> Result<SavepointRequest> {
    let path = dir.join(REQUEST);
    let text = std::fs::read(&path).with_context(|| format!("reading `{}`", path.display()))?;
    let _ = std::fs::remove_file(&path);
    serde_json::from_slice(&text).with_context(|| format!("`{}` is not a savepoint request", path.display()))
}

/// Asks the running pipeline of `plan` for a savepoint in `dir` and waits
/// until it is written; its folder.
pub fn request(plan: &Plan, dir: Option<PathBuf>, stop: bool) -> Result<PathBuf> {
    let Some(c) = &plan.checkpoint else {
        bail!(
            "pipeline `{}` has no `[checkpoint]` section: savepoints are checkpoints, add one",
            plan.name
        );
    };
    let running = c.dir.join(RUNNING);
    let pid: i32 = std::fs::read_to_string(&running)
        .ok()
        .and_then(|p| p.trim().parse().ok())
        .with_context(|| {
            format!(
                "pipeline `{}` is not running (no `{}`): start it with `mailer run`",
                plan.name,
                running.display()
            )
        })?;
    let target = match dir {
        Some(d) => std::path::absolute(d)?,
        None => c
            .dir
            .parent()
            .unwrap_or(&c.dir)
            .join("savepoints")
            .join(format!("sp-{}", mailer::runtime::now_ms())),
    };
    if target.exists() {
        bail!(
            "`{}` already exists: name a new folder with --dir",
            target.display()
        );
    }
    let request = SavepointRequest {
        dir: target.clone(),
        stop,
    };
    let tmp = c.dir.join(format!("{REQUEST}.tmp"));
    std::fs::write(&tmp, serde_json::to_vec(&request)?)?;
    std::fs::rename(&tmp, c.dir.join(REQUEST))?;
    // SAFETY: kill(2) with a process id and a signal number; no memory is shared.
    if unsafe { libc::kill(pid, libc::SIGUSR1) } != 0 {
        bail!(
            "cannot signal pipeline `{}` (process {pid}): {}; is it still running?",
            plan.name,
            std::io::Error::last_os_error()
        );
    }
    let started = Instant::now();
    while !target.join("_metadata.json").is_file() {
        if started.elapsed() > WAIT {
            bail!("no savepoint after {WAIT:?}: see the pipeline's log");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(target)
}
