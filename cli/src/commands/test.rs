//! `mailer test`: a pipeline run on test cases in place of its sources and
//! sinks, each sink's records compared with the case's expectations.

use anyhow::Result;
use std::path::PathBuf;

/// The arguments of `mailer test`.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline manifest (TOML).
    pub manifest: PathBuf,
    /// A case folder (repeatable); by default every folder in
    /// `tests/<manifest name>/` beside the manifest.
    #[arg(long = "case", value_name = "DIR")]
    pub cases: Vec<PathBuf>,
    /// Write what each sink got as the case's expected records instead
    /// of comparing (review the change before keeping it).
    #[arg(long)]
    pub update: bool,
}

/// Runs the cases of `args` and compares.
pub fn run(args: Args) -> Result<()> {
    let Args {
        manifest,
        cases,
        update,
    } = args;
    let manifest = &manifest;
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
