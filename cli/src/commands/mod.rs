//! The commands of `mailer`, one file each, and what several share.

pub mod cluster;
pub mod describe;
pub mod new_plugin;
pub mod plugin;
pub mod replay;
pub mod run;
pub mod savepoint;
pub mod state;
pub mod tap;
pub mod test;
pub mod validate;

use anyhow::Result;
use clap::ValueEnum;
use mailer::admin::AdminPeers;
use mailer::manifest::Manifest;
use mailer::plan;
use mailer::plugin::PluginEngine;
use std::path::Path;

/// The plan of the manifest at `manifest`, and the engine its plugins were
/// loaded with.
pub fn plan_of(manifest: &Path) -> Result<(plan::Plan, PluginEngine)> {
    let m = Manifest::load(manifest)?;
    let engine = PluginEngine::new()?;
    let plan = plan::build(&m, &engine)?;
    Ok((plan, engine))
}

/// The members of a cluster's group: each `client.id` and the admin
/// address it publishes.
pub type Members = Vec<(String, Option<std::net::SocketAddr>)>;

/// The admin APIs a cluster-mode `plan`'s manifest lets the CLI ask and
/// the group's members now; an error when none runs.
pub fn cluster_members(plan: &plan::Plan) -> Result<(AdminPeers, Members)> {
    let peers = AdminPeers::of(plan)?;
    let members = mailer::cluster::member_admins(plan)?;
    anyhow::ensure!(
        !members.is_empty(),
        "no process of the cluster's group runs now: nothing to ask"
    );
    Ok((peers, members))
}

/// When a swap to a plugin of a higher state version migrates the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Migrate {
    /// Each key when it is next handled.
    Lazy,
    /// Every key in the background too, a few after each batch.
    Eager,
}
