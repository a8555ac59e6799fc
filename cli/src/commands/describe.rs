//! `mailer describe`: the stage plan of a manifest, as text or as DOT.

use super::plan_of;
use anyhow::Result;
use clap::ValueEnum;
use mailer::plan;
use std::path::PathBuf;

/// The arguments of `mailer describe`.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline manifest (TOML).
    pub manifest: PathBuf,
    /// `text`, or `dot` for Graphviz (`mailer describe --format dot p.toml | dot -Tsvg`).
    #[arg(long, value_enum, default_value_t = DescribeFormat::Text)]
    pub format: DescribeFormat,
}

/// How `describe` prints the plan.
#[derive(Clone, Copy, ValueEnum)]
pub enum DescribeFormat {
    /// Lines of text.
    Text,
    /// Graphviz's DOT language.
    Dot,
}

/// Prints the plan of `args`.
pub fn run(args: Args) -> Result<()> {
    let Args { manifest, format } = args;
    let (plan, _engine) = plan_of(&manifest)?;
    match format {
        DescribeFormat::Text => print!("{}", plan::describe(&plan)),
        DescribeFormat::Dot => print!("{}", plan::describe_dot(&plan)),
    }
    Ok(())
}
