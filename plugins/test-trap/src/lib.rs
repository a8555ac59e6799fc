//! Test plugin (map): panics, so the component traps, on every record whose
//! value contains `trap`; passes the others through unchanged.

use mailer_sdk::{Record, Result, operator};

/// Traps on `trap`.
#[operator(map)]
fn trap_on_marker(rec: Record) -> Result<Record> {
    if rec.value.windows(4).any(|w| w == b"trap") {
        panic!("test-trap: asked to trap");
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_other_records() {
        assert_eq!(trap_on_marker(Record::new("ok")).unwrap().value, b"ok");
    }

    #[test]
    #[should_panic(expected = "asked to trap")]
    fn panics_on_the_marker() {
        let _ = trap_on_marker(Record::new("a trap here"));
    }
}
