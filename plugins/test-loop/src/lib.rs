//! Test plugin (map): never returns on a record whose value contains `loop`
//! (the host's per-call deadline must interrupt it); passes the others
//! through unchanged.

use mailer_sdk::{Record, Result, operator};

/// Spins forever on `loop`.
#[operator(map)]
fn loop_on_marker(rec: Record) -> Result<Record> {
    if rec.value.windows(4).any(|w| w == b"loop") {
        let mut n: u64 = 0;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_other_records() {
        assert_eq!(loop_on_marker(Record::new("ok")).unwrap().value, b"ok");
    }
}
