//! The PostgreSQL sink. Rows go to the server through one `COPY` (text
//! format) kept open across batches: the sink encodes the next batch while
//! the connection's own thread sends the last one, and a `COPY` ends only
//! when the sink flushes (at a checkpoint barrier and at the end), when its
//! input runs dry (so a slow stream's rows do not wait), or once it holds
//! [`COPY_BYTES`].
//!
//! - `insert`: straight into the table; each `COPY` commits by itself.
//! - `upsert`: into a temporary stage inside a transaction; ending the `COPY`
//!   runs `INSERT … SELECT DISTINCT ON (conflict columns) … ON CONFLICT … DO
//!   UPDATE` and commits (the last record of a key wins, as it would one by
//!   one).
//! - `exactly_once`: each `COPY` goes to a stage table, its rows numbered
//!   with the `COPY`'s number, so a retry after a lost connection never
//!   stages one twice; when the checkpoint after them is durable, one
//!   transaction moves the stage into the table, empties it and records
//!   the checkpoint in the progress table. A restart resumes from the
//!   checkpoint recorded there and drops what the stage holds, so every row
//!   lands once.
//!
//! A `COPY` is all or nothing, so the rows of the open one are kept until
//! it ends: a transient error (a lost connection, a server restart, a
//! deadlock) sends them again on a new connection, with backoff, for up to
//! `retry_timeout`.

use super::config::{PostgresSinkSpec, WriteMode};
use super::connection::{Target, describe, is_transient, quote, quote_table, sibling};
use super::rows::RowMapping;
use super::run_lock::{LOCK_WAIT, LockError, RunLock, lock_key, name_session, run_token, session_name};
use super::schema;
use crate::batch::Batch;
use crate::connectors::{ConnectorError, Sink, refuse};
use crate::failure::FailureHandler;
use bytes::Bytes;
use futures_util::SinkExt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::runtime::Runtime;
use tokio_postgres::{Client, CopyInSink, GenericClient};

mod progress;
pub use progress::committed_checkpoint;
use progress::{committed, progress, progress_table_ddl};

/// The longest wait between two attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A `COPY` ends once the rows sent into it reach this size: they are kept
/// in memory until it ends, to be sent again after a lost connection.
const COPY_BYTES: usize = 16 << 20;

/// The SQL of one sink, built once.
struct Statements {
    /// Creates the stage (on every connection for a temporary one).
    create_stage: Option<String>,
    /// `COPY` of rows: into the table, or into the stage. It runs inside a
    /// transaction of its own (`BEGIN` … `end`).
    copy: String,
    /// Runs after a `COPY` ends and returns once the rows are committed:
    /// `COMMIT` (`upsert`: the merge first).
    end: String,
    /// Moves the stage into the table (exactly once).
    merge: Option<String>,
    /// Empties the stage (exactly once).
    clear_stage: Option<String>,
    /// Whether a `COPY`'s number is staged: `SELECT … WHERE mailer_batch = $1`.
    staged: Option<String>,
    /// Exactly once, before a retry asks what an earlier attempt did (in
    /// the retry's transaction): ends the transactions the sink's lost
    /// connections still hold on the stage (the server may still be
    /// committing one) and locks it, so the answer is final.
    fence: Option<String>,
}

/// Exactly once: where progress is recorded, and the run's lock.
struct Progress {
    /// Moves the progress from the checkpoint this run last saw there
    /// (`$4`) to `$3`: a row only this run moves, so it never goes back.
    record: String,
    read: String,
    /// Records "started, nothing committed" (checkpoint 0) unless a row is
    /// there: a restart can then tell a sink that never committed from one
    /// whose record is gone.
    start: String,
    pipeline: String,
    sink: String,
    /// The sink's advisory lock ([`RunLock`]).
    lock_key: i64,
    /// This run's sessions' `application_name`.
    session: String,
    /// Ends the sessions of earlier runs (or this run's lost ones) still
    /// holding the stage.
    end_sessions: String,
}

/// A `COPY` in progress.
type OpenCopy = Pin<Box<CopyInSink<Bytes>>>;

