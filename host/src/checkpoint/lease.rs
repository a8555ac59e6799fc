//! The lease on a bucket prefix: one running instance writes a prefix's
//! checkpoints. The folder lock (`lock.rs`) covers one machine's local
//! folder; two instances with other folders (two machines) meet only in the
//! bucket, so the one that opens a prefix first writes `<prefix>/_lease.json`
//! with a conditional PUT, before it lists or deletes anything there:
//!
//! - no lease there: `If-None-Match: *` (`PutMode::Create`);
//! - one that its holder released, that expired, or whose holder is a
//!   process of this host that is gone: `If-Match` on the ETag read
//!   (`PutMode::Update`), so that of two taking it over at once one wins;
//! - a live one held by another: the start is refused, naming the holder.
//!
//! The holder renews it every third of its life, `If-Match` on the ETag of
//! its last write; a renewal refused because another took the lease over
//! stops the run. Without a renewal for two thirds of its life it writes
//! nothing (the lease may lapse before a write lands), and a clean stop
//! releases it. The expiry is the holder's wall clock: another instance
//! waits [`CLOCK_SKEW`] past it before it takes a lease over.

use super::location::BucketUrl;
use super::s3::{spawn, wait_for};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// The lease object's name under the prefix.
pub(super) const LEASE: &str = "_lease.json";
/// How long a lease lasts unless renewed.
pub(super) const LEASE_LIFE: Duration = Duration::from_secs(30);
/// How far two machines' clocks may disagree: an expired lease is taken
/// over only this long after its expiry.
pub(super) const CLOCK_SKEW: Duration = Duration::from_secs(5);
/// Attempts to take a lease that other instances keep taking in between.
const ATTEMPTS: usize = 5;

/// Why the lease on a prefix could not be taken or kept.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another instance holds a live lease on the prefix.
    #[error(
        "`{url}` is in use: its lease `{key}` is held by {holder}, for {remaining_s} s more unless renewed. One running instance writes a prefix's checkpoints: stop that one first, or give this run another `[checkpoint] path`. If that process is gone (its machine crashed), its lease expires by itself: start again then"
    )]
    Held {
        /// The bucket prefix.
        url: String,
        /// The lease object.
        key: String,
        /// Who holds it.
        holder: String,
        /// Seconds until another instance may take it over.
        remaining_s: u64,
    },
    /// Another instance took the lease over while this one held it.
    #[error(
        "`{url}`: the lease `{key}` was taken over by {by} while this run held it (this run was paused, or cut off from the bucket, for longer than the lease lives): this run stops rather than write checkpoints beside another; start it again once the other has stopped"
    )]
    Lost {
        /// The bucket prefix.
        url: String,
        /// The lease object.
        key: String,
        /// Who holds it now, as far as the object says.
        by: String,
    },
    /// The lease was not renewed for long enough that it may lapse before a
    /// write lands.
    #[error(
        "`{url}`: the lease `{key}` was last renewed {since_s} s ago (the bucket does not answer): nothing is written to the prefix until a renewal succeeds"
    )]
    Lapsed {
        /// The bucket prefix.
        url: String,
        /// The lease object.
        key: String,
        /// Seconds since the last renewal that succeeded.
        since_s: u64,
    },
    /// The object at the lease's key is not a lease.
    #[error(
        "`{url}`: the lease `{key}` does not parse ({reason}): delete it if no run of the pipeline uses this prefix"
    )]
    Unreadable {
        /// The bucket prefix.
        url: String,
        /// The lease object.
        key: String,
        /// Why it does not parse.
        reason: String,
    },
    /// A request for the lease failed.
    #[error("`{url}`: {what} the lease `{key}`: {message}")]
    Request {
        /// The bucket prefix.
        url: String,
        /// The lease object.
        key: String,
        /// What was being done.
        what: &'static str,
        /// What failed.
        message: String,
    },
}

/// How long a lease lives, and how long after its expiry it is taken over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LeaseTiming {
    /// How long a lease lasts unless renewed; it is renewed every third.
    pub life: Duration,
    /// How far clocks may disagree (see [`CLOCK_SKEW`]).
    pub skew: Duration,
}

impl Default for LeaseTiming {
    fn default() -> Self {
        Self {
            life: LEASE_LIFE,
            skew: CLOCK_SKEW,
        }
    }
}

