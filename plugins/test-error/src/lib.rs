//! Test plugin (map): returns an error for every record whose value contains
//! `bad`; passes the others through unchanged.

use mailer_sdk::{Error, Record, Result, operator};

/// Fails on `bad`.
#[operator(map)]
fn error_on_marker(rec: Record) -> Result<Record> {
    if rec.value.windows(3).any(|w| w == b"bad") {
        return Err(Error::new(format!(
            "record `{}` is bad",
            String::from_utf8_lossy(&rec.value)
        )));
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_name_the_record() {
        assert_eq!(
            error_on_marker(Record::new("a bad one")).unwrap_err().message(),
            "record `a bad one` is bad"
        );
        assert!(error_on_marker(Record::new("good")).is_ok());
    }
}
