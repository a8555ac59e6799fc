//! Benchmark W1, step one (map): parses the value as a decimal integer and
//! replaces it with twice its value.

use mailer_sdk::{Error, Record, Result, operator};

/// value := value × 2
#[operator(map)]
fn double(mut rec: Record) -> Result<Record> {
    let v: i64 = rec.value_str()?.parse()?;
    let doubled = v
        .checked_mul(2)
        .ok_or_else(|| Error::new(format!("{v} x 2 overflows")))?;
    // Reuse the value's buffer: no allocation per record.
    rec.value.clear();
    rec.value
        .extend_from_slice(itoa::Buffer::new().format(doubled).as_bytes());
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles() {
        assert_eq!(double(Record::new("21")).unwrap().value, b"42");
        assert!(double(Record::new("x")).is_err());
        assert!(double(Record::new(i64::MAX.to_string())).is_err());
    }
}
