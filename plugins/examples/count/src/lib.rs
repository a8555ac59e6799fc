//! Reduce: counts the records of each key. The accumulator, held by the host
//! per key, is the count as decimal text.

use mailer_sdk::{Error, Record, Result, operator};

/// Adds one to the key's count.
#[operator(reduce)]
fn count(accumulator: Option<&[u8]>, _rec: Record) -> Result<Vec<u8>> {
    let n: u64 = match accumulator {
        None => 0,
        Some(acc) => std::str::from_utf8(acc)?
            .parse()
            .map_err(|e| Error::new(format!("accumulator is not a count: {e}")))?,
    };
    Ok((n + 1).to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_from_one() {
        let first = count(None, Record::new("x")).unwrap();
        assert_eq!(first, b"1");
        assert_eq!(count(Some(&first), Record::new("x")).unwrap(), b"2");
    }

    #[test]
    fn a_corrupt_accumulator_is_an_error() {
        assert!(count(Some(b"many"), Record::new("x")).is_err());
    }
}
