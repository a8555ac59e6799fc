//! Benchmark W1, step one (map): parses the value as a decimal integer and
//! replaces it with twice its value.

use mailer_sdk::{Error, Record, Result, operator};

/// value := value × 2
#[operator(map)]
fn double(mut rec: Record) -> Result<Record> {
    let v = rec.value_i64()?;
    let doubled = v
        .checked_mul(2)
        .ok_or_else(|| Error::new(format!("{v} x 2 overflows")))?;
    rec.set_value_i64(doubled);
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles() {
        assert_eq!(double(Record::new("21")).unwrap().value, b"42");
        assert_eq!(double(Record::new("-4")).unwrap().value, b"-8");
        assert!(double(Record::new("x")).is_err());
        assert!(double(Record::new(i64::MAX.to_string())).is_err());
    }
}
