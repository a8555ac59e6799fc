//! The `generator` source: deterministic records, bounded or not, at an
//! optional rate. Record `g` is exactly the benchmark workloads' record:
//! key = splitmix64(g) mod keys, value = g, event time = g / time_divisor
//! (key and value as decimal text).

use crate::batch::{Batch, EncodedBuilder};
use crate::connectors::rate::RateLimit;
use crate::connectors::{ConnectorError, Poll, Progress, Source};

/// SplitMix64 of `g`, as defined for the benchmark workloads.
pub fn splitmix64(g: u64) -> u64 {
    let mut z = g.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Generates records `0, 1, 2, …`.
#[derive(Debug)]
pub struct GeneratorSource {
    next: u64,
    end: Option<u64>,
    keys: Option<u64>,
    seed: u64,
    time_divisor: u64,
    rate: Option<RateLimit>,
    /// Written before each value's number.
    value_prefix: Vec<u8>,
}

impl GeneratorSource {
    /// Records `0..count` (or unbounded when `count` is `None`), keyed over
    /// `keys` distinct keys (no key when `None`), mixed with `seed`, at most
    /// `rate` records per second.
    pub fn new(
        count: Option<u64>,
        keys: Option<u64>,
        seed: u64,
        time_divisor: u64,
        rate: Option<u64>,
    ) -> Self {
        Self {
            next: 0,
            end: count,
            keys: keys.filter(|&k| k > 0),
            seed,
            time_divisor: time_divisor.max(1),
            rate: RateLimit::new(rate),
            value_prefix: Vec::new(),
        }
    }

    /// The same source with values `<prefix><g>` instead of `<g>`.
    pub fn with_value_prefix(mut self, prefix: &str) -> Self {
        self.value_prefix = prefix.as_bytes().to_vec();
        self
    }
}

impl Source for GeneratorSource {
    fn progress(&self) -> Option<Progress> {
        Some(Progress {
            records: self.next,
            records_total: self.end,
            ..Progress::default()
        })
    }

    /// A bounded generator is caught up at its end; an unbounded one has
    /// nothing it held when it opened.
    fn caught_up(&self) -> bool {
        self.end.is_none_or(|end| self.next >= end)
    }

    fn poll(&mut self, max: usize) -> Result<Poll, ConnectorError> {
        let mut n = max as u64;
        if let Some(end) = self.end {
            if self.next >= end {
                return Ok(Poll::End);
            }
            n = n.min(end - self.next);
        }
        if let Some(rate) = self.rate.as_mut() {
            n = rate.allow(n as usize) as u64;
            if n == 0 {
                return Ok(Poll::Idle);
            }
        }
        // Records are written straight into one encoded buffer per batch.
        let mut batch = EncodedBuilder::new(n as usize, n as usize * 48);
        let (mut key_text, mut value_text) = (itoa::Buffer::new(), itoa::Buffer::new());
        let mut value = self.value_prefix.clone();
        for _ in 0..n {
            let g = self.next;
            let key = self
                .keys
                .map(|k| key_text.format(splitmix64(g ^ self.seed) % k).as_bytes());
            let number = value_text.format(g).as_bytes();
            let value = if self.value_prefix.is_empty() {
                number
            } else {
                value.truncate(self.value_prefix.len());
                value.extend_from_slice(number);
                &value[..]
            };
            batch.push(key, value, (g / self.time_divisor) as i64);
            self.next += 1;
        }
        Ok(Poll::Records(Batch::Encoded(batch.finish())))
    }

    fn position(&self) -> serde_json::Value {
        serde_json::json!({ "next": self.next })
    }

    fn seek(&mut self, position: &serde_json::Value) -> Result<(), ConnectorError> {
        let next = position["next"]
            .as_u64()
            .ok_or_else(|| ConnectorError::Unsupported(format!("not a generator position: {position}")))?;
        self.next = next;
        if let Some(rate) = self.rate.as_mut() {
            rate.restart();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix64_matches_the_reference_values() {
        // First outputs of the reference SplitMix64 seeded with 0.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(splitmix64(0x9E37_79B9_7F4A_7C15), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn bounded_generator_produces_exactly_count_records() {
        let mut g = GeneratorSource::new(Some(5), Some(3), 0, 2, None);
        let Poll::Records(batch) = g.poll(10).unwrap() else {
            panic!()
        };
        let batch = batch.into_records();
        let values: Vec<_> = batch.iter().map(|r| r.value.clone()).collect();
        assert_eq!(values, ["0", "1", "2", "3", "4"]);
        let times: Vec<_> = batch.iter().map(|r| r.timestamp).collect();
        assert_eq!(times, [0, 0, 1, 1, 2]);
        let k0 = (splitmix64(0) % 3).to_string();
        assert_eq!(batch[0].key.as_deref(), Some(k0.as_bytes()));
        assert!(matches!(g.poll(10).unwrap(), Poll::End));
    }
}
