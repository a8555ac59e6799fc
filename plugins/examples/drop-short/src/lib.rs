//! Filter: drops records whose value is shorter than 3 bytes.

use mailer_sdk::{Record, Result, operator};

/// Keeps values of 3 bytes or more.
#[operator(filter)]
fn drop_short(rec: &Record) -> Result<bool> {
    Ok(rec.value.len() >= 3)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_three_bytes_and_more() {
        assert!(!drop_short(&Record::new("ab")).unwrap());
        assert!(drop_short(&Record::new("abc")).unwrap());
    }
}
