//! Side outputs (dead letters, late records) take part in checkpoints like
//! the main sink: every thread that may write to one (the source, each
//! operator worker, the sink) has a channel of its own to the side output's
//! stage, and sends each checkpoint's barrier down it right after the
//! records that precede the barrier. The side output's stage aligns the
//! barriers of all its channels, as a stage aligns its inputs, before it
//! makes its output durable and acknowledges the checkpoint, so each
//! checkpoint holds exactly the side output before it.

use crate::record::Record;

/// What travels to a side output's stage.
#[derive(Debug)]
pub enum SideMessage {
    /// A record for the side output.
    Record(Record),
    /// Every record this channel sent before checkpoint `id`'s barrier is
    /// ahead of this.
    Barrier(u64),
}

/// One thread's channel to a side output's stage.
#[derive(Debug, Clone)]
pub struct SideOutput(flume::Sender<SideMessage>);

impl SideOutput {
    /// A channel holding up to `capacity` messages, and its receiving end.
    pub fn channel(capacity: usize) -> (Self, flume::Receiver<SideMessage>) {
        let (tx, rx) = flume::bounded(capacity);
        (Self(tx), rx)
    }

    /// Sends a record; gives it back when the side output's stage is gone.
    pub fn send(&self, record: Record) -> Result<(), Record> {
        self.0.send(SideMessage::Record(record)).map_err(|e| match e.0 {
            SideMessage::Record(r) => r,
            SideMessage::Barrier(_) => unreachable!("a record was sent"),
        })
    }

    /// Checkpoint `id`'s barrier passed the sending thread.
    pub fn barrier(&self, id: u64) {
        // A stage that is gone means the pipeline is stopping.
        let _ = self.0.send(SideMessage::Barrier(id));
    }
}
