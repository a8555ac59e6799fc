//! Aggregate (swap tests): the next version of `bench-count-sum`. It keeps
//! the same accumulator, so windows opened by the old version finish in
//! this one, and marks its results with `"version":2`.

use mailer_sdk::{Aggregate, Record, Result, operator};
use serde::{Deserialize, Serialize};

/// The running count and sum (as `bench-count-sum` stores them).
#[derive(Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CountSum {
    count: u64,
    sum: i64,
}

#[operator(aggregate)]
impl Aggregate for CountSum {
    fn add(&mut self, rec: &Record) -> Result<()> {
        self.count += 1;
        self.sum = self.sum.wrapping_add(rec.value_i64()?);
        Ok(())
    }

    fn merge(&mut self, other: Self) -> Result<()> {
        self.count += other.count;
        self.sum = self.sum.wrapping_add(other.sum);
        Ok(())
    }

    fn finish(self) -> Result<Vec<u8>> {
        Ok(format!(r#"{{"count":{},"sum":{},"version":2}}"#, self.count, self.sum).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finishes_with_its_version() {
        let mut a = CountSum::default();
        a.add(&Record::new("5")).unwrap();
        assert_eq!(a.finish().unwrap(), br#"{"count":1,"sum":5,"version":2}"#);
    }
}
