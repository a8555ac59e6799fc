//! Test plugin (map) for the sandbox: implements the world's exports by
//! hand, bypassing the SDK, and answers `map-batch` with malformed data
//! when one of the batch's records asks for it:
//!
//! | value | the answer |
//! |---|---|
//! | `garbage` | bytes that are no encoding at all |
//! | `short` | one outcome fewer than the records |
//! | `huge` | a count of 4 billion and a record claiming a 4 GiB value |
//! | `trailing` | the right outcomes followed by extra bytes |
//!
//! Any other batch is passed through unchanged, well formed.

/// What a batch asks for: the first marker found in it.
pub fn marker(batch: &[u8]) -> Option<&'static str> {
    ["garbage", "short", "huge", "trailing"]
        .into_iter()
        .find(|m| batch.windows(m.len()).any(|w| w == m.as_bytes()))
}

/// The well-formed answer of a map that passes `count` records through:
/// `count:u32` then `0:u8 record` for each (the input's records as they
/// are).
pub fn pass_through(batch: &[u8]) -> Vec<u8> {
    let count = u32::from_le_bytes(batch[..4].try_into().expect("a count"));
    let mut out = count.to_le_bytes().to_vec();
    let mut rest = &batch[4..];
    for _ in 0..count {
        let len = record_len(rest);
        out.push(0);
        out.extend_from_slice(&rest[..len]);
        rest = &rest[len..];
    }
    out
}

/// The length of the encoded record at the start of `b`.
fn record_len(b: &[u8]) -> usize {
    let u32_at = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("a length")) as usize;
    let mut at = 1;
    if b[0] & 1 == 1 {
        at += 4 + u32_at(at);
    }
    at += 4 + u32_at(at);
    at += 8;
    let headers = u32_at(at);
    at += 4;
    for _ in 0..headers {
        at += 4 + u32_at(at);
        at += 4 + u32_at(at);
    }
    at
}

/// The answer to `batch`.
pub fn answer(batch: &[u8]) -> Vec<u8> {
    match marker(batch) {
        Some("garbage") => b"\xde\xad\xbe\xef not a batch".to_vec(),
        Some("short") => {
            let mut out = pass_through(batch);
            let count = u32::from_le_bytes(out[..4].try_into().expect("a count"));
            out[..4].copy_from_slice(&count.saturating_sub(1).to_le_bytes());
            out
        }
        Some("huge") => {
            let mut out = u32::MAX.to_le_bytes().to_vec();
            out.push(0);
            out.push(0);
            out.extend_from_slice(&u32::MAX.to_le_bytes());
            out
        }
        Some(_) => {
            let mut out = pass_through(batch);
            out.extend_from_slice(b"extra");
            out
        }
        None => pass_through(batch),
    }
}

#[cfg(target_arch = "wasm32")]
const _: () = {
    use mailer_sdk::__private::map as world;
    use world::mailer::plugin::types::{Error, Record};

    struct Malformed;

    impl world::Guest for Malformed {
        fn map(input: Record) -> Result<Record, Error> {
            Ok(input)
        }

        fn map_batch(input: Vec<u8>) -> Vec<u8> {
            answer(&input)
        }
    }

    world::export_map!(Malformed);
};

mailer_sdk::__plugin_version!();

#[cfg(test)]
mod tests {
    use super::*;

    /// `count` records with values `values`, no key, no headers.
    fn batch(values: &[&str]) -> Vec<u8> {
        let mut b = (values.len() as u32).to_le_bytes().to_vec();
        for v in values {
            b.push(0);
            b.extend_from_slice(&(v.len() as u32).to_le_bytes());
            b.extend_from_slice(v.as_bytes());
            b.extend_from_slice(&7i64.to_le_bytes());
            b.extend_from_slice(&0u32.to_le_bytes());
        }
        b
    }

    #[test]
    fn passes_through_or_breaks_as_asked() {
        let ok = batch(&["a", "bc"]);
        let out = answer(&ok);
        assert_eq!(&out[..4], &2u32.to_le_bytes());
        assert_eq!(out.len(), ok.len() + 2, "one status byte per record");
        assert_eq!(&answer(&batch(&["a", "short"]))[..4], &1u32.to_le_bytes());
        assert!(answer(&batch(&["trailing"])).ends_with(b"extra"));
        assert_eq!(&answer(&batch(&["huge"]))[..4], &u32::MAX.to_le_bytes());
        assert_eq!(marker(&batch(&["garbage"])), Some("garbage"));
    }
}