/// Who holds a lease: a process of a host, in one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Holder {
    host: String,
    pid: u32,
    /// Unique to the store that took the lease: two stores of one process
    /// are two holders.
    run: String,
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "process {} on host `{}` (run {})",
            self.pid, self.host, self.run
        )
    }
}

impl Holder {
    /// This process, in a run of its own.
    fn this_run() -> Self {
        Self {
            host: host_name(),
            pid: std::process::id(),
            run: run_id(),
        }
    }
}

/// The lease object's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    holder: Holder,
    /// When it expires unless renewed: milliseconds since the Unix epoch,
    /// by the holder's clock.
    expires_unix_ms: u64,
    /// The holder's writes so far: each write's content differs (an S3
    /// ETag is the content's MD5, and each renewal needs a new one).
    writes: u64,
    /// Given up by its holder (a clean stop): free to take.
    released: bool,
}

/// Whether a lease found in the bucket may be taken.
enum Standing {
    /// Yes, and why.
    Free(&'static str),
    /// No: live for this much longer.
    Held(Duration),
}

impl Record {
    fn new(holder: Holder, writes: u64, life: Duration) -> Self {
        Self {
            holder,
            expires_unix_ms: unix_ms().saturating_add(millis(life)),
            writes,
            released: false,
        }
    }

    /// This record renewed for `life` from now.
    fn renewed(&self, life: Duration) -> Self {
        Self::new(self.holder.clone(), self.writes + 1, life)
    }

    /// This record given up.
    fn released(&self) -> Self {
        Self {
            writes: self.writes + 1,
            released: true,
            ..self.clone()
        }
    }

    fn standing(&self, me: &Holder, skew: Duration) -> Standing {
        if self.released {
            return Standing::Free("its holder released it");
        }
        let until = self.expires_unix_ms.saturating_add(millis(skew));
        let now = unix_ms();
        if now >= until {
            return Standing::Free("it expired");
        }
        if self.holder.host == me.host && self.holder.pid != me.pid && !process_alive(self.holder.pid) {
            return Standing::Free("its process is gone");
        }
        Standing::Held(Duration::from_millis(until - now))
    }

    fn to_payload(&self) -> PutPayload {
        PutPayload::from(serde_json::to_vec_pretty(self).expect("a lease serialises"))
    }
}

/// What the holder knows of its lease.
struct State {
    /// The version of its last write, for the next `If-Match`.
    version: UpdateVersion,
    /// Its last write.
    record: Record,
    /// When the lease lapses by this process's clock: the start of the last
    /// write that succeeded, plus the lease's life.
    valid_until: Instant,
    /// Who took it over, once another did.
    lost: Option<String>,
}

/// What the lease handle and its renewal task share.
struct Shared {
    client: Arc<dyn ObjectStore>,
    path: ObjectPath,
    url: String,
    timing: LeaseTiming,
    me: Holder,
    state: Mutex<State>,
}

/// A lease held on a bucket prefix, renewed in the background until it is
/// dropped, which releases it.
pub(super) struct Lease {
    shared: Arc<Shared>,
    stop: Arc<Notify>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("key", &self.shared.path.as_ref())
            .field("holder", &self.shared.me)
            .finish_non_exhaustive()
    }
}

impl Lease {
    /// Takes the lease on the prefix `url` for this process, or says who
    /// holds it; renews it from then on.
    pub(super) fn acquire(
        client: Arc<dyn ObjectStore>,
        url: &BucketUrl,
        timing: LeaseTiming,
    ) -> Result<Self, LeaseError> {
        let me = Holder::this_run();
        let path = ObjectPath::from(url.key(LEASE));
        let first = Instant::now();
        let taken = {
            let (client, path, me, url) = (client.clone(), path.clone(), me.clone(), url.to_string());
            // The lease's own error is the answer, not a failure to wait.
            wait_for(async move {
                Ok::<_, std::convert::Infallible>(take(&*client, &path, &url, &me, timing).await)
            })
        };
        let (version, record, previous) = taken
            .map_err(|message| LeaseError::Request {
                url: url.to_string(),
                key: path.to_string(),
                what: "taking",
                message,
            })?
            .map_err(|e| *e)?;
        match previous {
            Some((holder, why)) => tracing::info!(url = %url, previous = %holder, why,
                "took over the lease of the prefix"),
            None => tracing::info!(url = %url, holder = %me, "took the lease of the prefix"),
        }
        let shared = Arc::new(Shared {
            client,
            path,
            url: url.to_string(),
            timing,
            me,
            state: Mutex::new(State {
                version,
                record,
                valid_until: first + timing.life,
                lost: None,
            }),
        });
        let stop = Arc::new(Notify::new());
        let task = spawn(keep(shared.clone(), stop.clone()));
        Ok(Self {
            shared,
            stop,
            task: Mutex::new(Some(task)),
        })
    }

