//! `mailer tap`: the records leaving a source or an operator of the running
//! pipeline, printed as its admin API streams them.

use super::plan_of;
use anyhow::Result;
use clap::ValueEnum;
use mailer::admin::AdminClient;
use std::io::Write;
use std::path::PathBuf;

/// The arguments of `mailer tap`.
#[derive(clap::Args)]
pub struct Args {
    /// The running pipeline's manifest.
    pub manifest: PathBuf,
    /// The source or operator whose output to print.
    pub point: String,
    /// Stop after this many records (default 10, none with `--follow`).
    #[arg(long)]
    pub limit: Option<u64>,
    /// Print one record in N: `1/N` (or `N`).
    #[arg(long, value_name = "1/N", value_parser = parse_sample, default_value = "1")]
    pub sample: u64,
    /// Keep printing until interrupted or the pipeline stops.
    #[arg(long)]
    pub follow: bool,
    /// `text` (`ts=… key=… value`) or `json` (one object per line).
    #[arg(long, value_enum, default_value_t = TapFormat::Text)]
    pub format: TapFormat,
}

/// How `tap` prints.
#[derive(Clone, Copy, ValueEnum)]
pub enum TapFormat {
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

/// Prints what the tap of `args` streams.
pub fn run(args: Args) -> Result<()> {
    let Args {
        manifest,
        point,
        limit,
        sample,
        follow,
        format,
    } = args;
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
