//! The time an operator with timers has reached (a window, a join): the
//! watermark it has seen, and how far its timers have fired.

/// The time of an operator and the timers due as it moves.
#[derive(Debug, Clone, Copy)]
pub struct EventTime {
    watermark: i64,
    /// Every timer at or before this has fired.
    fired_upto: i64,
}

impl Default for EventTime {
    fn default() -> Self {
        Self {
            watermark: i64::MIN,
            fired_upto: i64::MIN,
        }
    }
}

impl EventTime {
    /// The time reached last.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Moves to `watermark` when it is later; then the times of the timers
    /// now due, `from..=upto` (timers are only ever registered after the
    /// time reached, so the earlier ones all fired).
    pub fn advance(&mut self, watermark: i64) -> Option<(i64, i64)> {
        if watermark <= self.watermark {
            return None;
        }
        self.watermark = watermark;
        let from = self.fired_upto.saturating_add(1);
        self.fired_upto = watermark;
        Some((from, watermark))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_timer_time_is_due_once_as_the_watermark_moves() {
        let mut t = EventTime::default();
        assert_eq!(t.advance(5), Some((i64::MIN + 1, 5)));
        assert_eq!(t.advance(5), None);
        assert_eq!(t.advance(3), None);
        assert_eq!(t.advance(9), Some((6, 9)));
        assert_eq!(t.advance(i64::MAX), Some((10, i64::MAX)));
        assert_eq!(t.advance(i64::MAX), None);
        assert_eq!(t.watermark(), i64::MAX);
    }
}
