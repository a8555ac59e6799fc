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

/// The key groups worker `worker` of `workers` owns (out of
/// `key_groups`): those [`worker_of`] gives it, one contiguous range. In
/// cluster mode a keyed task is such a worker, of as many workers as the
/// repartition topic has partitions.
pub fn groups_of_worker(worker: usize, key_groups: u32, workers: usize) -> std::ops::Range<u32> {
    // The first group g with g · workers / key_groups ≥ w: ⌈w · key_groups / workers⌉.
    let first = |w: usize| (w as u64 * u64::from(key_groups)).div_ceil(workers as u64) as u32;
    first(worker)..first(worker + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_workers_range_holds_exactly_the_groups_it_owns() {
        for key_groups in [1u32, 7, 128, 32768] {
            for workers in [1usize, 2, 3, 6, 7, 128] {
                let mut next = 0;
                for w in 0..workers {
                    let range = groups_of_worker(w, key_groups, workers);
                    assert_eq!(
                        range.start, next,
                        "contiguous: {key_groups} groups, {workers} workers"
                    );
                    assert!(range.clone().all(|g| worker_of(g, key_groups, workers) == w));
                    next = range.end;
                }
                assert_eq!(next, key_groups, "every group owned");
            }
        }
    }

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
