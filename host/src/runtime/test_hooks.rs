//! Moments the crash tests aim their SIGKILLs at, opened by environment
//! variables in debug builds only (a release binary has no such hooks).

use std::time::Duration;

/// `MAILER_TEST_PAUSE_BEFORE_COMMIT_MS`: once checkpoint `id` is durable
/// and before the sink commits its output, says so on standard error
/// (`test hook: checkpoint <id> durable, not committed`) and waits that
/// many milliseconds.
pub fn before_commit(id: u64) {
    let Some(ms) = std::env::var("MAILER_TEST_PAUSE_BEFORE_COMMIT_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    else {
        return;
    };
    eprintln!("test hook: checkpoint {id} durable, not committed");
    std::thread::sleep(Duration::from_millis(ms));
}