/// Writes records as rows of one table.
pub struct PostgresSink {
    runtime: Runtime,
    target: Target,
    client: Option<Client>,
    /// The `COPY` rows are streamed into, between two ends.
    copy: Option<OpenCopy>,
    /// The rows sent since the open `COPY` started (or, after a failure,
    /// still to send): all of them are sent again on a new connection.
    pending: Vec<Bytes>,
    pending_bytes: usize,
    table: String,
    mapping: RowMapping,
    sql: Arc<Statements>,
    progress: Option<Arc<Progress>>,
    retry_timeout: Duration,
    rejects: FailureHandler,
    /// The number of the open `COPY` (exactly once: staged with its rows).
    copy_number: u64,
    /// Exactly once: the lock held for the run, and the checkpoint the
    /// progress table holds as this run last saw it.
    lock: Option<RunLock>,
    progress_seen: u64,
}

impl PostgresSink {
    /// Connects, checks the table against the mapping, and (exactly once)
    /// prepares the stage and the progress table.
    pub fn open(
        spec: &PostgresSinkSpec,
        pipeline: &str,
        rejects: FailureHandler,
    ) -> Result<Self, ConnectorError> {
        let runtime = runtime()?;
        let target = target(spec)?;
        let err = |message: String| ConnectorError::Postgres {
            target: target.shown().to_owned(),
            table: spec.table.clone(),
            message,
        };
        let client = target
            .connect(&runtime)
            .map_err(|e| err(format!("cannot connect: {}", describe(&e))))?;
        schema::check_table(&runtime, &client, spec).map_err(err)?;
        let sql = statements(spec, pipeline);
        let progress = spec.exactly_once.then(|| Arc::new(progress(spec, pipeline)));
        let (mut lock, mut progress_seen) = (None, 0);
        if let Some(p) = &progress {
            lock = Some(take_lock(&runtime, &target, p).map_err(err)?);
            // What a previous run staged is replayed from its checkpoint:
            // its sessions are ended, the stage made anew.
            let setup = format!(
                "{}; {}; {}",
                p.end_sessions,
                progress_table_ddl(spec),
                sql.create_stage.as_deref().expect("exactly once stages")
            );
            progress_seen = runtime
                .block_on(async {
                    name_session(&client, &p.session).await?;
                    client.batch_execute(&setup).await?;
                    client.execute(&p.start, &[&p.pipeline, &p.sink]).await?;
                    committed(&client, p).await
                })
                .map_err(|e| err(format!("preparing the stage and `{}`: {}", p.sink, describe(&e))))?
                .unwrap_or(0);
        }
        let mut sink = Self {
            runtime,
            target,
            client: None,
            copy: None,
            pending: Vec::new(),
            pending_bytes: 0,
            table: spec.table.clone(),
            mapping: RowMapping::new(&spec.columns),
            sql: Arc::new(sql),
            progress,
            retry_timeout: spec.retry_timeout,
            rejects,
            copy_number: 0,
            lock,
            progress_seen,
        };
        sink.client = Some(sink.prepared(client).map_err(|e| sink.failed("preparing", &e))?);
        Ok(sink)
    }

    /// A connection ready to write: the temporary stage of `upsert` exists;
    /// exactly once, the session carries the run's name (a fence of this
    /// run may end it once lost).
    fn prepared(&self, client: Client) -> Result<Client, tokio_postgres::Error> {
        match (&self.progress, &self.sql.create_stage) {
            (Some(p), _) => self.runtime.block_on(name_session(&client, &p.session))?,
            (None, Some(create)) => self.runtime.block_on(client.batch_execute(create))?,
            (None, None) => {}
        }
        Ok(client)
    }

    fn failed(&self, what: &str, e: &tokio_postgres::Error) -> ConnectorError {
        ConnectorError::Postgres {
            target: self.target.shown().to_owned(),
            table: self.table.clone(),
            message: format!("{what}: {}", describe(e)),
        }
    }

