//! The aligning merge of several inputs into one stream (contract C1): at
//! the exit of a parallel stage (its workers) and at a union (several
//! streams).
//!
//! Records pass straight through. A barrier or swap point from one input
//! holds that input back until every input still running delivered the
//! same marker; then the marker leaves once and all inputs resume, so no
//! record overtakes a pending barrier. Watermarks and processing time leave
//! as the minimum over the inputs still running.
//!
//! How an input's end of stream counts depends on what is merged ([`Ends`]):
//! the workers of one stage all end together, so their end of stream is
//! aligned like a barrier; the streams of a union end one by one, and a
//! finished stream no longer holds back markers, watermarks or the end.

use super::Message;
use super::{EdgeReceiver, Outlet, Shutdown};
use crate::metrics::StageStats;
use std::sync::atomic::Ordering;
use std::time::Duration;

const ABORT_POLL: Duration = Duration::from_millis(50);

/// How the inputs of a merge end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ends {
    /// The workers of one parallel stage: each delivers the same markers,
    /// end of stream included, which leaves once after all delivered it.
    Together,
    /// The streams of a union: an end of stream finishes its input alone;
    /// it leaves once every input finished.
    Separately,
}

/// Where an input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Input {
    /// Delivering records and markers.
    Running,
    /// Delivered the pending marker: held until every input did.
    Holding,
    /// Delivered its end of stream (a union's input): it takes no part until every input ended.
    Finished,
    /// Closed without an end of stream (a drain, or a failing stage).
    Closed,
}

/// The merge's state between two messages.
struct Aligner<'a> {
    inputs: Vec<Input>,
    /// The input number each input's records are tagged with (none: they
    /// leave untagged, one stream).
    tags: &'a [usize],
    ends: Ends,
    pending: Option<Message>,
    watermarks: Vec<i64>,
    emitted_watermark: i64,
    clocks: Vec<i64>,
    emitted_clock: i64,
    out: Outlet,
    stats: &'a StageStats,
}

/// The run cannot go on: the next stage is gone.
struct Stopped;

/// Merges `inputs` into `out` until every input is closed. With `tags`,
/// the records of input `i` leave as records of input number `tags[i]`
/// ([`Message::Input`]) for an operator telling its inputs apart.
pub fn merge_aligned(
    inputs: Vec<EdgeReceiver>,
    tags: &[usize],
    out: Outlet,
    ends: Ends,
    shutdown: &Shutdown,
    stats: &StageStats,
) {
    let n = inputs.len();
    let mut aligner = Aligner {
        inputs: vec![Input::Running; n],
        tags,
        ends,
        pending: None,
        watermarks: vec![i64::MIN; n],
        emitted_watermark: i64::MIN,
        clocks: vec![i64::MIN; n],
        emitted_clock: i64::MIN,
        out,
        stats,
    };
    loop {
        if aligner.release().is_err() {
            return;
        }
        let waiting: Vec<usize> = (0..n).filter(|&i| aligner.inputs[i] == Input::Running).collect();
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
        if let Some(m) = &msg {
            inputs[i].took(m);
        }
        if aligner.on_message(i, msg).is_err() {
            return;
        }
    }
}

