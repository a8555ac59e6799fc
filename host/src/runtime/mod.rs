//! The stage engine: stages on their own threads, bounded edges between
//! them, markers aligned across parallel workers (C1), writers closing their
//! edges (C2) and two-phase shutdown (C3).

mod align;
mod control;
mod edge;
mod message;
mod outlet;
mod parallel;
mod pipeline;
mod shutdown;
mod side_stage;
mod sink;
mod source;
mod spawn;
mod stage;
mod start;
#[cfg(debug_assertions)]
pub(crate) mod test_hooks;
mod watermark;
mod wiring;
mod worker;

pub use control::{Control, RunHandles};
pub use edge::{Closed, EdgeReceiver, EdgeSender, edge};
pub use message::{Barrier, Message};
pub use outlet::Outlet;
pub use pipeline::{RunError, RunReport, run, run_from, run_with};
pub use shutdown::Shutdown;
pub use stage::StageError;
pub use start::RunStart;
