//! `mailer replay`: an operator's dead letters fed back into it and what
//! follows it, in a run of its own.

use anyhow::Result;
use std::path::PathBuf;

/// The arguments of `mailer replay`.
#[derive(clap::Args)]
pub struct Args {
    /// The pipeline manifest (TOML).
    pub manifest: PathBuf,
    /// The dead letters: a file the dead-letter sink wrote with
    /// `format = "json"`, or `kafka:<topic>` on the brokers of the
    /// manifest's Kafka `[dead_letter]` (then `--operator` is needed).
    #[arg(long, value_name = "FILE|kafka:TOPIC")]
    pub dead_letters: String,
    /// The operator whose dead letters to replay (the others' are
    /// passed over); needed when the dead letters name several.
    #[arg(long)]
    pub operator: Option<String>,
    /// Where the records that fail again go (default: beside the dead
    /// letters, `<name>.failed-again.jsonl`).
    #[arg(long, value_name = "FILE")]
    pub failed_again: Option<PathBuf>,
}

/// Replays the dead letters of `args`.
pub fn run(args: Args) -> Result<()> {
    let Args {
        manifest,
        dead_letters,
        operator,
        failed_again,
    } = args;
    let dead_letters = mailer::replay::DeadLetters::parse(&dead_letters);
    let failed_again = failed_again.unwrap_or_else(|| match &dead_letters {
        mailer::replay::DeadLetters::File(path) => {
            let stem = path.file_stem().unwrap_or_default().to_string_lossy();
            path.with_file_name(format!("{stem}.failed-again.jsonl"))
        }
        mailer::replay::DeadLetters::Kafka(topic) => PathBuf::from(format!("{topic}.failed-again.jsonl")),
    });
    // Relative to the current folder, not the manifest's.
    let failed_again = std::path::absolute(&failed_again).unwrap_or(failed_again);
    let r = mailer::replay::replay(&manifest, &dead_letters, operator.as_deref(), &failed_again)?;
    println!(
        "replayed {} dead letter(s) into operator `{}`: {} record(s) written to the sinks, {} failed again (in {}); {} dead letter(s) of other operators passed over",
        r.replayed,
        r.operator,
        r.written,
        r.failed,
        r.failed_again.display(),
        r.passed_over
    );
    Ok(())
}
