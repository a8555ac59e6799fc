//! Benchmark W1, step one (map): parses the value as a decimal integer and
//! replaces it with twice its value.

use mailer_sdk::{Record, Result, operator};

/// value := value × 2
#[operator(map)]
fn double(mut rec: Record) -> Result<Record> {
    let v: i64 = rec.value_str()?.parse()?;
    rec.value = (v * 2).to_string().into_bytes();
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles() {
        assert_eq!(double(Record::new("21")).unwrap().value, b"42");
        assert!(double(Record::new("x")).is_err());
    }
}
