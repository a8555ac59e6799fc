//! One running instance per exactly-once PostgreSQL sink: a session-level
//! advisory lock (of the database), keyed by pipeline and table, held on a connection of its
//! own for the whole run. A second instance is refused before it touches
//! the stage; a commit checks, in its own transaction, that the lock is
//! still this instance's.
//!
//! Every session of a sink is named (`application_name`)
//! `mailer:<stage>:<run>`: the fence of a restart or a retry ends only
//! sessions of this sink (a killed run's, or this run's lost ones), never
//! autovacuum's or a person's.

use std::time::{Duration, Instant};
use tokio_postgres::Client;

/// How long a run waits for a lock whose holder may be going (a killed
/// run's session the server has not ended yet).
pub const LOCK_WAIT: Duration = Duration::from_secs(10);

/// Why the lock cannot be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another session holds it: who.
    Held(String),
    /// The database failed.
    Db(tokio_postgres::Error),
}

impl From<tokio_postgres::Error> for LockError {
    fn from(e: tokio_postgres::Error) -> Self {
        Self::Db(e)
    }
}

/// The advisory lock of one sink, on a session of its own.
pub struct RunLock {
    client: Client,
    pid: i32,
    key: i64,
}

/// The lock key of pipeline `pipeline`'s sink to `table`.
pub fn lock_key(pipeline: &str, table: &str) -> i64 {
    xxhash_rust::xxh3::xxh3_64(format!("mailer-sink\0{pipeline}\0{table}").as_bytes()) as i64
}

/// The `application_name` of run `run`'s sessions on `stage`.
pub fn session_name(stage: &str, run: &str) -> String {
    format!("mailer:{stage}:{run}")
}

/// A token telling this run's sessions from earlier runs'.
pub fn run_token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{:016x}",
        xxhash_rust::xxh3::xxh3_64(format!("{}\0{nanos}", std::process::id()).as_bytes())
    )
}

/// The advisory lock `key` as `pg_locks` shows it: `(classid, objid)`.
fn lock_ids(key: i64) -> (u32, u32) {
    let key = key as u64;
    ((key >> 32) as u32, key as u32)
}

/// Names `client`'s session `name`.
pub async fn name_session(client: &Client, name: &str) -> Result<(), tokio_postgres::Error> {
    client
        .execute("SELECT set_config('application_name', $1, false)", &[&name])
        .await
        .map(drop)
}

impl RunLock {
    /// Takes lock `key` on `client` (a session named `name`): at once, or
    /// once its holder is gone. A holder named `name` is this run's own
    /// lost session: it is ended. Any other holder is waited for up to
    /// `wait` (a killed run's session ends by itself), then named in the
    /// error.
    pub async fn take(client: Client, key: i64, name: &str, wait: Duration) -> Result<Self, LockError> {
        name_session(&client, name).await?;
        let deadline = Instant::now() + wait;
        loop {
            let row = client
                .query_one("SELECT pg_try_advisory_lock($1), pg_backend_pid()", &[&key])
                .await?;
            if row.get::<_, bool>(0) {
                return Ok(Self {
                    pid: row.get(1),
                    client,
                    key,
                });
            }
            let holder = holder(&client, key).await?;
            match holder {
                Some(Holder {
                    pid, ref application, ..
                }) if application == name => {
                    client.execute("SELECT pg_terminate_backend($1)", &[&pid]).await?;
                }
                Some(ref h) if Instant::now() >= deadline => return Err(LockError::Held(h.to_string())),
                _ if Instant::now() >= deadline => {
                    return Err(LockError::Held("a session that ended as it was looked up".into()));
                }
                _ => {}
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Whether the lock's session is still open (the lock with it).
    pub fn is_open(&self) -> bool {
        !self.client.is_closed()
    }

    /// The SQL that, in a transaction, returns a row only while this lock
    /// is held by its session: `$1` classid, `$2` objid, `$3` the pid
    /// ([`RunLock::held_params`]).
    pub const HELD: &'static str = "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted \
         AND classid = $1 AND objid = $2 AND objsubid = 1 AND pid = $3 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

    /// The parameters of [`RunLock::HELD`].
    pub fn held_params(&self) -> (u32, u32, i32) {
        let (classid, objid) = lock_ids(self.key);
        (classid, objid, self.pid)
    }
}

/// A session holding a lock.
struct Holder {
    pid: i32,
    application: String,
    from: String,
    since: String,
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "session {} (`{}`, from {}, since {})",
            self.pid, self.application, self.from, self.since
        )
    }
}

async fn holder(client: &Client, key: i64) -> Result<Option<Holder>, tokio_postgres::Error> {
    let (classid, objid) = lock_ids(key);
    let row = client
        .query_opt(
            "SELECT a.pid, coalesce(a.application_name, ''), coalesce(host(a.client_addr), 'a local socket'), \
             coalesce(a.backend_start::text, '?') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1 AND l.objid = $2 AND l.objsubid = 1 \
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[&classid, &objid],
        )
        .await?;
    Ok(row.map(|r| Holder {
        pid: r.get(0),
        application: r.get(1),
        from: r.get(2),
        since: r.get(3),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_splits_into_the_ids_pg_locks_shows() {
        assert_eq!(lock_ids(0x0000_0001_0000_0002), (1, 2));
        assert_eq!(lock_ids(-1), (u32::MAX, u32::MAX));
    }

    #[test]
    fn keys_and_names_tell_sinks_apart() {
        assert_ne!(lock_key("p", "a"), lock_key("p", "b"));
        assert_ne!(lock_key("p", "a"), lock_key("q", "a"));
        assert!(session_name("mailer_stage_0123456789abcdef", &run_token()).len() <= 63);
    }
}