    /// Runs `attempt` until it succeeds, retrying transient errors on a new
    /// connection with backoff for up to `retry_timeout`. `attempt` is told
    /// whether an earlier attempt may have got through.
    fn retrying<T>(
        &mut self,
        what: &str,
        mut attempt: impl FnMut(&Runtime, &mut Client, bool) -> Result<T, tokio_postgres::Error>,
    ) -> Result<T, ConnectorError> {
        let deadline = Instant::now() + self.retry_timeout;
        let mut backoff = Duration::from_millis(100);
        let mut retry = false;
        loop {
            let client = match self.client.take() {
                Some(c) if !c.is_closed() => Ok(c),
                Some(_) => {
                    tracing::warn!(table = %self.table, "the connection was closed; retrying on a new connection");
                    self.target.connect(&self.runtime).and_then(|c| self.prepared(c))
                }
                None => self.target.connect(&self.runtime).and_then(|c| self.prepared(c)),
            };
            let result = client.and_then(|mut c| {
                let r = attempt(&self.runtime, &mut c, retry);
                self.client = Some(c);
                r
            });
            match result {
                Ok(v) => return Ok(v),
                Err(e) if is_transient(&e) && Instant::now() + backoff < deadline => {
                    tracing::warn!(
                        table = %self.table,
                        error = %describe(&e),
                        retry_in = ?backoff,
                        "{what} failed; retrying on a new connection"
                    );
                    self.client = None;
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    retry = true;
                }
                Err(e) => return Err(self.failed(what, &e)),
            }
        }
    }

    /// The rows of `batch` in `COPY` text form (the refused records through
    /// the failure policy), and how many there are.
    fn rows(&self, batch: &Batch, extra: &str) -> Result<(Bytes, usize), ConnectorError> {
        let mut out = Vec::with_capacity(batch.len() * 64);
        let mut n = 0;
        batch.try_for_each(|rec| match self.mapping.append_row(rec, extra, &mut out) {
            Ok(()) => {
                n += 1;
                Ok(())
            }
            Err(reason) => {
                refuse(&self.rejects, rec.clone(), &reason).map_err(|message| ConnectorError::Postgres {
                    target: self.target.shown().to_owned(),
                    table: self.table.clone(),
                    message,
                })
            }
        })?;
        Ok((Bytes::from(out), n))
    }

    /// Sends `rows` into the open `COPY`, starting one (on a new connection
    /// when there is none) first.
    fn stream(&mut self, rows: Bytes) -> Result<(), tokio_postgres::Error> {
        if self.copy.is_none() {
            let client = match self.client.take() {
                Some(c) => c,
                None => self.prepared(self.target.connect(&self.runtime)?)?,
            };
            let client = self.client.insert(client);
            self.copy = Some(self.runtime.block_on(start_copy(client, &self.sql))?);
        }
        let copy = self.copy.as_mut().expect("started above");
        self.runtime.block_on(copy.send(rows))
    }

    /// Ends the open `COPY`: its rows are in the table (or, exactly once,
    /// in the stage).
    fn end_copy(&mut self) -> Result<(), ConnectorError> {
        let Some(copy) = self.copy.take() else {
            // Only rows a failed attempt left behind can be pending here.
            return if self.pending.is_empty() {
                Ok(())
            } else {
                self.resend()
            };
        };
        let client = self.client.as_ref().expect("a COPY has its connection");
        match self.runtime.block_on(finish_copy(copy, client, &self.sql)) {
            Ok(()) => {
                self.ended();
                Ok(())
            }
            Err(e) => self.recover("ending a COPY", &e),
        }
    }

    /// The open `COPY` ended well: its rows need not be kept.
    fn ended(&mut self) {
        self.pending.clear();
        self.pending_bytes = 0;
        self.copy_number += 1;
    }

    /// After `e` broke the open `COPY`: fails on an error that is not
    /// transient, else sends the pending rows again on a new connection.
    fn recover(&mut self, what: &str, e: &tokio_postgres::Error) -> Result<(), ConnectorError> {
        self.copy = None;
        self.client = None;
        if !is_transient(e) {
            return Err(self.failed(what, e));
        }
        tracing::warn!(table = %self.table, error = %describe(e), "{what} failed; retrying on a new connection");
        self.resend()
    }

