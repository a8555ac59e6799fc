//! `mailer cluster`: what the processes of a cluster's group hold.

use super::plan_of;
use anyhow::Result;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum ClusterCommand {
    /// Lists the group's members and the partitions (tasks) each holds,
    /// and each partition's committed offset, end and lag, as the brokers
    /// say now.
    Status {
        /// The pipeline manifest (TOML); it must have `[cluster]`.
        manifest: PathBuf,
    },
}

/// Runs `command`.
pub fn run(command: ClusterCommand) -> Result<()> {
    let ClusterCommand::Status { manifest } = command;
    let (plan, _engine) = plan_of(&manifest)?;
    if plan.cluster.is_none() {
        anyhow::bail!("{}: the pipeline has no `[cluster]` section", manifest.display());
    }
    print!("{}", mailer::cluster::status(&plan)?);
    Ok(())
}
