//! Map: upper-cases the value of each record (ASCII letters only; other bytes
//! are kept as they are).

use mailer_sdk::{Record, Result, operator};

/// Upper-cases the value.
#[operator(map)]
fn uppercase(mut rec: Record) -> Result<Record> {
    rec.value.make_ascii_uppercase();
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upper_cases_ascii_and_keeps_the_rest() {
        let out = uppercase(Record::new("héllo wörld").with_key("k")).unwrap();
        assert_eq!(out.value, "HéLLO WöRLD".as_bytes());
        assert_eq!(out.key(), Some(&b"k"[..]));
    }
}
