//! The progress display of a bounded run (a file, a bounded generator) on
//! a terminal: records and bytes done of the total, the rate, the time
//! left. Off when stderr is not a terminal, and for unbounded sources.

use crate::connectors::Progress;
use crate::metrics::Telemetry;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the display is refreshed.
const REFRESH: Duration = Duration::from_millis(200);

/// A running display; dropping it clears it.
pub struct ProgressDisplay {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressDisplay {
    /// Shows the progress of the run `telemetry` measures while it is
    /// bounded, when stderr is a terminal.
    pub fn start(telemetry: Arc<Telemetry>) -> Option<Self> {
        if !std::io::stderr().is_terminal() {
            return None;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || show(&telemetry, &stopped))
            .ok()?;
        Some(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ProgressDisplay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What the bar counts: bytes when the source knows their total, else
/// records when it knows theirs.
fn position(p: &Progress) -> Option<(u64, u64, &'static str)> {
    match (p.bytes, p.bytes_total, p.records_total) {
        (Some(done), Some(total), _) => Some((done, total, "bytes")),
        (_, _, Some(total)) => Some((p.records, total, "records")),
        _ => None,
    }
}

fn show(telemetry: &Telemetry, stop: &AtomicBool) {
    let mut bar: Option<ProgressBar> = None;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(REFRESH);
        let Some(p) = telemetry.source.progress() else {
            continue;
        };
        let Some((done, total, unit)) = position(&p) else {
            // Unbounded: nothing to show.
            return;
        };
        let bar = bar.get_or_insert_with(|| {
            let template = if unit == "bytes" {
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}"
            } else {
                "{bar:40} {human_pos}/{human_len} records {per_sec} ETA {eta}"
            };
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            bar
        });
        bar.set_length(total);
        bar.set_position(done.min(total));
        if unit == "bytes" {
            bar.set_message(format!("{} records", p.records));
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_bytes_when_known_else_records_else_nothing() {
        let file = Progress {
            records: 10,
            records_total: None,
            bytes: Some(100),
            bytes_total: Some(400),
        };
        assert_eq!(position(&file), Some((100, 400, "bytes")));
        let generator = Progress {
            records: 10,
            records_total: Some(50),
            ..Progress::default()
        };
        assert_eq!(position(&generator), Some((10, 50, "records")));
        assert_eq!(position(&Progress::default()), None, "unbounded");
    }
}
