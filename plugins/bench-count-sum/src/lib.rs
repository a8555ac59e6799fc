//! Aggregate (benchmark W3): the count and sum of a window's values
//! (decimal integers); the result is `{"count":n,"sum":s}`.

use mailer_sdk::{Aggregate, Record, Result, operator};
use serde::{Deserialize, Serialize};

/// The running count and sum.
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
        Ok(format!(r#"{{"count":{},"sum":{}}}"#, self.count, self.sum).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_sums_and_merges() {
        let mut a = CountSum::default();
        a.add(&Record::new("5")).unwrap();
        let mut b = CountSum::default();
        b.add(&Record::new("-2")).unwrap();
        a.merge(b).unwrap();
        assert_eq!(a.finish().unwrap(), br#"{"count":2,"sum":3}"#);
        assert!(CountSum::default().add(&Record::new("x")).is_err());
    }
}
