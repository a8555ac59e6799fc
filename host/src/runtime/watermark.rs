//! Watermarks with bounded out-of-orderness, per source split: a split's
//! watermark is the largest event time it produced minus the allowed delay
//! (minus one); the source's is the minimum over its active splits, so a
//! slow split holds event time back, while a split quiet for longer than
//! the idle timeout does not stall it (every split quiet: the largest over
//! all of them).

use std::time::{Duration, Instant};

/// Tracks the watermark of a source with one or more splits.
#[derive(Debug)]
pub struct WatermarkGenerator {
    delay: i64,
    idle_timeout: Option<Duration>,
    splits: Vec<Split>,
    emitted: i64,
}

#[derive(Debug, Clone, Copy)]
struct Split {
    max_timestamp: i64,
    last_active: Instant,
}

impl WatermarkGenerator {
    /// A generator for `splits` splits that allows records up to `delay` ms
    /// out of order; a split idle for `idle_timeout` is ignored until it
    /// produces again.
    pub fn new(splits: usize, delay: Duration, idle_timeout: Option<Duration>) -> Self {
        let now = Instant::now();
        Self {
            delay: i64::try_from(delay.as_millis()).unwrap_or(i64::MAX),
            idle_timeout,
            splits: vec![
                Split {
                    max_timestamp: i64::MIN,
                    last_active: now,
                };
                splits.max(1)
            ],
            emitted: i64::MIN,
        }
    }

    /// A record of `split` has event time `ts`. A split past the known
    /// ones (a partition added while running) joins them.
    pub fn observe(&mut self, split: usize, ts: i64) {
        if split >= self.splits.len() {
            let new = Split {
                max_timestamp: i64::MIN,
                last_active: Instant::now(),
            };
            self.splits.resize(split + 1, new);
        }
        let s = &mut self.splits[split];
        s.max_timestamp = s.max_timestamp.max(ts);
        s.last_active = Instant::now();
    }

    /// The watermark to emit now, if it advanced since the last one.
    pub fn advance(&mut self) -> Option<i64> {
        let now = Instant::now();
        let active = self.splits.iter().filter(|s| {
            self.idle_timeout
                .is_none_or(|t| now.duration_since(s.last_active) < t)
        });
        // Every split idle: nothing holds event time back, so it moves to
        // the largest time any split produced (as in cluster mode, and as
        // Flink's watermark valve does).
        let min = match active.map(|s| s.max_timestamp).min() {
            Some(min) => min,
            None => self.splits.iter().map(|s| s.max_timestamp).max()?,
        };
        if min == i64::MIN {
            return None;
        }
        let wm = min.saturating_sub(self.delay).saturating_sub(1);
        (wm > self.emitted).then(|| {
            self.emitted = wm;
            wm
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watermark_trails_the_largest_time_by_the_delay() {
        let mut g = WatermarkGenerator::new(1, Duration::from_millis(10), None);
        assert_eq!(g.advance(), None);
        g.observe(0, 100);
        assert_eq!(g.advance(), Some(89));
        g.observe(0, 95);
        assert_eq!(g.advance(), None, "never goes back");
        g.observe(0, 120);
        assert_eq!(g.advance(), Some(109));
    }

    #[test]
    fn the_slowest_split_holds_it_back_until_it_is_idle() {
        let mut g = WatermarkGenerator::new(2, Duration::ZERO, Some(Duration::from_millis(50)));
        g.observe(0, 100);
        assert_eq!(g.advance(), None, "split 1 has produced nothing yet");
        g.observe(1, 40);
        assert_eq!(g.advance(), Some(39));
        std::thread::sleep(Duration::from_millis(60));
        g.observe(0, 200);
        assert_eq!(g.advance(), Some(199), "split 1 went idle");
    }

    #[test]
    fn every_split_idle_moves_it_to_the_largest_time_produced() {
        let mut g = WatermarkGenerator::new(2, Duration::ZERO, Some(Duration::from_millis(50)));
        g.observe(0, 100);
        g.observe(1, 40);
        assert_eq!(g.advance(), Some(39));
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(g.advance(), Some(99), "both idle: split 0's time holds");
        g.observe(1, 60);
        assert_eq!(g.advance(), None, "split 1 back, behind: it never goes back");
    }
}
