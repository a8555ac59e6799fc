//! Benchmark W2 (reduce): the running sum of each key's values. The
//! accumulator, held by the host per key, is the sum as decimal text.

use mailer_sdk::{Error, RecordView, Result, operator, parse_i64, write_i64};

/// acc := acc + value, each record read where it lies in its batch.
#[operator(reduce)]
fn running_sum(accumulator: Option<&[u8]>, rec: RecordView<'_>) -> Result<Vec<u8>> {
    let sum = match accumulator {
        None => 0,
        Some(acc) => parse_i64(acc).ok_or_else(|| Error::new("the accumulator is not a 64-bit integer"))?,
    };
    let v = rec.value_i64()?;
    let total = sum
        .checked_add(v)
        .ok_or_else(|| Error::new("the sum overflows"))?;
    let mut out = Vec::with_capacity(20);
    write_i64(&mut out, total);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mailer_sdk::Record;

    #[test]
    fn sums() {
        let a = running_sum(None, Record::new("5").view()).unwrap();
        assert_eq!(a, b"5");
        assert_eq!(running_sum(Some(&a), Record::new("-7").view()).unwrap(), b"-2");
        assert!(running_sum(Some(b"x"), Record::new("1").view()).is_err());
    }
}
