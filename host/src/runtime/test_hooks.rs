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

/// `MAILER_TEST_PAUSE_IN_REVOKE_MS`: the first time the group takes
/// partitions from a cluster process, inside the revoke and before it
/// commits, says so (`test hook: in a revoke`) and waits that many
/// milliseconds, as a process too slow to rejoin the group would; a
/// rebalance the group starts meanwhile may then end without it.
pub fn in_revoke() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| pause("MAILER_TEST_PAUSE_IN_REVOKE_MS", "in a revoke"));
}

/// A moment of a sink's part in a checkpoint that
/// `MAILER_TEST_KILL_AT=<moment>:<n>` aims at, `n` counting the
/// checkpoints this process takes from 1: the process SIGKILLs itself
/// there, saying so first on standard error (`test hook: killed <moment>
/// <id>`), so a crash test can stop it exactly between two steps.
#[derive(Debug, Clone, Copy)]
pub enum Moment {
    /// The sink flushed and acknowledged the barrier: its output is staged,
    /// the checkpoint not yet durable.
    Staged,
    /// The checkpoint is durable, the sink's output not committed.
    Durable,
    /// The sink committed its output, the run not yet noted it.
    Committed,
}

/// SIGKILLs the process when `MAILER_TEST_KILL_AT` names `moment` of
/// checkpoint `id`, the n-th of this process.
pub fn kill_at(moment: Moment, id: u64) {
    static FIRST: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let n = id.saturating_sub(*FIRST.get_or_init(|| id)) + 1;
    let name = match moment {
        Moment::Staged => "staged",
        Moment::Durable => "durable",
        Moment::Committed => "committed",
    };
    let Ok(aim) = std::env::var("MAILER_TEST_KILL_AT") else {
        return;
    };
    if aim != format!("{name}:{n}") {
        return;
    }
    eprintln!("test hook: killed {name} {id}");
    // SAFETY: kill(2) on this process.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

fn pause(variable: &str, moment: &str) {
    let Some(ms) = std::env::var(variable).ok().and_then(|v| v.parse().ok()) else {
        return;
    };
    eprintln!("test hook: {moment}");
    std::thread::sleep(Duration::from_millis(ms));
}
