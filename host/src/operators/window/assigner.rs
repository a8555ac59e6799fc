//! Which windows a record belongs to.

/// A window `[start, end)` of event time, in ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Window {
    /// First instant inside (inclusive).
    pub start: i64,
    /// First instant after (exclusive).
    pub end: i64,
}

impl Window {
    /// The last instant inside: when a watermark reaches it, the window is
    /// complete.
    pub fn max_timestamp(&self) -> i64 {
        self.end - 1
    }

    /// Session windows merge when they overlap or touch.
    pub fn touches(&self, other: &Window) -> bool {
        self.start <= other.end && other.start <= self.end
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &Window) -> Window {
        Window {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// How records are grouped into windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assigner {
    /// Fixed, non-overlapping windows of `size` ms, aligned to the epoch.
    Tumbling {
        /// Window length, ms.
        size: i64,
    },
    /// Windows of `size` ms starting every `slide` ms (a record is in
    /// `size / slide` of them).
    Sliding {
        /// Window length, ms.
        size: i64,
        /// Distance between window starts, ms.
        slide: i64,
    },
    /// Per key, records closer than `gap` ms to each other share a window.
    Session {
        /// Inactivity that closes a session, ms.
        gap: i64,
    },
}

impl Assigner {
    /// The windows a record at `ts` belongs to (a session record's own
    /// window, before merging), oldest first; computed as iterated, with no
    /// allocation.
    pub fn assign(&self, ts: i64) -> Windows {
        let (size, slide) = match *self {
            Assigner::Tumbling { size } => (size, size),
            Assigner::Sliding { size, slide } => (size, slide),
            Assigner::Session { gap } => {
                return Windows {
                    next: Some(ts),
                    last: ts,
                    size: gap,
                    slide: 1,
                };
            }
        };
        // Aligned starts in (ts - size, ts]: the last is the aligned start
        // at or before `ts`, the first the aligned start after `ts - size`.
        // (First after last, and no window, when `ts` falls in a gap
        // between windows that slide further than their size.)
        let last = ts.saturating_sub(ts.rem_euclid(slide));
        let earliest = ts.saturating_sub(size);
        let first = earliest
            .saturating_sub(earliest.rem_euclid(slide))
            .saturating_add(slide);
        Windows {
            next: Some(first),
            last,
            size,
            slide,
        }
    }

    /// Whether windows of a key merge (sessions).
    pub fn is_merging(&self) -> bool {
        matches!(self, Assigner::Session { .. })
    }
}

/// The windows of one record, oldest first (see [`Assigner::assign`]).
#[derive(Debug, Clone)]
pub struct Windows {
    next: Option<i64>,
    last: i64,
    size: i64,
    slide: i64,
}

impl Iterator for Windows {
    type Item = Window;

    fn next(&mut self) -> Option<Window> {
        let start = self.next.filter(|&start| start <= self.last)?;
        self.next = start.checked_add(self.slide);
        Some(Window {
            start,
            end: start.saturating_add(self.size),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn tumbling_windows_align_to_the_epoch() {
        let a = Assigner::Tumbling { size: 10 };
        let assign = |ts| a.assign(ts).collect::<Vec<_>>();
        assert_eq!(assign(0), vec![Window { start: 0, end: 10 }]);
        assert_eq!(assign(19), vec![Window { start: 10, end: 20 }]);
        assert_eq!(assign(-1), vec![Window { start: -10, end: 0 }]);
    }

    proptest! {
        #[test]
        fn sliding_windows_are_exactly_those_containing_the_record(ts in -1000i64..1000, slide in 1i64..20, k in 1i64..5) {
            let size = slide * k + (ts.rem_euclid(3)) ;
            let a = Assigner::Sliding { size, slide };
            let got: Vec<Window> = a.assign(ts).collect();
            let expected: Vec<Window> = (-3000..3000)
                .filter(|s: &i64| s.rem_euclid(slide) == 0)
                .map(|start| Window { start, end: start + size })
                .filter(|w| w.start <= ts && ts < w.end)
                .collect();
            prop_assert_eq!(got, expected);
        }
    }
}
