//! The `log` import: a plugin's levelled messages in the host's log, with
//! the operator's name. It reaches the store through [`LogView`] (wasmtime's
//! view pattern), so it knows only what it needs.

use super::generated::process::mailer::plugin::log::{self, Level};
use wasmtime::component::{HasData, Linker};

/// Longest message kept; the rest is cut (a plugin cannot flood the log
/// with one call).
const MAX_MESSAGE: usize = 4096;

/// Lines one call may log; the rest are dropped and counted.
pub const MAX_LINES_PER_CALL: u32 = 100;

/// What the `log` import reaches in a store.
pub struct LogImport<'a> {
    /// The operator the plugin runs in.
    pub operator: &'a str,
    /// The current call's lines.
    pub budget: &'a mut LogBudget,
}

/// A store whose plugins may log.
pub trait LogView {
    /// The `log` import's part of the store.
    fn log(&mut self) -> LogImport<'_>;
}

struct Log;

impl HasData for Log {
    type Data<'a> = LogImport<'a>;
}

/// Adds the `log` import to `linker`.
pub fn add_to_linker<T: LogView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    log::add_to_linker::<T, Log>(linker, |s| s.log())
}

impl log::Host for LogImport<'_> {
    fn log(&mut self, level: Level, mut message: String) -> wasmtime::Result<()> {
        if self.budget.lines >= MAX_LINES_PER_CALL {
            self.budget.dropped += 1;
            return Ok(());
        }
        self.budget.lines += 1;
        if message.len() > MAX_MESSAGE {
            let mut end = MAX_MESSAGE;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
            message.push('…');
        }
        let operator = self.operator;
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