    /// Sends every pending row in one `COPY` and ends it, retrying on new
    /// connections. Exactly once, a `COPY` already staged (the connection
    /// broke after it ended) is not staged again: the lost connection's
    /// transaction is ended first, so the stage tells whether it committed.
    fn resend(&mut self) -> Result<(), ConnectorError> {
        let (sql, rows, number) = (self.sql.clone(), self.pending.clone(), self.copy_number as i64);
        self.retrying("writing rows", |rt, client, _| {
            rt.block_on(async {
                let mut copy = match (&sql.fence, &sql.staged) {
                    (Some(fence), Some(staged)) => {
                        client.batch_execute(&format!("BEGIN; {fence}")).await?;
                        if client.query_opt(staged, &[&number]).await?.is_some() {
                            return client.batch_execute("COMMIT").await;
                        }
                        Box::pin(client.copy_in(&sql.copy).await?)
                    }
                    _ => start_copy(client, &sql).await?,
                };
                for chunk in &rows {
                    copy.feed(chunk.clone()).await?;
                }
                finish_copy(copy, client, &sql).await
            })
        })?;
        self.ended();
        Ok(())
    }

    fn commit(&mut self, id: u64) -> Result<(), ConnectorError> {
        let progress = self.progress.clone().expect("exactly once");
        // A lost lock session (the server ended it, the network cut it) is
        // taken again once, its old session ended first, unless another
        // instance took the lock meanwhile.
        for attempt in 0..2 {
            if attempt > 0 || !self.lock.as_ref().is_some_and(RunLock::is_open) {
                tracing::warn!(table = %self.table, "the session holding the sink's lock was lost; taking the lock again");
                self.lock = None;
                let lock = take_lock(&self.runtime, &self.target, &progress)
                    .map_err(|message| self.refused(message))?;
                self.lock = Some(lock);
            }
            match self.commit_holding_lock(id)? {
                Committed::Yes => {
                    self.progress_seen = id;
                    return Ok(());
                }
                Committed::LockLost if attempt == 0 => continue,
                Committed::LockLost => break,
                Committed::ProgressMoved => {
                    return Err(self.refused(format!(
                        "checkpoint {id} is not committed: `{}` no longer says checkpoint {}, as this run left it (another instance committed); stopping",
                        progress.sink, self.progress_seen
                    )));
                }
            }
        }
        Err(self.refused(format!(
            "checkpoint {id} is not committed: the sink's lock is no longer this run's (another instance of the pipeline took it); stopping"
        )))
    }

    /// One commit of checkpoint `id`'s rows, in a transaction that checks
    /// the run's lock and moves the progress row from what the run saw.
    fn commit_holding_lock(&mut self, id: u64) -> Result<Committed, ConnectorError> {
        let (sql, progress) = (self.sql.clone(), self.progress.clone().expect("exactly once"));
        let (classid, objid, pid) = self.lock.as_ref().expect("taken").held_params();
        let seen = self.progress_seen as i64;
        let what = format!("committing the rows of checkpoint {id}");
        self.retrying(&what, |rt, client, retry| {
            rt.block_on(async {
                let tx = client.transaction().await?;
                if retry {
                    tx.batch_execute(sql.fence.as_deref().expect("exactly once fences"))
                        .await?;
                    if committed(&tx, &progress).await? == Some(id) {
                        return tx.commit().await.map(|()| Committed::Yes);
                    }
                }
                let held = tx.query_opt(RunLock::HELD, &[&classid, &objid, &pid]).await?;
                if held.is_none() {
                    return Ok(Committed::LockLost);
                }
                tx.execute(sql.merge.as_deref().expect("exactly once merges"), &[])
                    .await?;
                tx.execute(sql.clear_stage.as_deref().expect("exactly once stages"), &[])
                    .await?;
                let moved = tx
                    .execute(
                        &progress.record,
                        &[&progress.pipeline, &progress.sink, &(id as i64), &seen],
                    )
                    .await?;
                if moved != 1 {
                    return Ok(Committed::ProgressMoved);
                }
                tx.commit().await.map(|()| Committed::Yes)
            })
        })
    }

    fn refused(&self, message: String) -> ConnectorError {
        ConnectorError::Postgres {
            target: self.target.shown().to_owned(),
            table: self.table.clone(),
            message,
        }
    }
}

