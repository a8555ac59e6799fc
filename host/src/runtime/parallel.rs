//! A parallel stage: a router spreads records over N workers (by key hash or
//! round robin), broadcasting markers to all; each worker runs its own chain;
//! an aligning merge emits each marker once (C1).

use super::Message;
use super::align::{Ends, merge_aligned};
use super::stage::{StageError, StageHandle, spawn_stage};
use super::worker::run_chain;
use super::{EdgeReceiver, EdgeSender, Outlet, Shutdown, edge};
use crate::batch::Batch;
use crate::key_group;
use crate::metrics::StageStats;
use crate::operators::Chain;
use crate::plan::Routing;
use std::sync::Arc;

/// How a parallel stage's router spreads records: by `routing`, except the
/// records of input `broadcast` (a global table's), which every worker gets.
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    /// By key or round robin.
    pub routing: Routing,
    /// The input every worker reads whole.
    pub broadcast: Option<usize>,
}

/// Spawns the router, the workers (each chain with its own counts) and the
/// merge of a parallel stage; each returned thread owns its edges and
/// closes them when done (C2).
pub fn spawn_parallel(
    stats: Arc<StageStats>,
    chains: Vec<(Chain, Arc<StageStats>)>,
    spread: Spread,
    input: EdgeReceiver,
    out: Outlet,
    internal_capacity: usize,
    shutdown: &Shutdown,
) -> std::io::Result<Vec<StageHandle>> {
    let name = stats.name.clone();
    let n = chains.len();
    let mut handles = Vec::with_capacity(n + 2);
    let mut to_workers = Vec::with_capacity(n);
    let mut from_workers = Vec::with_capacity(n);
    for (i, (chain, worker_stats)) in chains.into_iter().enumerate() {
        let (in_tx, in_rx) = edge(
            format!("{name} router -> worker {i}"),
            internal_capacity,
            shutdown,
        );
        let (out_tx, out_rx) = edge(format!("{name} worker {i} -> merge"), internal_capacity, shutdown);
        to_workers.push(in_tx);
        from_workers.push(out_rx);
        handles.push(spawn_stage(format!("{name}[{i}]"), move || {
            run_chain(chain, in_rx, out_tx.into(), worker_stats)
        })?);
    }
    let router_stats = stats.clone();
    let merge_shutdown = shutdown.clone();
    handles.push(spawn_stage(format!("{name} router"), move || {
        route(input, to_workers, spread, &router_stats)
    })?);
    handles.push(spawn_stage(format!("{name} merge"), move || {
        merge_aligned(from_workers, &[], out, Ends::Together, &merge_shutdown, &stats);
        Ok(())
    })?);
    Ok(handles)
}

fn route(
    input: EdgeReceiver,
    workers: Vec<EdgeSender>,
    Spread { routing, broadcast }: Spread,
    stats: &StageStats,
) -> Result<(), StageError> {
    let mut next = 0;
    while let Some(msg) = input.recv() {
        let sent = match msg {
            Message::Input(i, batch) if Some(i) == broadcast => {
                stats
                    .records_in
                    .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
                workers
                    .iter()
                    .all(|w| w.send(Message::Input(i, batch.clone())).is_ok())
            }
            Message::Records(batch) | Message::Output(_, batch) => {
                spread(batch, Message::Records, &workers, routing, &mut next, stats)
            }
            Message::Input(i, batch) => spread(
                batch,
                |b| Message::Input(i, b),
                &workers,
                routing,
                &mut next,
                stats,
            ),
            marker => workers.iter().all(|w| w.send(marker.clone()).is_ok()),
        };
        if !sent {
            return Ok(());
        }
    }
    Ok(())
}

