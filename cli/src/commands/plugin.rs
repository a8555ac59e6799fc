//! `mailer plugin`: plugin versions of the running pipeline, through its
//! admin API: list, swap (as a shadow or a canary too), promote, abort,
//! show, roll back and reload.

use super::{Migrate, cluster_members, plan_of};
use anyhow::Result;
use clap::Subcommand;
use mailer::admin::{AdminClient, ClientError};
use mailer::plan;
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum PluginCommand {
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

/// Runs `command` through the admin API (of every process, in cluster
/// mode); prints the answers.
pub fn run(command: PluginCommand) -> Result<()> {
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

/// A share as `25%` or `0.25`.
fn parse_share(text: &str) -> Result<f64, String> {
    let share = match text.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => text.trim().parse::<f64>(),
    };
    share.map_err(|_| format!("`{text}` is not a share: give a percentage (`10%`) or a fraction (`0.1`)"))
}
