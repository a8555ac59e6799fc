//! A source's optional rate: at most so many records per second, counted
//! from when it started (or resumed).

use std::time::{Duration, Instant};

/// Paces a source to `per_second` records per second.
#[derive(Debug, Clone)]
pub struct RateLimit {
    per_second: u64,
    started: Instant,
    produced: u64,
}

impl RateLimit {
    /// A limit of `per_second` records per second; `None` for no limit (or 0).
    pub fn new(per_second: Option<u64>) -> Option<Self> {
        per_second.filter(|&r| r > 0).map(|per_second| Self {
            per_second,
            started: Instant::now(),
            produced: 0,
        })
    }

    /// How many of `wanted` records may go now (0: wait; it slept briefly).
    pub fn allow(&mut self, wanted: usize) -> usize {
        let allowed = (self.started.elapsed().as_secs_f64() * self.per_second as f64) as u64;
        if allowed <= self.produced {
            std::thread::sleep(Duration::from_millis(1));
            return 0;
        }
        let n = (wanted as u64).min(allowed - self.produced);
        self.produced += n;
        n as usize
    }

    /// Starts counting afresh (after a seek).
    pub fn restart(&mut self) {
        self.started = Instant::now();
        self.produced = 0;
    }
}
