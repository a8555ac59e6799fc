//! Test plugin (flat-map) for the sandbox: a record `flood:<n>` expands
//! into `n` copies (the host's `max_outputs_per_record` must stop an
//! enormous output); any other record passes through once.

use mailer_sdk::{Record, Result, operator};

/// Floods on `flood:<n>`.
#[operator(flat_map)]
fn flood(rec: Record) -> Result<Vec<Record>> {
    let n = std::str::from_utf8(&rec.value)
        .ok()
        .and_then(|v| v.strip_prefix("flood:"))
        .and_then(|n| n.parse::<usize>().ok());
    Ok(match n {
        Some(n) => vec![rec; n],
        None => vec![rec],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floods_on_request_only() {
        assert_eq!(flood(Record::new("flood:3")).unwrap().len(), 3);
        assert_eq!(flood(Record::new("calm")).unwrap().len(), 1);
    }
}
