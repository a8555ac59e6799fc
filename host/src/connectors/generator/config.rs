//! The manifest table of the `generator` source.

use super::GeneratorSource;
use crate::connectors::config::{ConfigProblem, ConnectorContext, Endpoint, OpenSource, SourceConfig};
use serde::Deserialize;

/// The `generator` source: record `g` has value `g`, key
/// `splitmix64(g ^ seed) mod keys`, event time `g / time_divisor` (ms).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GeneratorSpec {
    /// How many records; unbounded when absent.
    pub count: Option<u64>,
    /// The most records per second; as fast as possible when absent.
    pub rate: Option<u64>,
    /// How many distinct keys; records have no key when absent.
    pub keys: Option<u64>,
    /// Mixed into the key of every record.
    #[serde(default)]
    pub seed: u64,
    /// Event time of record `g` is `g / time_divisor` ms.
    #[serde(default = "one")]
    pub time_divisor: u64,
    /// Text written before each value's number (`"Order"` gives `Order0`,
    /// `Order1`, …).
    #[serde(default)]
    pub value_prefix: String,
}

const fn one() -> u64 {
    1
}

impl SourceConfig for GeneratorSpec {
    fn check(&self, _: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        for (key, value) in [
            ("keys", self.keys),
            ("rate", self.rate),
            ("time_divisor", Some(self.time_divisor)),
        ] {
            if value == Some(0) {
                return Err(ConfigProblem::field(
                    key,
                    format!("generator `{key}` must be at least 1"),
                ));
            }
        }
        Ok(())
    }

    fn endpoint(&self, _: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSource> {
        let (count, keys, seed, div, rate) = (self.count, self.keys, self.seed, self.time_divisor, self.rate);
        let prefix = self.value_prefix.clone();
        let bound = count.map_or("unbounded".to_owned(), |c| format!("{c} records"));
        Endpoint {
            name: name.to_owned(),
            description: format!("generator ({bound})"),
            open: Box::new(move |_| {
                Ok(
                    Box::new(GeneratorSource::new(count, keys, seed, div, rate).with_value_prefix(&prefix))
                        as _,
                )
            }),
        }
    }
}
