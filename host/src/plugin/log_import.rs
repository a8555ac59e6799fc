//! The `log` import: a plugin's levelled messages in the host's log, with
//! the operator's name.

use super::engine::HostState;
use super::generated::process::mailer::plugin::log::{self, Level};
use wasmtime::component::{HasSelf, Linker};

/// Longest message kept; the rest is cut (a plugin cannot flood the log
/// with one call).
const MAX_MESSAGE: usize = 4096;

/// Lines one call may log; the rest are dropped and counted.
pub const MAX_LINES_PER_CALL: u32 = 100;

/// Adds the `log` import to `linker`.
pub fn add_to_linker(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    log::add_to_linker::<HostState, HasSelf<HostState>>(linker, |s| s)
}

impl log::Host for HostState {
    fn log(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        if self.log.lines >= MAX_LINES_PER_CALL {
            self.log.dropped += 1;
            return Ok(());
        }
        self.log.lines += 1;
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        let operator = &*self.operator;
        match level {
            Level::Trace => tracing::trace!(operator = %operator, "plugin: {message}"),
            Level::Debug => tracing::debug!(operator = %operator, "plugin: {message}"),
            Level::Info => tracing::info!(operator = %operator, "plugin: {message}"),
            Level::Warn => tracing::warn!(operator = %operator, "plugin: {message}"),
            Level::Error => tracing::error!(operator = %operator, "plugin: {message}"),
        }
        Ok(())
    }
}

/// What one call logged: lines passed on, and lines dropped past
/// [`MAX_LINES_PER_CALL`].
#[derive(Debug, Default)]
pub struct LogBudget {
    lines: u32,
    dropped: u64,
}

impl LogBudget {
    /// Starts a call's budget afresh; the lines the last call dropped.
    pub fn reset(&mut self) -> u64 {
        self.lines = 0;
        std::mem::take(&mut self.dropped)
    }
}
