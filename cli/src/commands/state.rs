//! `mailer state`: a keyed operator's state in the running pipeline, from
//! its admin API (in cluster mode, from every process, merged).

use super::{cluster_members, plan_of};
use anyhow::{Context, Result};
use clap::Subcommand;
use mailer::admin::{AdminClient, ClientError};
use std::path::PathBuf;

#[derive(Subcommand)]
pub enum StateCommand {
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

/// Asks the running pipeline for the state `command` names; prints it.
pub fn run(command: &StateCommand) -> Result<()> {
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
