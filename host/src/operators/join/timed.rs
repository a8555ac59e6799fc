//! How the joins lay out a key's entries: a tag byte and a time after the
//! key, `tag:u8 time:sortable`, so a key's entries of one tag lie in time
//! order and a time range of them is one scan. Their timers carry the same
//! nine bytes as payload, naming the entry they are for.

use crate::state::{KeyedState, keys};

/// `tag` and `time` as they follow the key (and make a timer's payload).
pub fn suffix(tag: u8, time: i64) -> [u8; 9] {
    let mut s = [tag; 9];
    s[1..].copy_from_slice(&keys::sortable(time));
    s
}

/// The tag and time that end `bytes` (an entry, or a timer's payload).
pub fn parse(bytes: &[u8]) -> Option<(u8, i64)> {
    let s = &bytes[bytes.len().checked_sub(9)?..];
    Some((s[0], keys::unsortable(&s[1..])?))
}

/// The bounds (`start..end`) of the entries of `key` tagged `tag` at times
/// in `from..=upto`.
pub fn range(state: &KeyedState, kg: u16, key: &[u8], tag: u8, from: i64, upto: i64) -> (Vec<u8>, Vec<u8>) {
    let start = state.entry(kg, key, &suffix(tag, from));
    let end = match upto.checked_add(1) {
        Some(t) => state.entry(kg, key, &suffix(tag, t)),
        None => keys::prefix_end(&state.entry(kg, key, &[tag])).expect("a tag is below 0xFF"),
    };
    (start, end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::MemoryBackend;

    #[test]
    fn a_range_holds_the_entries_of_its_tag_and_times_only() {
        let mut state = KeyedState::new(Box::new(MemoryBackend::default()), 1, 128);
        let kg = state.key_group(b"k");
        for (tag, time) in [(1, i64::MIN), (1, -3), (1, 4), (1, i64::MAX), (2, 0), (0, 0)] {
            let e = state.entry(kg, b"k", &suffix(tag, time));
            state.put(&e, &[]).unwrap();
        }
        let times = |from, upto| {
            let (start, end) = range(&state, kg, b"k", 1, from, upto);
            let mut seen = Vec::new();
            state
                .scan(&start, &end, &mut |k, _| {
                    seen.push(parse(k).unwrap());
                    true
                })
                .unwrap();
            seen
        };
        assert_eq!(times(-3, 4), [(1, -3), (1, 4)]);
        assert_eq!(
            times(i64::MIN, i64::MAX),
            [(1, i64::MIN), (1, -3), (1, 4), (1, i64::MAX)]
        );
        assert_eq!(parse(&suffix(7, -1)), Some((7, -1)));
        assert_eq!(parse(&[1, 2]), None);
    }
}
