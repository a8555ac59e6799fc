//! Reduce: adds ten to the key's count per record, reading the accumulator
//! `count` keeps (the count as decimal text). The swap tests replace `count`
//! with it: the counts go on from where `count` left them, in steps of ten.

use mailer_sdk::{Error, Record, Result, operator};

/// Adds ten to the key's count.
#[operator(reduce)]
fn count_by_ten(accumulator: Option<&[u8]>, _rec: Record) -> Result<Vec<u8>> {
    let n: u64 = match accumulator {
        None => 0,
        Some(acc) => std::str::from_utf8(acc)?
            .parse()
            .map_err(|e| Error::new(format!("accumulator is not a count: {e}")))?,
    };
    Ok((n + 10).to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goes_on_from_the_count_in_tens() {
        assert_eq!(count_by_ten(None, Record::new("x")).unwrap(), b"10");
        assert_eq!(count_by_ten(Some(b"7"), Record::new("x")).unwrap(), b"17");
    }
}