impl Sink for PostgresSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let extra = if self.progress.is_some() {
            self.copy_number.to_string()
        } else {
            String::new()
        };
        let (rows, n) = self.rows(batch, &extra)?;
        if n == 0 {
            return Ok(());
        }
        self.pending_bytes += rows.len();
        self.pending.push(rows.clone());
        if let Err(e) = self.stream(rows) {
            return self.recover("writing rows", &e);
        }
        if self.pending_bytes >= COPY_BYTES {
            self.end_copy()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        self.end_copy()
    }

    fn idle(&mut self) -> Result<(), ConnectorError> {
        if self.progress.is_some() {
            // Staged rows are seen by no one before the commit.
            Ok(())
        } else {
            self.end_copy()
        }
    }

    fn commits_with_checkpoints(&self) -> bool {
        self.progress.is_some()
    }

    fn checkpoint_done(&mut self, id: u64, complete: bool) -> Result<(), ConnectorError> {
        if complete {
            self.commit(id)
        } else {
            // The stage keeps the rows for the next checkpoint.
            Ok(())
        }
    }
}

/// What a commit's transaction did.
enum Committed {
    Yes,
    /// The lock was not this run's: nothing was committed.
    LockLost,
    /// The progress row moved under this run: nothing was committed.
    ProgressMoved,
}

/// Takes the sink's lock for this run on a session of its own; the error
/// names the holder and what to do.
fn take_lock(runtime: &Runtime, target: &Target, progress: &Progress) -> Result<RunLock, String> {
    let client = target
        .connect(runtime)
        .map_err(|e| format!("cannot connect: {}", describe(&e)))?;
    runtime
        .block_on(RunLock::take(client, progress.lock_key, &progress.session, LOCK_WAIT))
        .map_err(|e| match e {
            LockError::Held(holder) => format!(
                "another instance of pipeline `{}` writes to `{}` exactly once: {holder} holds the sink's lock (waited {LOCK_WAIT:?}). One instance runs per pipeline: stop the other; if its process is gone and the session stays, end it with `SELECT pg_terminate_backend(<pid>)`",
                progress.pipeline, progress.sink
            ),
            LockError::Db(e) => format!("taking the sink's lock: {}", describe(&e)),
        })
}

/// Ends `copy` and commits it (`upsert`: the merge first); returns once the
/// server has committed the rows.
async fn finish_copy(
    mut copy: OpenCopy,
    client: &Client,
    sql: &Statements,
) -> Result<(), tokio_postgres::Error> {
    copy.as_mut().finish().await?;
    client.batch_execute(&sql.end).await
}

/// Starts a `COPY` inside a transaction. A `COPY` in an implicit
/// transaction commits after its `CommandComplete`, which is where
/// `CopyInSink::finish` returns: a connection lost in between rolls the rows
/// back unseen. Inside `BEGIN` … `COMMIT`, the `COMMIT`'s answer tells.
async fn start_copy(client: &Client, sql: &Statements) -> Result<OpenCopy, tokio_postgres::Error> {
    client.batch_execute("BEGIN").await?;
    Ok(Box::pin(client.copy_in(&sql.copy).await?))
}

/// The target of `spec`.
pub(super) fn target(spec: &PostgresSinkSpec) -> Result<Target, ConnectorError> {
    let ca = spec.ca_file.as_ref().map(|c| c.value().into());
    Target::new(spec.dsn.value(), spec.tls, ca).map_err(|message| ConnectorError::Postgres {
        target: "(the DSN)".into(),
        table: spec.table.clone(),
        message,
    })
}

/// A runtime for one connection, with a thread of its own: the connection
/// sends what the sink streams while the sink encodes the next rows.
pub(super) fn runtime() -> Result<Runtime, ConnectorError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("postgres")
        .enable_all()
        .build()
        .map_err(|e| ConnectorError::Unsupported(format!("starting the PostgreSQL client: {e}")))
}

/// Ends the sessions of this sink (named `mailer:<stage>:…`, this run's
/// or an earlier run's) other than the current one that hold locks on
/// `stage` (qualified; `name` unqualified): a connection the sink lost
/// while the server went on, e.g. committing. Nobody else's session is
/// touched (autovacuum, a person reading the stage).
fn end_sessions(stage: &str, name: &str) -> String {
    let literal = stage.replace('\'', "''");
    format!(
        "SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
         WHERE l.locktype = 'relation' AND l.relation = to_regclass('{literal}') AND l.pid <> pg_backend_pid() \
         AND starts_with(a.application_name, 'mailer:{name}:')"
    )
}

