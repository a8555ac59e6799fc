//! Flat-map: one record per whitespace-separated word of the value. Each
//! output's key and value are the word, exactly as written (case and
//! punctuation kept); the event time and headers are the input's.

use mailer_sdk::{Record, Result, operator};

/// Splits the value into words.
#[operator(flat_map)]
fn split_words(rec: Record) -> Result<Vec<Record>> {
    Ok(rec
        .value
        .split(|b| b.is_ascii_whitespace())
        .filter(|w| !w.is_empty())
        .map(|w| Record {
            key: Some(w.to_vec()),
            value: w.to_vec(),
            timestamp: rec.timestamp,
            headers: rec.headers.clone(),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_kept_exactly_as_written() {
        let out = split_words(Record::new("  The cat,\tthe\n cat  ").with_timestamp(7)).unwrap();
        let words: Vec<&[u8]> = out.iter().map(|r| r.value.as_slice()).collect();
        assert_eq!(words, [&b"The"[..], b"cat,", b"the", b"cat"]);
        assert!(
            out.iter()
                .all(|r| r.key() == Some(r.value.as_slice()) && r.timestamp == 7)
        );
    }

    #[test]
    fn blank_values_give_no_records() {
        assert!(split_words(Record::new(" \t ")).unwrap().is_empty());
    }
}
