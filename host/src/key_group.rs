//! Key groups: the unit in which keyed state is split over workers and
//! restored at another parallelism. A key's group is its hash modulo the
//! pipeline's number of key groups (its maximum parallelism); each worker
//! owns a contiguous range of groups.

/// The key group of `key`, out of `key_groups`.
pub fn of_key(key: &[u8], key_groups: u32) -> u32 {
    (xxhash_rust::xxh3::xxh3_64(key) % u64::from(key_groups)) as u32
}

/// The worker that owns key group `group` out of `key_groups`, with
/// `workers` workers.
pub fn worker_of(group: u32, key_groups: u32, workers: usize) -> usize {
    (group as usize * workers) / key_groups as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_groups_cover_workers_evenly_and_contiguously() {
        let owners: Vec<usize> = (0..128).map(|g| worker_of(g, 128, 3)).collect();
        assert_eq!(owners[0], 0);
        assert_eq!(owners[127], 2);
        assert!(owners.windows(2).all(|w| w[0] <= w[1]));
        for w in 0..3 {
            let n = owners.iter().filter(|&&o| o == w).count();
            assert!((42..=43).contains(&n), "worker {w} owns {n} groups");
        }
    }
}