impl Aligner<'_> {
    /// Lets the pending marker leave once no running input still owes it;
    /// after that, the end of stream once every input of a union finished.
    fn release(&mut self) -> Result<(), Stopped> {
        if self.pending.is_some() && !self.inputs.contains(&Input::Running) {
            let marker = self.pending.take().expect("checked above");
            for input in &mut self.inputs {
                if *input == Input::Holding {
                    *input = Input::Running;
                }
            }
            if self.inputs.contains(&Input::Closed) {
                // An input stopped before delivering it: the pipeline is
                // failing or draining, and an incomplete barrier must not
                // leave.
                tracing::debug!(stage = %self.stats.name, ?marker, "dropping a marker an input never delivered");
            } else {
                self.send(marker)?;
            }
        }
        if self.ends == Ends::Separately && self.inputs.iter().all(|&i| i == Input::Finished) {
            self.send(Message::EndOfStream)?;
            // What may follow every input's end (the last checkpoint's
            // barrier) is aligned over all of them again.
            self.inputs.fill(Input::Running);
        }
        Ok(())
    }

    /// Takes input `i`'s next message (`None`: it closed).
    fn on_message(&mut self, i: usize, msg: Option<Message>) -> Result<(), Stopped> {
        match msg {
            None => {
                self.inputs[i] = Input::Closed;
                self.send_times()
            }
            Some(Message::EndOfStream) if self.ends == Ends::Separately => {
                self.inputs[i] = Input::Finished;
                self.send_times()
            }
            Some(Message::Watermark(w)) => {
                self.watermarks[i] = self.watermarks[i].max(w);
                self.send_times()
            }
            Some(Message::ProcessingTime(t)) => {
                self.clocks[i] = self.clocks[i].max(t);
                self.send_times()
            }
            Some(marker) if marker.is_aligned_marker() => {
                self.inputs[i] = Input::Holding;
                self.pending = Some(marker);
                Ok(())
            }
            Some(records) => {
                if let Some(r) = records.batch() {
                    self.stats
                        .records_out
                        .fetch_add(r.len() as u64, Ordering::Relaxed);
                }
                match (records, self.tags.get(i)) {
                    (Message::Records(batch), Some(&tag)) => self.send(Message::Input(tag, batch)),
                    (records, _) => self.send(records),
                }
            }
        }
    }

    /// Sends the watermark and the processing time when their minimum over
    /// the inputs still taking part moved on.
    fn send_times(&mut self) -> Result<(), Stopped> {
        if let Some(w) = self.min_over_running(&self.watermarks)
            && w > self.emitted_watermark
        {
            self.emitted_watermark = w;
            self.send(Message::Watermark(w))?;
        }
        if let Some(t) = self.min_over_running(&self.clocks)
            && t > self.emitted_clock
        {
            self.emitted_clock = t;
            self.send(Message::ProcessingTime(t))?;
        }
        Ok(())
    }

    /// The minimum of `times` over the inputs running or holding; `None`
    /// when there is none.
    fn min_over_running(&self, times: &[i64]) -> Option<i64> {
        self.inputs
            .iter()
            .zip(times)
            .filter(|(input, _)| matches!(input, Input::Running | Input::Holding))
            .map(|(_, &t)| t)
            .min()
    }

    fn send(&self, msg: Message) -> Result<(), Stopped> {
        self.out.send(msg).map_err(|_| Stopped)
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

    fn barrier(id: u64) -> Message {
        Message::Barrier(Barrier { id })
    }

    /// Runs the merge over inputs holding `messages` (each closed after its
    /// messages); what it sent.
    fn merged(ends: Ends, messages: Vec<Vec<Message>>) -> Vec<Message> {
        let shutdown = Shutdown::new();
        let (out_tx, out_rx) = edge("out".into(), 64, &shutdown);
        let inputs = messages
            .into_iter()
            .enumerate()
            .map(|(i, msgs)| {
                let (tx, rx) = edge(format!("in{i}"), 16, &shutdown);
                msgs.into_iter().for_each(|m| tx.send(m).unwrap());
                rx
            })
            .collect();
        merge_aligned(inputs, &[], out_tx.into(), ends, &shutdown, &StageStats::new("s"));
        std::iter::from_fn(|| out_rx.recv()).collect()
    }

    fn position(got: &[Message], m: &Message) -> usize {
        got.iter().position(|g| g == m).unwrap()
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
        tx0.send(barrier(1)).unwrap();
        tx0.send(records("after")).unwrap();
        tx1.send(records("before")).unwrap();
        tx1.send(Message::Watermark(5)).unwrap();
        tx0.send(Message::Watermark(7)).unwrap();
        tx1.send(barrier(1)).unwrap();
        drop((tx0, tx1));
        let stats = StageStats::new("s");
        merge_aligned(
            vec![rx0, rx1],
            &[],
            out_tx.into(),
            Ends::Together,
            &shutdown,
            &stats,
        );
        let got: Vec<Message> = std::iter::from_fn(|| out_rx.recv()).collect();
        assert_eq!(got.iter().filter(|m| **m == barrier(1)).count(), 1);
        assert!(position(&got, &records("before")) < position(&got, &barrier(1)));
        assert!(position(&got, &records("after")) > position(&got, &barrier(1)));
        assert!(got.contains(&Message::Watermark(5)));
        assert!(
            !got.contains(&Message::Watermark(7)),
            "min over workers is 5 until worker 1 advances"
        );
    }

    #[test]
    fn workers_end_of_stream_leaves_once_after_every_worker_delivered_it() {
        let got = merged(
            Ends::Together,
            vec![
                vec![Message::EndOfStream],
                vec![records("last"), Message::EndOfStream],
            ],
        );
        assert_eq!(got, [records("last"), Message::EndOfStream]);
    }

    /// The first stream ends early: the barriers after its end align over
    /// the other stream alone, the watermark follows the other stream, and
    /// the end leaves once, after both ended.
    #[test]
    fn a_finished_union_input_no_longer_holds_back_barriers_watermarks_or_the_end() {
        let got = merged(
            Ends::Separately,
            vec![
                vec![
                    records("a1"),
                    Message::Watermark(10),
                    barrier(1),
                    records("a2"),
                    Message::EndOfStream,
                ],
                vec![
                    Message::Watermark(3),
                    records("b1"),
                    barrier(1),
                    Message::Watermark(50),
                    records("b2"),
                    barrier(2),
                    records("b3"),
                    Message::EndOfStream,
                ],
            ],
        );
        assert_eq!(got.iter().filter(|m| **m == barrier(1)).count(), 1);
        assert_eq!(got.iter().filter(|m| **m == barrier(2)).count(), 1);
        assert_eq!(got.iter().filter(|m| **m == Message::EndOfStream).count(), 1);
        assert_eq!(got.last(), Some(&Message::EndOfStream));
        for before in ["a1", "b1"] {
            assert!(position(&got, &records(before)) < position(&got, &barrier(1)));
        }
        for after in ["a2", "b2"] {
            assert!(position(&got, &records(after)) > position(&got, &barrier(1)));
        }
        assert!(position(&got, &records("b3")) > position(&got, &barrier(2)));
        // 10 is held back by the other stream's 3 until that one moves to 50;
        // after the first stream ended, 50 is the minimum.
        let watermarks: Vec<i64> = got
            .iter()
            .filter_map(|m| match m {
                Message::Watermark(w) => Some(*w),
                _ => None,
            })
            .collect();
        assert_eq!(watermarks.first(), Some(&3));
        assert!(watermarks.windows(2).all(|w| w[0] < w[1]), "{watermarks:?}");
        assert!(watermarks.contains(&50), "{watermarks:?}");
    }

    /// The last checkpoint's barrier follows the end of every input: it
    /// leaves once, after the end.
    #[test]
    fn a_barrier_after_every_union_inputs_end_leaves_once_after_the_end() {
        let got = merged(
            Ends::Separately,
            vec![
                vec![records("a1"), Message::EndOfStream, barrier(7)],
                vec![records("b1"), Message::EndOfStream, barrier(7)],
            ],
        );
        assert_eq!(got.iter().filter(|m| **m == Message::EndOfStream).count(), 1);
        assert_eq!(got.last(), Some(&barrier(7)));
        assert_eq!(got.iter().filter(|m| **m == barrier(7)).count(), 1);
    }

    #[test]
    fn a_union_input_closed_without_its_end_drops_the_pending_barrier_and_the_end() {
        let got = merged(
            Ends::Separately,
            vec![
                vec![records("a1")],
                vec![records("b1"), barrier(1), Message::EndOfStream],
            ],
        );
        assert!(!got.contains(&barrier(1)), "{got:?}");
        assert!(!got.contains(&Message::EndOfStream), "{got:?}");
        assert!(got.contains(&records("a1")) && got.contains(&records("b1")));
    }
}
