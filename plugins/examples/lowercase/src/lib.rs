//! Map: lower-cases the value of each record (ASCII letters only; other bytes
//! are kept as they are). The swap tests replace `uppercase` with it.

use mailer_sdk::{Record, Result, operator};

/// Lower-cases the value.
#[operator(map)]
fn lowercase(mut rec: Record) -> Result<Record> {
    rec.value.make_ascii_lowercase();
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lower_cases_ascii_and_keeps_the_rest() {
        let out = lowercase(Record::new("HÉLLO World").with_key("k")).unwrap();
        assert_eq!(out.value, "hÉllo world".as_bytes());
    }
}
