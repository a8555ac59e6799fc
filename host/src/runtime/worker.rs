//! An operator stage's worker: every message through its chain.

use super::stage::{StageError, record_count};
use super::{EdgeReceiver, Message, Outlet};
use crate::batch::Batch;
use crate::failure::OperatorError;
use crate::metrics::StageStats;
use crate::operators::{Chain, Produced};
use std::sync::Arc;

/// Runs every message of `input` through `chain` until `input` closes.
pub fn run_chain(
    mut chain: Chain,
    input: EdgeReceiver,
    out: Outlet,
    stats: Arc<StageStats>,
) -> Result<(), StageError> {
    while let Some(msg) = input.recv() {
        stats.count_in(record_count(&msg));
        let (produced, marker) = step(&mut chain, msg)?;
        for m in messages(produced).chain(marker) {
            stats.count_out(record_count(&m));
            if out.send(m).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The messages carrying what a chain produced on: its stream's records,
/// or each output's (a branch ends the chain); empty batches left out.
fn messages(produced: Produced) -> impl Iterator<Item = Message> {
    let (stream, outputs) = match produced {
        Produced::Stream(b) => (Some(b), Vec::new()),
        Produced::Outputs(parts) => (None, parts),
    };
    let stream = stream.filter(|b| !b.is_empty()).map(Message::Records);
    let outputs = outputs
        .into_iter()
        .enumerate()
        .filter(|(_, b)| !b.is_empty())
        .map(|(n, b)| Message::Output(n, b));
    stream.into_iter().chain(outputs)
}

/// Runs one message through `chain`: what leaves it is the records it
/// produced, then the marker itself (if the message was one).
fn step(chain: &mut Chain, msg: Message) -> Result<(Produced, Option<Message>), OperatorError> {
    let produced = match msg {
        Message::Records(batch) | Message::Output(_, batch) => return Ok((chain.on_records(batch)?, None)),
        Message::Input(input, batch) => return Ok((chain.on_input(input, batch)?, None)),
        Message::Watermark(wm) => chain.on_watermark(wm)?,
        Message::ProcessingTime(now) => chain.on_processing_time(now)?,
        Message::EndOfStream => chain.on_end()?,
        Message::TablesLoaded => Produced::Stream(Batch::Records(Vec::new())),
        Message::Barrier(b) => {
            chain.on_barrier(b.id);
            Produced::Stream(Batch::Records(Vec::new()))
        }
        Message::Query(ref query) => {
            chain.on_query(query);
            Produced::Stream(Batch::Records(Vec::new()))
        }
        Message::Swap(ref swap) => {
            let swapped = chain.on_swap(swap)?;
            swap.switched(swapped);
            Produced::Stream(Batch::Records(Vec::new()))
        }
    };
    Ok((produced, Some(msg)))
}