/// Sends `batch` (as `wrap` makes it a message) to the workers as
/// `routing` says: whole to the `next` one in turn, or split by key; false
/// when a worker is gone.
fn spread(
    batch: Batch,
    wrap: impl Fn(Batch) -> Message,
    workers: &[EdgeSender],
    routing: Routing,
    next: &mut usize,
    stats: &StageStats,
) -> bool {
    let n = workers.len();
    stats
        .records_in
        .fetch_add(batch.len() as u64, std::sync::atomic::Ordering::Relaxed);
    match routing {
        Routing::RoundRobin => {
            let sent = workers[*next].send(wrap(batch)).is_ok();
            *next = (*next + 1) % n;
            sent
        }
        Routing::Hash { key_groups } => {
            let parts = batch.split_by_key(n, |key| {
                key_group::worker_of(key_group::of_key(key, key_groups), key_groups, n)
            });
            workers
                .iter()
                .zip(parts)
                .all(|(w, part)| part.is_empty() || w.send(wrap(part)).is_ok())
        }
    }
}

#[cfg(test)]
mod stage_tests {
    use super::super::Barrier;
    use super::*;
    use crate::failure::OperatorError;
    use crate::operators::Operator;
    use crate::record::Record;
    use bytes::Bytes;

    /// Passes records through; the point is the stage around it.
    struct Pass;

    impl Operator for Pass {
        fn name(&self) -> &str {
            "pass"
        }

        fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
            Ok(input)
        }
    }

    fn rec(i: u64) -> Record {
        Record::new(
            Some(Bytes::from(format!("k{}", i % 17))),
            Bytes::from(i.to_string()),
            i as i64,
        )
    }

    /// Records and barriers through 4 keyed workers: every barrier leaves
    /// once, after exactly the records sent before it and before any sent
    /// after it (C1); end-of-stream leaves once, last.
    #[test]
    fn barriers_leave_once_and_cut_the_stream_where_they_entered() {
        let shutdown = Shutdown::new();
        let (in_tx, in_rx) = edge("in".into(), 4, &shutdown);
        let (out_tx, out_rx) = edge("out".into(), 4, &shutdown);
        let chains = (0..4)
            .map(|i| {
                (
                    Chain::new(vec![Box::new(Pass)]),
                    StageStats::new(format!("keyed[{i}]")),
                )
            })
            .collect();
        let handles = spawn_parallel(
            StageStats::new("keyed"),
            chains,
            Spread {
                routing: Routing::Hash { key_groups: 128 },
                broadcast: None,
            },
            in_rx,
            out_tx.into(),
            2,
            &shutdown,
        )
        .unwrap();
        let feeder = std::thread::spawn(move || {
            let mut next = 0u64;
            for id in 1..=5 {
                for _ in 0..7 {
                    let batch = (next..next + 10).map(rec).collect();
                    next += 10;
                    in_tx.send(Message::records(batch)).unwrap();
                }
                in_tx.send(Message::Barrier(Barrier { id })).unwrap();
            }
            in_tx.send(Message::EndOfStream).unwrap();
        });
        let got: Vec<Message> = std::iter::from_fn(|| out_rx.recv()).collect();
        feeder.join().unwrap();
        for (name, h) in handles {
            h.join().unwrap().unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        let mut epoch = 0u64;
        let mut seen = 0;
        for m in &got {
            match m {
                Message::Records(rs) => {
                    for r in rs.clone().into_records() {
                        let i: u64 = std::str::from_utf8(&r.value).unwrap().parse().unwrap();
                        assert_eq!(i / 70, epoch, "record {i} crossed barrier {epoch}");
                        seen += 1;
                    }
                }
                Message::Barrier(b) => {
                    epoch += 1;
                    assert_eq!(b.id, epoch, "each barrier once, in order");
                }
                Message::EndOfStream => assert_eq!(epoch, 5),
                Message::Watermark(_)
                | Message::ProcessingTime(_)
                | Message::Swap(_)
                | Message::Query(_)
                | Message::TablesLoaded
                | Message::Input(..)
                | Message::Output(..) => {}
            }
        }
        assert_eq!(seen, 350);
        assert_eq!(got.last(), Some(&Message::EndOfStream));
        assert_eq!(got.iter().filter(|m| **m == Message::EndOfStream).count(), 1);
    }
}