/// Makes the transaction it runs in own `stage`: the sink's sessions still
/// holding it are ended ([`end_sessions`]), and the lock waits until they
/// are gone, so what the stage and the progress table hold is final.
fn fence(stage: &str, name: &str) -> String {
    format!(
        "{}; LOCK TABLE {stage} IN SHARE ROW EXCLUSIVE MODE",
        end_sessions(stage, name)
    )
}

/// The stage of an exactly-once sink: one per pipeline and table.
fn stage_name(spec: &PostgresSinkSpec, pipeline: &str) -> String {
    let id = xxhash_rust::xxh3::xxh3_64(format!("{pipeline}\0{}", spec.table).as_bytes());
    format!("mailer_stage_{id:016x}")
}

fn statements(spec: &PostgresSinkSpec, pipeline: &str) -> Statements {
    let table = quote_table(&spec.table);
    let cols = spec
        .columns
        .keys()
        .map(|c| quote(c))
        .collect::<Vec<_>>()
        .join(", ");
    let merge = |stage: &str| match spec.mode {
        WriteMode::Insert => {
            format!("INSERT INTO {table} ({cols}) SELECT {cols} FROM {stage} ORDER BY mailer_ord")
        }
        WriteMode::Upsert => {
            let conflict = spec
                .conflict_columns
                .iter()
                .map(|c| quote(c))
                .collect::<Vec<_>>()
                .join(", ");
            let updates: Vec<String> = spec
                .columns
                .keys()
                .filter(|c| !spec.conflict_columns.contains(c))
                .map(|c| format!("{0} = EXCLUDED.{0}", quote(c)))
                .collect();
            let action = if updates.is_empty() {
                "DO NOTHING".to_owned()
            } else {
                format!("DO UPDATE SET {}", updates.join(", "))
            };
            format!(
                "INSERT INTO {table} ({cols}) SELECT DISTINCT ON ({conflict}) {cols} FROM {stage} \
                 ORDER BY {conflict}, mailer_ord DESC ON CONFLICT ({conflict}) {action}"
            )
        }
    };
    if spec.exactly_once {
        let stage = sibling(&spec.table, &stage_name(spec, pipeline));
        return Statements {
            create_stage: Some(format!(
                "DROP TABLE IF EXISTS {stage}; \
                 CREATE TABLE {stage} AS SELECT {cols} FROM {table} WITH NO DATA; \
                 ALTER TABLE {stage} ADD COLUMN mailer_batch bigint, ADD COLUMN mailer_ord bigserial"
            )),
            copy: format!("COPY {stage} ({cols}, mailer_batch) FROM STDIN"),
            end: "COMMIT".to_owned(),
            merge: Some(merge(&stage)),
            clear_stage: Some(format!("TRUNCATE {stage}")),
            staged: Some(format!("SELECT 1 FROM {stage} WHERE mailer_batch = $1 LIMIT 1")),
            fence: Some(fence(&stage, &stage_name(spec, pipeline))),
        };
    }
    match spec.mode {
        WriteMode::Insert => Statements {
            create_stage: None,
            copy: format!("COPY {table} ({cols}) FROM STDIN"),
            end: "COMMIT".to_owned(),
            merge: None,
            clear_stage: None,
            staged: None,
            fence: None,
        },
        WriteMode::Upsert => Statements {
            create_stage: Some(format!(
                "CREATE TEMP TABLE mailer_stage ON COMMIT DELETE ROWS AS SELECT {cols} FROM {table} WITH NO DATA; \
                 ALTER TABLE mailer_stage ADD COLUMN mailer_ord bigserial"
            )),
            copy: format!("COPY mailer_stage ({cols}) FROM STDIN"),
            end: format!("{}; COMMIT", merge("mailer_stage")),
            merge: None,
            clear_stage: None,
            staged: None,
            fence: None,
        },
    }
}
