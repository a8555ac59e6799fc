//! Benchmark W1, step two (filter): keeps records whose value, a decimal
//! integer, is a multiple of 4.

use mailer_sdk::{Record, Result, operator};

/// value % 4 == 0
#[operator(filter)]
fn multiple_of_four(rec: &Record) -> Result<bool> {
    Ok(rec.value_i64()? % 4 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_multiples_of_four() {
        assert!(multiple_of_four(&Record::new("8")).unwrap());
        assert!(!multiple_of_four(&Record::new("6")).unwrap());
    }
}
