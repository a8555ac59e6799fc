//! `mailer validate`: a manifest and its plugins checked, and the sinks'
//! tables where they can be reached.

use super::plan_of;
use anyhow::Result;
use mailer::connectors::postgres::TableCheck;
use std::path::PathBuf;

/// The arguments of `mailer validate`.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline manifest (TOML).
    pub manifest: PathBuf,
}

/// Checks the manifest of `args`.
pub fn run(args: Args) -> Result<()> {
    let manifest = args.manifest;
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
