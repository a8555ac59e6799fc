//! What the joins emit: a joined pair as one JSON document
//! `{"left": …, "right": …}` (a side that is not JSON as a JSON string),
//! an unmatched record of an outer join with `null` for its partner, and a
//! stream record with its table row as `{"stream": …, "table": …}`.

use crate::record::Record;
use bytes::Bytes;

/// The side of a two-input operator a record came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Side {
    /// Input 0.
    Left = 0,
    /// Input 1.
    Right = 1,
}

impl Side {
    /// The side of input `input`.
    pub fn of_input(input: usize) -> Self {
        if input == 0 { Side::Left } else { Side::Right }
    }

    /// The other side.
    pub fn other(self) -> Self {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }

    /// The side stored as `b`.
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Side::Left),
            1 => Some(Side::Right),
            _ => None,
        }
    }

    /// `mine` and `theirs` as (left, right), `mine` being of this side.
    pub fn order<T>(self, mine: T, theirs: T) -> (T, T) {
        match self {
            Side::Left => (mine, theirs),
            Side::Right => (theirs, mine),
        }
    }
}

/// Which records a join emits without a partner (`join` in a manifest).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JoinKind {
    /// None: only joined pairs.
    #[default]
    Inner,
    /// The left ones.
    Left,
    /// The right ones.
    Right,
    /// Both sides'.
    Full,
}

impl JoinKind {
    /// Whether an unmatched record of `side` is emitted alone.
    pub fn keeps(self, side: Side) -> bool {
        matches!(
            (self, side),
            (JoinKind::Full, _) | (JoinKind::Left, Side::Left) | (JoinKind::Right, Side::Right)
        )
    }
}

/// The joined record of `left` and `right` (value and time each): the key,
/// both documents, the later time.
pub fn joined(key: &Option<Bytes>, left: (&[u8], i64), right: (&[u8], i64)) -> Record {
    let mut v = Vec::with_capacity(left.0.len() + right.0.len() + 20);
    v.extend_from_slice(b"{\"left\":");
    push_json(&mut v, left.0);
    v.extend_from_slice(b",\"right\":");
    push_json(&mut v, right.0);
    v.push(b'}');
    Record::new(key.clone(), v, left.1.max(right.1))
}

/// A record of `side` that never joined, with `null` for its partner.
pub fn unmatched(side: Side, key: &Option<Bytes>, value: &[u8], time: i64) -> Record {
    let mut v = Vec::with_capacity(value.len() + 20);
    v.extend_from_slice(b"{\"left\":");
    match side {
        Side::Left => {
            push_json(&mut v, value);
            v.extend_from_slice(b",\"right\":null}");
        }
        Side::Right => {
            v.extend_from_slice(b"null,\"right\":");
            push_json(&mut v, value);
            v.push(b'}');
        }
    }
    Record::new(key.clone(), v, time)
}

/// A stream record (`value` under `key` at `time`) joined with its table
/// `row`: `{"stream": …, "table": …}`, `null` for no row.
pub fn with_row(key: &Option<Bytes>, value: &[u8], time: i64, row: Option<&[u8]>) -> Record {
    let mut v = Vec::with_capacity(value.len() + row.map_or(4, <[u8]>::len) + 22);
    v.extend_from_slice(b"{\"stream\":");
    push_json(&mut v, value);
    v.extend_from_slice(b",\"table\":");
    match row {
        Some(row) => push_json(&mut v, row),
        None => v.extend_from_slice(b"null"),
    }
    v.push(b'}');
    Record::new(key.clone(), v, time)
}

/// Appends `value` as JSON: as it is when it is a JSON document, else as a
/// string of its text.
pub(super) fn push_json(out: &mut Vec<u8>, value: &[u8]) {
    if is_json_integer(value) || serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok() {
        out.extend_from_slice(value);
    } else {
        let text = serde_json::Value::from(String::from_utf8_lossy(value));
        out.extend_from_slice(text.to_string().as_bytes());
    }
}

/// Whether `value` is a JSON integer (`0`, `-12`, `345`): the common case
/// of a record's value, told without a parser.
fn is_json_integer(value: &[u8]) -> bool {
    match value.strip_prefix(b"-").unwrap_or(value) {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Record) -> String {
        String::from_utf8(r.value.to_vec()).unwrap()
    }

    #[test]
    fn pairs_hold_both_documents_and_text_becomes_a_string() {
        let key = Some(Bytes::from_static(b"k"));
        let r = joined(&key, (br#"{"a":1}"#, 5), (b"plain \"text\"", 9));
        assert_eq!(text(&r), r#"{"left":{"a":1},"right":"plain \"text\""}"#);
        assert_eq!((r.timestamp, r.key), (9, key.clone()));
        let r = unmatched(Side::Right, &key, b"7", 3);
        assert_eq!(text(&r), r#"{"left":null,"right":7}"#);
        assert_eq!(r.timestamp, 3);
    }

    #[test]
    fn integers_are_told_without_a_parser() {
        for text in ["0", "-0", "7", "-12", "345", "18446744073709551616"] {
            assert!(is_json_integer(text.as_bytes()), "{text:?}");
            assert!(
                serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok(),
                "{text:?}"
            );
        }
        for text in ["01", "-", "", "1.5", "1e3", "- 1", "12a", "00", "+1", " 1"] {
            assert!(!is_json_integer(text.as_bytes()), "{text:?}");
        }
    }

    #[test]
    fn each_kind_keeps_its_sides() {
        let kept = |k: JoinKind| (k.keeps(Side::Left), k.keeps(Side::Right));
        assert_eq!(kept(JoinKind::Inner), (false, false));
        assert_eq!(kept(JoinKind::Left), (true, false));
        assert_eq!(kept(JoinKind::Right), (false, true));
        assert_eq!(kept(JoinKind::Full), (true, true));
    }
}
