//! The record a plugin sees.

use mailer_wire::{RecordRef, Writer};

/// One record of the stream, owned by the plugin while it handles it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The record's key, if it has one.
    pub key: Option<Vec<u8>>,
    /// The payload.
    pub value: Vec<u8>,
    /// Event time in milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Headers in order; names may repeat.
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// A record with this value, no key, timestamp 0 and no headers.
    pub fn new(value: impl Into<Vec<u8>>) -> Self {
        Self {
            value: value.into(),
            ..Self::default()
        }
    }

    /// The same record with this key.
    pub fn with_key(mut self, key: impl Into<Vec<u8>>) -> Self {
        self.key = Some(key.into());
        self
    }

    /// The same record with this event time (ms).
    pub fn with_timestamp(mut self, timestamp: i64) -> Self {
        self.timestamp = timestamp;
        self
    }

    /// The key as bytes, if any.
    pub fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }

    /// The value as UTF-8 text, or an error naming the problem.
    pub fn value_str(&self) -> crate::Result<&str> {
        self.view().value_str()
    }

    /// The value as a decimal integer (ASCII digits with an optional sign),
    /// parsed straight from the bytes.
    pub fn value_i64(&self) -> crate::Result<i64> {
        self.view().value_i64()
    }

    /// Replaces the value with `v` as decimal text, reusing the value's buffer.
    pub fn set_value_i64(&mut self, v: i64) {
        self.value.clear();
        write_i64(&mut self.value, v);
    }

    /// The first header with this name.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.view().header(name)
    }

    pub(crate) fn from_ref(r: RecordRef<'_>) -> Self {
        Self {
            key: r.key.map(<[u8]>::to_vec),
            value: r.value.to_vec(),
            timestamp: r.timestamp,
            headers: r
                .headers
                .iter()
                .map(|(n, v)| (n.to_owned(), v.to_vec()))
                .collect(),
        }
    }

    pub(crate) fn write_to(&self, w: &mut Writer) {
        w.record(
            self.key.as_deref(),
            &self.value,
            self.timestamp,
            self.headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
        );
    }
}

/// Appends `v` as decimal text to `out` (as [`Record::set_value_i64`]
/// writes a value): for accumulators kept as text.
pub fn write_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    write_u64(out, v.unsigned_abs());
}

/// Parses ASCII decimal digits with an optional leading `-` or `+`; `None`
/// when empty, not all digits, or out of range (as [`Record::value_i64`]
/// reads a value): for accumulators kept as text, read without a copy.
///
/// Written for Wasm, where an overflow-checked or 64-bit-by-constant
/// multiplication becomes a 128-bit library call: at most 19 significant
/// digits accumulate in a `u64` without any check, then one range check.
pub fn parse_i64(b: &[u8]) -> Option<i64> {
    let (negative, mut digits) = match b.split_first()? {
        (b'-', rest) => (true, rest),
        (b'+', rest) => (false, rest),
        _ => (false, b),
    };
    if digits.is_empty() {
        return None;
    }
    if digits.len() > 19 {
        // Only leading zeros may make a long number fit.
        let first = digits.iter().position(|&d| d != b'0').unwrap_or(digits.len() - 1);
        digits = &digits[first..];
        if digits.len() > 19 {
            return None;
        }
    }
    let mut n: u64 = 0;
    for &d in digits {
        let d = d.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        n = n.wrapping_mul(10).wrapping_add(u64::from(d));
    }
    if negative {
        match n.cmp(&(1u64 << 63)) {
            std::cmp::Ordering::Less => Some(-(n as i64)),
            std::cmp::Ordering::Equal => Some(i64::MIN),
            std::cmp::Ordering::Greater => None,
        }
    } else {
        i64::try_from(n).ok()
    }
}

/// Appends `n` in decimal. Divides in `u32` where it can: a 64-bit division
/// by a constant is a 128-bit library call in Wasm.
fn write_u64(out: &mut Vec<u8>, n: u64) {
    const E8: u64 = 100_000_000;
    if let Ok(small) = u32::try_from(n) {
        return write_u32(out, small, 0);
    }
    // n < 2^64 < 10^20: at most three chunks of 8 digits.
    let (high, low) = (n / E8, (n % E8) as u32);
    if let Ok(high) = u32::try_from(high) {
        write_u32(out, high, 0);
    } else {
        write_u32(out, (high / E8) as u32, 0);
        write_u32(out, (high % E8) as u32, 8);
    }
    write_u32(out, low, 8);
}

/// Two ASCII digits for each of 0..100.
const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `n` in decimal, left-padded with zeros to `width` digits; two
/// digits per division.
fn write_u32(out: &mut Vec<u8>, mut n: u32, width: usize) {
    let mut digits = [b'0'; 10];
    let mut i = digits.len();
    while n >= 100 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n >= 10 {
        let pair = n as usize * 2;
        i -= 2;
        digits[i..i + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    } else if n > 0 {
        i -= 1;
        digits[i] = b'0' + n as u8;
    }
    let start = i.min(digits.len() - width.max(1));
    out.extend_from_slice(&digits[start..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_parse_like_std() {
        for s in [
            "0",
            "-0",
            "+7",
            "42",
            "-42",
            "9223372036854775807",
            "-9223372036854775808",
        ] {
            assert_eq!(parse_i64(s.as_bytes()), s.parse().ok(), "{s}");
        }
        for s in [
            "",
            "-",
            "+",
            "1x",
            " 1",
            "9223372036854775808",
            "-9223372036854775809",
            "1.0",
        ] {
            assert_eq!(parse_i64(s.as_bytes()), None, "{s}");
        }
    }

    #[test]
    fn integers_print_like_std() {
        let mut r = Record::new("old value that is long");
        for v in [
            0,
            7,
            -7,
            10,
            1234567890,
            4294967295,
            4294967296,
            100000000000000001,
            i64::MAX,
            i64::MIN,
        ] {
            r.set_value_i64(v);
            assert_eq!(r.value, v.to_string().into_bytes());
            assert_eq!(r.value_i64().unwrap(), v);
        }
        assert!(
            Record::new("x")
                .value_i64()
                .unwrap_err()
                .message()
                .contains("not a 64-bit integer")
        );
    }
}