    /// Whether this process may write to the prefix now: the lease is
    /// still its own, and renewed recently enough not to lapse meanwhile.
    pub(super) fn check(&self) -> Result<(), LeaseError> {
        if let Some(lost) = self.lost() {
            return Err(lost);
        }
        let state = self.shared.state();
        let life = self.shared.timing.life;
        let left = state.valid_until.saturating_duration_since(Instant::now());
        if left <= life / 3 {
            return Err(LeaseError::Lapsed {
                url: self.shared.url.clone(),
                key: self.shared.path.to_string(),
                since_s: (life - left).as_secs(),
            });
        }
        Ok(())
    }

    /// Why the run must stop, once another instance took the lease over.
    pub(super) fn lost(&self) -> Option<LeaseError> {
        let by = self.shared.state().lost.clone()?;
        Some(LeaseError::Lost {
            url: self.shared.url.clone(),
            key: self.shared.path.to_string(),
            by,
        })
    }
}

impl Drop for Lease {
    /// Stops the renewals and releases the lease (the renewal task's last
    /// write), waiting for it.
    fn drop(&mut self) {
        self.stop.notify_one();
        let task = self.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task
            && let Err(e) = wait_for(task)
        {
            tracing::warn!(url = %self.shared.url, error = %e, "the lease's renewals ended badly");
        }
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Renews the lease; `false` once another holds it (no more renewals).
    async fn renew(&self) -> bool {
        let started = Instant::now();
        let every = self.timing.life / 3;
        let (version, record) = {
            let state = self.state();
            (state.version.clone(), state.record.renewed(self.timing.life))
        };
        let put = put(&*self.client, &self.path, &record, PutMode::Update(version));
        let failure = match tokio::time::timeout(every, put).await {
            Ok(Ok(written)) => {
                let mut state = self.state();
                (state.version, state.record, state.valid_until) =
                    (written.into(), record, started + self.timing.life);
                return true;
            }
            Ok(Err(object_store::Error::Precondition { .. } | object_store::Error::NotFound { .. })) => {
                // Someone wrote it since, or a write of ours whose answer
                // was lost: the object says which.
                match tokio::time::timeout(every, read(&*self.client, &self.path)).await {
                    Ok(Ok(Some((version, Ok(there))))) if there.holder.run == self.me.run => {
                        let mut state = self.state();
                        if there == record {
                            state.valid_until = started + self.timing.life;
                        }
                        (state.version, state.record) = (version, there);
                        return true;
                    }
                    Ok(Ok(Some((_, Ok(there))))) => return self.lose(there.holder.to_string()),
                    Ok(Ok(Some((_, Err(reason))))) => {
                        return self.lose(format!("an object that is not a lease ({reason})"));
                    }
                    Ok(Ok(None)) => return self.lose("nobody: the lease object was deleted".to_owned()),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no answer within {every:?}"),
                }
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {every:?}"),
        };
        let renewed = self.state().valid_until.checked_sub(self.timing.life);
        let since = renewed.map_or(Duration::ZERO, |at| started.saturating_duration_since(at));
        tracing::warn!(url = %self.url, error = %failure, last_renewed_s = since.as_secs(),
            "could not renew the lease of the prefix; trying again");
        true
    }

    /// Records that `by` took the lease over; `false`.
    fn lose(&self, by: String) -> bool {
        tracing::error!(url = %self.url, by = %by, "the lease of the prefix was taken over: this run stops");
        self.state().lost = Some(by);
        false
    }

    /// Gives the lease up, unless another took it over.
    async fn release(&self) {
        let (version, record) = {
            let state = self.state();
            if state.lost.is_some() {
                return;
            }
            (state.version.clone(), state.record.released())
        };
        match put(&*self.client, &self.path, &record, PutMode::Update(version)).await {
            Ok(_) => tracing::info!(url = %self.url, "released the lease of the prefix"),
            Err(e) => {
                tracing::warn!(url = %self.url, error = %e, "could not release the lease of the prefix; it expires by itself")
            }
        }
    }
}

/// Renews the lease every third of its life until `stop`, then releases
/// it.
async fn keep(shared: Arc<Shared>, stop: Arc<Notify>) {
    let every = shared.timing.life / 3;
    loop {
        if tokio::time::timeout(every, stop.notified()).await.is_ok() {
            shared.release().await;
            return;
        }
        if !shared.renew().await {
            return;
        }
    }
}

/// Takes the lease at `path` for `me`: its version and content, and whom
/// it was taken over from (and why that was allowed).
async fn take(
    client: &dyn ObjectStore,
    path: &ObjectPath,
    url: &str,
    me: &Holder,
    timing: LeaseTiming,
) -> Result<(UpdateVersion, Record, Option<(Holder, &'static str)>), Box<LeaseError>> {
    let failed = |what: &'static str, e: object_store::Error| {
        Box::new(LeaseError::Request {
            url: url.to_owned(),
            key: path.to_string(),
            what,
            message: e.to_string(),
        })
    };
    let mut writes = 0;
    for _ in 0..ATTEMPTS {
        writes += 1;
        let record = Record::new(me.clone(), writes, timing.life);
        let found = read(client, path).await.map_err(|e| failed("reading", e))?;
        let (mode, previous) = match found {
            None => (PutMode::Create, None),
            // A write of ours whose answer was lost.
            Some((version, Ok(there))) if there.holder.run == me.run => return Ok((version, there, None)),
            Some((version, Ok(there))) => match there.standing(me, timing.skew) {
                Standing::Free(why) => (PutMode::Update(version), Some((there.holder, why))),
                Standing::Held(left) => {
                    return Err(Box::new(LeaseError::Held {
                        url: url.to_owned(),
                        key: path.to_string(),
                        holder: there.holder.to_string(),
                        remaining_s: left.as_secs().max(1),
                    }));
                }
            },
            Some((_, Err(reason))) => {
                return Err(Box::new(LeaseError::Unreadable {
                    url: url.to_owned(),
                    key: path.to_string(),
                    reason,
                }));
            }
        };
        match put(client, path, &record, mode).await {
            Ok(written) => return Ok((written.into(), record, previous)),
            // Another instance wrote it in between (or ours landed and its
            // answer was lost): read it again.
            Err(object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }) => {}
            Err(e) => return Err(failed("writing", e)),
        }
    }
    Err(failed(
        "taking",
        object_store::Error::Generic {
            store: "lease",
            source: format!("other instances took it in between {ATTEMPTS} times; try again").into(),
        },
    ))
}

/// The lease at `path` with its version: `None` when there is none,
/// `Some(Err)` when it does not parse.
async fn read(
    client: &dyn ObjectStore,
    path: &ObjectPath,
) -> Result<Option<(UpdateVersion, Result<Record, String>)>, object_store::Error> {
    let got = match client.get(path).await {
        Ok(got) => got,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let version = UpdateVersion {
        e_tag: got.meta.e_tag.clone(),
        version: got.meta.version.clone(),
    };
    let bytes = got.bytes().await?;
    Ok(Some((
        version,
        serde_json::from_slice(&bytes).map_err(|e| e.to_string()),
    )))
}

async fn put(
    client: &dyn ObjectStore,
    path: &ObjectPath,
    record: &Record,
    mode: PutMode,
) -> Result<object_store::PutResult, object_store::Error> {
    client
        .put_opts(path, record.to_payload(), PutOptions::from(mode))
        .await
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The wall clock in ms since the epoch, as the lease object records it.
fn unix_ms() -> u64 {
    u64::try_from(crate::clock::now_ms()).unwrap_or(0)
}

/// This machine's host name (`unknown` when it has none).
fn host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname(2) writes at most `buf.len()` bytes into a buffer
    // this function owns.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    if ok && end > 0 {
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        "unknown".to_owned()
    }
}

/// Whether process `pid` of this host may be running: `false` only when
/// the kernel says there is no such process.
fn process_alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return true;
    };
    if pid <= 0 {
        return true;
    }
    // SAFETY: kill(2) with signal 0 sends nothing; it checks that the
    // process exists.
    let sent = unsafe { libc::kill(pid, 0) };
    sent == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// An id no other run shares: the time and the process, hashed with a key
/// of its own.
fn run_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    format!("{:016x}", hasher.finish())
}

#[cfg(test)]
mod tests;
