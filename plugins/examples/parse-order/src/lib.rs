//! Map: parses an order written as CSV, `order,customer,amount,ts`, into
//! the JSON `{"order":…,"customer":…,"amount":…}`, keyed by the customer, at
//! the order's event time `ts` (ms).

use mailer_sdk::{Error, Record, Result, operator};

/// One CSV order in, one JSON order out.
#[operator(map)]
fn parse_order(rec: Record) -> Result<Record> {
    let line = rec.value_str()?;
    let fields: Vec<&str> = line.trim().split(',').collect();
    let [order, customer, amount, ts] = fields[..] else {
        return Err(Error::new(format!(
            "`{line}` is not `order,customer,amount,ts` ({} fields)",
            fields.len()
        )));
    };
    let amount: f64 = amount
        .parse()
        .map_err(|e| Error::new(format!("amount `{amount}`: {e}")))?;
    let ts: i64 = ts.parse().map_err(|e| Error::new(format!("ts `{ts}`: {e}")))?;
    let value = serde_json::json!({ "order": order, "customer": customer, "amount": amount });
    Ok(Record::new(value.to_string())
        .with_key(customer)
        .with_timestamp(ts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_order() {
        let out = parse_order(Record::new("o1,alice,12.5,1700000000000")).unwrap();
        assert_eq!(out.key(), Some(&b"alice"[..]));
        assert_eq!(out.timestamp, 1_700_000_000_000);
        assert_eq!(
            String::from_utf8(out.value).unwrap(),
            r#"{"amount":12.5,"customer":"alice","order":"o1"}"#
        );
    }

    #[test]
    fn a_short_line_is_an_error_naming_it() {
        let err = parse_order(Record::new("o1,alice")).unwrap_err();
        assert!(err.message().contains("`o1,alice`"), "{err}");
    }
}
