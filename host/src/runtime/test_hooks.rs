//! Moments the crash tests aim their SIGKILLs at, opened by environment
//! variables in debug builds only (a release binary has no such hooks).

use std::time::Duration;

/// `MAILER_TEST_PAUSE_BEFORE_COMMIT_MS`: once checkpoint `id` is durable
/// and before the sink commits its output, says so on standard error
/// (`test hook: checkpoint <id> durable, not committed`) and waits that
/// many milliseconds.
pub fn before_commit(id: u64) {
    pause(
        "MAILER_TEST_PAUSE_BEFORE_COMMIT_MS",
        &format!("checkpoint {id} durable, not committed"),
    );
}

/// `MAILER_TEST_PAUSE_BEFORE_RESTORE_MS`: before cluster mode restores
/// the keyed tasks among `partitions` given to a process that already runs
/// tasks (so its transaction may hold records), says so (`test
/// hook: restoring given tasks`) and waits that many milliseconds, as a
/// long restore would.
pub fn before_restore(partitions: &[(String, i32)]) {
    let names: Vec<String> = partitions.iter().map(|(t, p)| format!("{t}/{p}")).collect();
    pause(
        "MAILER_TEST_PAUSE_BEFORE_RESTORE_MS",
        &format!("restoring given tasks ({})", names.join(", ")),
    );
}

fn pause(variable: &str, moment: &str) {
    let Some(ms) = std::env::var(variable).ok().and_then(|v| v.parse().ok()) else {
        return;
    };
    eprintln!("test hook: {moment}");
    std::thread::sleep(Duration::from_millis(ms));
}
