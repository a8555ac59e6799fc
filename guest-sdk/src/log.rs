//! Levelled logging into the host's log (the `log` import of every world):
//! each line carries the operator's name, so a plugin need not say who it
//! is. Off the Wasm target (unit tests), messages go to stderr.

/// How much a message matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Finest detail.
    Trace,
    /// For debugging.
    Debug,
    /// Notable.
    Info,
    /// Something is off.
    Warn,
    /// Something failed.
    Error,
}

/// Logs `message` at `level`.
pub fn log(level: Level, message: impl AsRef<str>) {
    emit(level, message.as_ref());
}

/// Logs `message` at trace level.
pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message);
}

/// Logs `message` at debug level.
pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message);
}

/// Logs `message` at info level.
pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message);
}

/// Logs `message` at warn level.
pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message);
}

/// Logs `message` at error level.
pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message);
}

#[cfg(target_arch = "wasm32")]
fn emit(level: Level, message: &str) {
    use crate::wit::process::mailer::plugin::log::{Level as L, log};
    let level = match level {
        Level::Trace => L::Trace,
        Level::Debug => L::Debug,
        Level::Info => L::Info,
        Level::Warn => L::Warn,
        Level::Error => L::Error,
    };
    log(level, message);
}

#[cfg(not(target_arch = "wasm32"))]
fn emit(level: Level, message: &str) {
    eprintln!("[{level:?}] {message}");
}
