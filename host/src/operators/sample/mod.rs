//! `sample`: keeps about 1 in `every` records, chosen by a hash of each
//! record's key and value. The choice depends on the record alone, not on
//! its position, its worker or the batch it came in, so a run keeps the
//! same records every time, and a run resumed from a checkpoint keeps
//! what the uninterrupted run would have.
//!
//! ```toml
//! [[operators]]
//! type = "sample"
//! every = 100      # keep about 1 in 100 records
//! seed = 7         # another seed, another 1 in 100 (default 0)
//! ```

use crate::batch::Batch;
use crate::config_problem::ConfigProblem;
use crate::failure::{FailurePolicy, OperatorError};
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, one_stream_table};
use crate::operators::{NodeKind, Operator, OperatorNode, Step};
use crate::record::Record;
use serde::Deserialize;
use std::sync::Arc;
use xxhash_rust::xxh3::Xxh3;

/// The `sample` operator's table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleSpec {
    /// The operator's name; `sample` when absent.
    pub name: Option<String>,
    /// Keep about 1 record in this many (at least 1; 1 keeps all).
    pub every: u64,
    /// Picks which 1 in `every`: runs with the same seed keep the same
    /// records (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Workers, when it runs before any `key_by` (default 1).
    pub parallelism: Option<usize>,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

impl OperatorConfig for SampleSpec {
    one_stream_table!("sample");

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        if self.every == 0 {
            return Err(ConfigProblem::field(
                "every",
                "`every` is 0: keep 1 record in how many? give 1 or more (1 keeps every record)",
            ));
        }
        cx.check_parallelism(self.parallelism)
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let (name, every, seed) = (cx.name.to_owned(), self.every, self.seed);
        let factory: crate::operators::NativeFactory = Arc::new(move |_, _| {
            Ok(Box::new(Sample {
                name: name.clone(),
                every,
                seed,
            }))
        });
        Ok(Step::Operator {
            node: OperatorNode::new(cx.name, NodeKind::Native(factory), FailurePolicy::Fail),
            parallelism: self.parallelism.unwrap_or(1),
        })
    }

    fn passes_values_on(&self) -> bool {
        true
    }
}

/// Keeps the records whose hash is a multiple of `every`.
pub struct Sample {
    name: String,
    every: u64,
    seed: u64,
}

impl Sample {
    /// Whether `rec` is one of the 1 in `every` kept.
    pub fn keeps(&self, rec: &Record) -> bool {
        keeps(rec, self.every, self.seed)
    }
}

/// Whether `rec` is one of the 1 in `every` that seed `seed` keeps: its key
/// (absent and empty told apart) and value hashed with the seed.
pub fn keeps(rec: &Record, every: u64, seed: u64) -> bool {
    let mut hash = Xxh3::with_seed(seed);
    match &rec.key {
        Some(key) => {
            hash.update(&[1]);
            hash.update(&(key.len() as u64).to_le_bytes());
            hash.update(key);
        }
        None => hash.update(&[0]),
    }
    hash.update(&rec.value);
    hash.digest().is_multiple_of(every)
}

impl Operator for Sample {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = input.into_records();
        out.retain(|rec| self.keeps(rec));
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod tests;
