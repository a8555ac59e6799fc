//! How operators lay out their state entries. Every entry of a key starts
//! with its key group, so a worker's state splits by key group (restoring
//! at another parallelism moves whole key-group ranges); timers sit apart,
//! ordered by time, so the due ones are one range scan.
//!
//! ```text
//! keyed entry := key_group:u16 op:u16 key_len:u32 key suffix…
//! timer       := 0xFFFF op:u16 time:i64 key_group:u16 key_len:u32 key payload…
//! ```
//! Integers are big-endian; times have their sign bit flipped so that bytes
//! sort like the numbers.

/// The first two bytes of every timer entry: a key group no pipeline has
/// (`max_parallelism` is at most 32768).
pub const TIMERS: u16 = 0xFFFF;

/// The prefix of everything operator `op` keeps for `key`.
pub fn keyed(key_group: u16, op: u16, key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + key.len() + 16);
    keyed_into(&mut k, key_group, op, key);
    k
}

/// [`keyed`] appended to `k` (a buffer reused from record to record).
pub fn keyed_into(k: &mut Vec<u8>, key_group: u16, op: u16, key: &[u8]) {
    k.extend_from_slice(&key_group.to_be_bytes());
    k.extend_from_slice(&op.to_be_bytes());
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
}

/// The key group of `key` out of `key_groups`, as stored in entries.
pub fn group(key: &[u8], key_groups: u32) -> u16 {
    crate::key_group::of_key(key, key_groups) as u16
}

/// A timer entry of operator `op` at `time` for `key`, with `payload`.
pub fn timer(op: u16, time: i64, key_group: u16, key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut k = timers_until(op, time);
    k.extend_from_slice(&key_group.to_be_bytes());
    k.extend_from_slice(&(key.len() as u32).to_be_bytes());
    k.extend_from_slice(key);
    k.extend_from_slice(payload);
    k
}

/// The start of operator `op`'s timers at `time`: timers before it sort
/// before this.
pub fn timers_until(op: u16, time: i64) -> Vec<u8> {
    let mut k = Vec::with_capacity(32);
    k.extend_from_slice(&TIMERS.to_be_bytes());
    k.extend_from_slice(&op.to_be_bytes());
    k.extend_from_slice(&sortable(time));
    k
}

/// The parts of a timer entry: time, key group, key, payload.
pub fn parse_timer(entry: &[u8]) -> Option<(i64, u16, &[u8], &[u8])> {
    let time = unsortable(entry.get(4..12)?)?;
    let key_group = u16::from_be_bytes(entry.get(12..14)?.try_into().ok()?);
    let len = u32::from_be_bytes(entry.get(14..18)?.try_into().ok()?) as usize;
    let key = entry.get(18..18 + len)?;
    Some((time, key_group, key, &entry[18 + len..]))
}

/// A time as 8 bytes that sort like the numbers.
pub fn sortable(t: i64) -> [u8; 8] {
    ((t as u64) ^ (1 << 63)).to_be_bytes()
}

/// The time of 8 bytes made by [`sortable`].
pub fn unsortable(b: &[u8]) -> Option<i64> {
    Some((u64::from_be_bytes(b.try_into().ok()?) ^ (1 << 63)) as i64)
}

/// The smallest key after every key that starts with `prefix`; `None` when
/// there is none (the prefix is all `0xFF`).
pub fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn times_sort_like_numbers(a: i64, b: i64) {
            prop_assert_eq!(a.cmp(&b), sortable(a).cmp(&sortable(b)));
            prop_assert_eq!(unsortable(&sortable(a)), Some(a));
        }

        #[test]
        fn timers_round_trip_and_sort_by_time(t1: i64, t2: i64, key in any::<Vec<u8>>(), kg in 0u16..32768) {
            let a = timer(3, t1, kg, &key, b"p");
            prop_assert_eq!(parse_timer(&a), Some((t1, kg, key.as_slice(), &b"p"[..])));
            let b = timer(3, t2, kg, &key, b"p");
            if t1 < t2 {
                prop_assert!(a < b);
            }
            prop_assert!(a < timers_until(3, t1.saturating_add(1)) || t1 == i64::MAX);
        }
    }

    #[test]
    fn prefix_end_bounds_every_key_with_the_prefix() {
        assert_eq!(prefix_end(&[1, 2]), Some(vec![1, 3]));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF]), None);
        let p = keyed(7, 1, b"k");
        let mut inside = p.clone();
        inside.extend_from_slice(&[0xFF; 9]);
        assert!(inside < prefix_end(&p).unwrap());
    }
}
