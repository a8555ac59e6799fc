//! The aligning merge at the exit of a parallel stage (contract C1).
//!
//! Records pass straight through. A barrier or end-of-stream from one worker
//! holds that worker back until every worker delivered the same marker; then
//! the marker leaves once and all workers resume, so no record overtakes a
//! pending barrier. Watermarks leave as the minimum over the workers.

use super::Message;
use super::{EdgeReceiver, EdgeSender, Shutdown};
use crate::metrics::StageStats;
use std::sync::atomic::Ordering;
use std::time::Duration;

const ABORT_POLL: Duration = Duration::from_millis(50);

/// Merges the workers' outputs into `out` until every input is closed.
pub fn merge_aligned(inputs: Vec<EdgeReceiver>, out: EdgeSender, shutdown: &Shutdown, stats: &StageStats) {
    let n = inputs.len();
    let mut open = vec![true; n];
    let mut holding = vec![false; n];
    let mut pending: Option<Message> = None;
    let mut watermarks = vec![i64::MIN; n];
    let mut emitted_watermark = i64::MIN;
    let mut clocks = vec![i64::MIN; n];
    let mut emitted_clock = i64::MIN;
    loop {
        if pending.is_some() && (0..n).all(|i| holding[i] || !open[i]) {
            let marker = pending.take().expect("checked above");
            holding.iter_mut().for_each(|h| *h = false);
            if open.iter().all(|&o| o) {
                if out.send(marker).is_err() {
                    return;
                }
            } else {
                // A worker stopped before delivering it: the pipeline is
                // failing, and an incomplete barrier must not leave.
                tracing::debug!(stage = %stats.name, ?marker, "dropping a marker a stopped worker never delivered");
            }
        }
        let waiting: Vec<usize> = (0..n).filter(|&i| open[i] && !holding[i]).collect();
        if waiting.is_empty() {
            return;
        }
        let selector = waiting.iter().fold(flume::Selector::new(), |sel, &i| {
            sel.recv(inputs[i].channel(), move |r| (i, r.ok()))
        });
        let Ok((i, msg)) = selector.wait_timeout(ABORT_POLL) else {
            if shutdown.is_aborted() {
                return;
            }
            continue;
        };
        if msg.is_some() {
            inputs[i].took();
        }
        match msg {
            None => open[i] = false,
            Some(Message::Watermark(w)) => {
                watermarks[i] = watermarks[i].max(w);
                let min = (0..n)
                    .filter(|&j| open[j])
                    .map(|j| watermarks[j])
                    .min()
                    .unwrap_or(w);
                if min > emitted_watermark {
                    emitted_watermark = min;
                    if out.send(Message::Watermark(min)).is_err() {
                        return;
                    }
                }
            }
            Some(Message::ProcessingTime(t)) => {
                clocks[i] = clocks[i].max(t);
                let min = (0..n).filter(|&j| open[j]).map(|j| clocks[j]).min().unwrap_or(t);
                if min > emitted_clock {
                    emitted_clock = min;
                    if out.send(Message::ProcessingTime(min)).is_err() {
                        return;
                    }
                }
            }
            Some(marker) if marker.is_aligned_marker() => {
                holding[i] = true;
                pending = Some(marker);
            }
            Some(records) => {
                if let Message::Records(r) = &records {
                    stats.records_out.fetch_add(r.len() as u64, Ordering::Relaxed);
                }
                if out.send(records).is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::Barrier;
    use super::*;
    use crate::record::Record;
    use crate::runtime::edge;

    fn records(v: &'static str) -> Message {
        Message::records(vec![Record::new(None, v, 0)])
    }

    /// Worker 0 delivers the barrier at once, worker 1 only after a record:
    /// the record must leave before the barrier, and worker 0's post-barrier
    /// record after it.
    #[test]
    fn no_record_overtakes_a_pending_barrier() {
        let shutdown = Shutdown::new();
        let (tx0, rx0) = edge("w0".into(), 8, &shutdown);
        let (tx1, rx1) = edge("w1".into(), 8, &shutdown);
        let (out_tx, out_rx) = edge("out".into(), 64, &shutdown);
        let barrier = Message::Barrier(Barrier { id: 1 });
        tx0.send(barrier.clone()).unwrap();
        tx0.send(records("after")).unwrap();
        tx1.send(records("before")).unwrap();
        tx1.send(Message::Watermark(5)).unwrap();
        tx0.send(Message::Watermark(7)).unwrap();
        tx1.send(barrier.clone()).unwrap();
        drop((tx0, tx1));
        let stats = StageStats::new("s");
        merge_aligned(vec![rx0, rx1], out_tx, &shutdown, &stats);
        let got: Vec<Message> = std::iter::from_fn(|| out_rx.recv()).collect();
        let pos = |m: &Message| got.iter().position(|g| g == m).unwrap();
        assert_eq!(got.iter().filter(|m| **m == barrier).count(), 1);
        assert!(pos(&records("before")) < pos(&barrier));
        assert!(pos(&records("after")) > pos(&barrier));
        assert!(got.contains(&Message::Watermark(5)));
        assert!(
            !got.contains(&Message::Watermark(7)),
            "min over workers is 5 until worker 1 advances"
        );
    }
}
