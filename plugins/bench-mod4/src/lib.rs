//! Benchmark W1, step two (filter): keeps records whose value, a decimal
//! integer, is a multiple of 4.

use mailer_sdk::{RecordView, Result, operator};

/// value % 4 == 0, read where the record lies in its batch.
#[operator(filter)]
fn multiple_of_four(rec: RecordView<'_>) -> Result<bool> {
    Ok(rec.value_i64()? % 4 == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailer_sdk::Record;

    #[test]
    fn keeps_multiples_of_four() {
        assert!(multiple_of_four(Record::new("8").view()).unwrap());
        assert!(!multiple_of_four(Record::new("6").view()).unwrap());
    }
}
