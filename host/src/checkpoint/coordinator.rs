//! The checkpoint coordinator: the source announces each barrier with its
//! position, every operator worker and the sink acknowledge it once their
//! state for it is written, and the coordinator then makes the checkpoint
//! visible. A checkpoint a worker failed on is dropped and counted; more
//! than the tolerated number of failures in a row stops the pipeline.

use super::location::Location;
use super::metadata::{Metadata, OperatorMeta, SnapshotMeta};
use super::plugins::PluginSwap;
use super::remote::RemoteCheckpoints;
use super::s3::S3Settings;
use super::savepoint::{RunControl, SavepointRequest};
use super::savepoint::{report_done, report_failure, write_savepoint};
use super::stats::{CheckpointStats, size_of};
use super::store::{CheckpointStore, Completed, StoreError};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What the stages tell the coordinator.
#[derive(Debug)]
pub enum CheckpointEvent {
    /// The source stage sent barrier `id`; everything before `positions`
    /// precedes it.
    Started {
        /// The checkpoint.
        id: u64,
        /// Each source's position at the barrier, by name.
        positions: BTreeMap<String, serde_json::Value>,
        /// Whether it is a savepoint too, and where that goes.
        savepoint: Option<SavepointRequest>,
        /// The plugin swaps the source sent since the previous barrier, in
        /// order.
        swaps: Vec<PluginSwap>,
    },
    /// An operator worker wrote its part of checkpoint `id`.
    Acked {
        /// The checkpoint.
        id: u64,
        /// The snapshots it wrote (none for stateless workers).
        snapshots: Vec<SnapshotMeta>,
    },
    /// A sink made its output up to barrier `id` durable.
    SinkAcked {
        /// The checkpoint.
        id: u64,
        /// Which sink (its name; `dead-letter`, `late-output`).
        sink: String,
        /// Where its output ends, for a sink that rewinds to it on restore.
        position: Option<serde_json::Value>,
    },
    /// A worker could not write its part of checkpoint `id`.
    Failed {
        /// The checkpoint.
        id: u64,
        /// Why.
        reason: String,
    },
}

/// Why the coordinator stopped the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum CoordinatorError {
    /// Too many checkpoints failed in a row.
    #[error("{count} checkpoints in a row failed (at most {tolerated} are tolerated); the last: {reason}")]
    TooManyFailures {
        /// Failures in a row.
        count: u32,
        /// The manifest's `tolerable_failures`.
        tolerated: u32,
        /// The last failure.
        reason: String,
    },
    /// Another instance took the bucket prefix's lease over.
    #[error(transparent)]
    Lease(#[from] super::lease::LeaseError),
}

/// What the coordinator needs to know about the pipeline.
pub struct CoordinatorSetup {
    /// Where checkpoints go.
    pub store: CheckpointStore,
    /// Acknowledgements per checkpoint: every operator worker and every sink.
    pub expected_acks: usize,
    /// The pipeline's name.
    pub pipeline: String,
    /// SHA-256 of the manifest.
    pub manifest_hash: String,
    /// Key groups.
    pub key_groups: u32,
    /// The stateful operators and their plugins.
    pub operators: Vec<OperatorMeta>,
    /// The file each plugin the operators run at the start was loaded
    /// from, by digest: a swapped-in one goes into each checkpoint from
    /// there (the swaps the source sends name theirs).
    pub plugin_files: HashMap<String, PathBuf>,
    /// Failures in a row that do not stop the pipeline.
    pub tolerable_failures: u32,
    /// Time between checkpoints.
    pub interval: Duration,
    /// How long a checkpoint may take before it counts as failed.
    pub timeout: Duration,
    /// Counts.
    pub stats: Arc<CheckpointStats>,
    /// The run's control: a stop-with-savepoint stops it.
    pub control: Arc<dyn RunControl>,
    /// Where to tell a sink that commits with checkpoints how each ended.
    pub outcomes: Option<flume::Sender<(u64, bool)>>,
    /// How to reach S3, for savepoints in buckets.
    pub s3: S3Settings,
}

struct Pending {
    positions: Option<BTreeMap<String, serde_json::Value>>,
    savepoint: Option<SavepointRequest>,
    acks: usize,
    snapshots: Vec<SnapshotMeta>,
    sinks: BTreeMap<String, serde_json::Value>,
    failure: Option<String>,
    /// The plugin each operator ran at the barrier.
    operators: Vec<OperatorMeta>,
    /// When the coordinator first heard of it.
    started: Instant,
}

impl Pending {
    fn new() -> Self {
        Self {
            positions: None,
            savepoint: None,
            acks: 0,
            snapshots: Vec::new(),
            sinks: BTreeMap::new(),
            failure: None,
            operators: Vec::new(),
            started: Instant::now(),
        }
    }
}

impl CheckpointEvent {
    /// The checkpoint it is about.
    fn id(&self) -> u64 {
        match self {
            CheckpointEvent::Started { id, .. }
            | CheckpointEvent::Acked { id, .. }
            | CheckpointEvent::SinkAcked { id, .. }
            | CheckpointEvent::Failed { id, .. } => *id,
        }
    }
}

/// Runs until every stage dropped its sender.
pub fn run_coordinator(
    setup: CoordinatorSetup,
    events: flume::Receiver<CheckpointEvent>,
) -> Result<(), CoordinatorError> {
    let mut coordinator = Coordinator {
        operators: setup.operators.clone(),
        plugin_files: setup.plugin_files.clone(),
        setup,
        pending: BTreeMap::new(),
        expired: BTreeSet::new(),
        failures_in_a_row: 0,
        last_ended: Instant::now(),
        last_id: 0,
    };
    loop {
        match events.recv_timeout(EXPIRY_CHECK) {
            Ok(event) => {
                if let Some(id) = coordinator.on_event(event) {
                    coordinator.finish(id)?;
                }
            }
            Err(flume::RecvTimeoutError::Timeout) => {}
            Err(flume::RecvTimeoutError::Disconnected) => break,
        }
        coordinator.expire()?;
        // Nothing more is written beside another instance.
        if let Some(lost) = coordinator.setup.store.lease_lost() {
            coordinator.abandon_pending();
            return Err(lost.into());
        }
    }
    coordinator.abandon_pending();
    Ok(())
}

/// How often checkpoints in flight are checked against the timeout.
const EXPIRY_CHECK: Duration = Duration::from_millis(200);

/// How many expired checkpoints are remembered (their late
/// acknowledgements ignored).
const EXPIRED_KEPT: usize = 64;

/// The checkpoints in flight and what the coordinator carries from one to
/// the next.
struct Coordinator {
    setup: CoordinatorSetup,
    pending: BTreeMap<u64, Pending>,
    /// Checkpoints failed for taking longer than the timeout: what still
    /// arrives for them is dropped.
    expired: BTreeSet<u64>,
    /// The plugin each operator runs at the newest barrier.
    operators: Vec<OperatorMeta>,
    /// Where each plugin an operator ran in this run is, by digest.
    plugin_files: HashMap<String, PathBuf>,
    failures_in_a_row: u32,
    /// When the last checkpoint ended (or the run began), and the newest id
    /// heard of: with none in flight past the interval and the timeout,
    /// the next one could not start.
    last_ended: Instant,
    last_id: u64,
}

impl Coordinator {
    /// Records `event`; returns its checkpoint once every acknowledgement
    /// and the source's position are in.
    fn on_event(&mut self, event: CheckpointEvent) -> Option<u64> {
        let id = event.id();
        if self.expired.contains(&id) {
            return None;
        }
        self.last_id = self.last_id.max(id);
        let p = self.pending.entry(id).or_insert_with(Pending::new);
        match event {
            CheckpointEvent::Started {
                positions,
                savepoint,
                swaps,
                ..
            } => {
                for swap in swaps {
                    if let Some(op) = self.operators.iter_mut().find(|o| o.name == swap.operator) {
                        op.swapped_to(&swap.digest);
                    }
                    self.plugin_files.insert(swap.digest, swap.file);
                }
                p.positions = Some(positions);
                p.savepoint = savepoint;
                p.operators = self.operators.clone();
            }
            CheckpointEvent::Acked { snapshots, .. } => {
                p.acks += 1;
                p.snapshots.extend(snapshots);
            }
            CheckpointEvent::SinkAcked { sink, position, .. } => {
                p.acks += 1;
                if let Some(position) = position {
                    p.sinks.insert(sink, position);
                }
            }
            CheckpointEvent::Failed { reason, .. } => {
                p.acks += 1;
                p.failure.get_or_insert(reason);
            }
        }
        (p.acks >= self.setup.expected_acks && p.positions.is_some()).then_some(id)
    }

    /// Makes checkpoint `id` visible, or drops it when a worker failed on
    /// it, and tells a committing sink which; fails after too many failures
    /// in a row.
    fn finish(&mut self, id: u64) -> Result<(), CoordinatorError> {
        let mut p = self.pending.remove(&id).expect("reported ready by on_event");
        let setup = &self.setup;
        let tmp = super::pending_dir(setup.store.dir(), id);
        let result = match p.failure.take() {
            Some(reason) => Err(reason),
            None => self.complete(id, &mut p, &tmp).map_err(|e| e.to_string()),
        };
        setup.stats.in_flight.store(false, Ordering::Release);
        self.last_ended = Instant::now();
        if let Some(tx) = &setup.outcomes {
            // A stopped sink means the pipeline is stopping.
            let _ = tx.send((id, result.is_ok()));
        }
        match result {
            Ok(Completed { path, uploaded_bytes }) => {
                self.failures_in_a_row = 0;
                let took = p.started.elapsed();
                setup
                    .stats
                    .record_success(id, took, size_of(&path), uploaded_bytes);
                match uploaded_bytes {
                    Some(uploaded) => tracing::info!(checkpoint = id, path = %path.display(),
                        to = %setup.store.location(), uploaded_bytes = uploaded, "checkpoint complete"),
                    None => tracing::info!(checkpoint = id, path = %path.display(), "checkpoint complete"),
                }
                if let Some(request) = p.savepoint {
                    savepoint(setup, id, &path, &request);
                }
                Ok(())
            }
            Err(reason) => {
                setup.store.abandon(&tmp);
                if let Some(request) = p.savepoint {
                    // Someone waits for it: the next checkpoint carries it.
                    tracing::info!(target = %request.target, "the savepoint is retried with the next checkpoint");
                    setup.control.request_savepoint(request);
                }
                self.failed(id, p.started.elapsed(), reason)
            }
        }
    }

    /// Counts checkpoint `id`'s failure (after `took`); an error once more
    /// failed in a row than tolerated.
    fn failed(&mut self, id: u64, took: Duration, reason: String) -> Result<(), CoordinatorError> {
        self.failures_in_a_row += 1;
        self.setup.stats.record_failure(id, took, &reason);
        tracing::warn!(checkpoint = id, %reason, failures_in_a_row = self.failures_in_a_row, "checkpoint failed");
        if self.failures_in_a_row > self.setup.tolerable_failures {
            return Err(CoordinatorError::TooManyFailures {
                count: self.failures_in_a_row,
                tolerated: self.setup.tolerable_failures,
                reason,
            });
        }
        Ok(())
    }

    /// Fails the checkpoints in flight for longer than the timeout: a stage
    /// or sink that never acknowledges its barrier (a write blocked on a
    /// lock, a half-open connection) fails them, counted against
    /// `tolerable_failures`, instead of stalling the pipeline unseen.
    fn expire(&mut self) -> Result<(), CoordinatorError> {
        let timeout = self.setup.timeout;
        let late: Vec<u64> = self
            .pending
            .iter()
            .filter(|(_, p)| p.started.elapsed() >= timeout)
            .map(|(id, _)| *id)
            .collect();
        for id in late {
            let expected = self.setup.expected_acks;
            let p = self.pending.get_mut(&id).expect("listed above");
            let barrier = if p.positions.is_some() {
                ""
            } else {
                "; the source had not placed its barrier"
            };
            p.failure.get_or_insert(format!(
                "not complete within the checkpoint timeout ({timeout:?}): {} of {expected} stages and sinks acknowledged its barrier{barrier}",
                p.acks
            ));
            self.expired.insert(id);
            while self.expired.len() > EXPIRED_KEPT {
                self.expired.pop_first();
            }
            self.finish(id)?;
        }
        // None in flight, and none started for an interval and the
        // timeout: the source cannot place a barrier (every edge before a
        // blocked stage or sink is full).
        let due = self.setup.interval.saturating_add(timeout);
        if self.pending.is_empty() && self.last_ended.elapsed() >= due {
            self.last_ended = Instant::now();
            let id = self.last_id + 1;
            return self.failed(
                id,
                due,
                format!(
                    "not started within the checkpoint timeout ({timeout:?}) after its interval: the source could not place its barrier, the pipeline is stalled (a stage or sink blocks, and every edge before it is full)"
                ),
            );
        }
        Ok(())
    }

    /// Writes checkpoint `id`, all of whose parts `p` holds, in its folder
    /// `tmp` (the swapped-in plugins its operators ran beside the
    /// snapshots), and makes it visible.
    fn complete(&self, id: u64, p: &mut Pending, tmp: &std::path::Path) -> Result<Completed, StoreError> {
        let setup = &self.setup;
        let mut snapshots = std::mem::take(&mut p.snapshots);
        snapshots.sort_by(|a, b| (&a.operator, a.worker).cmp(&(&b.operator, b.worker)));
        let operators = std::mem::take(&mut p.operators);
        let mut metadata = Metadata {
            plugins: super::plugins::include(tmp, &operators, &self.plugin_files)?,
            operators,
            snapshots,
            sinks: std::mem::take(&mut p.sinks),
            ..Metadata::new(id, &setup.pipeline, &setup.manifest_hash, setup.key_groups)
        };
        metadata.set_positions(p.positions.take().expect("checked by on_event"));
        setup.store.complete(tmp, metadata)
    }

    /// Removes the folders of the checkpoints the pipeline stopped before.
    fn abandon_pending(&self) {
        for id in self.pending.keys() {
            tracing::debug!(
                checkpoint = id,
                "the pipeline stopped before this checkpoint completed"
            );
            self.setup
                .store
                .abandon(&super::pending_dir(self.setup.store.dir(), *id));
        }
    }
}

/// Copies complete checkpoint `id` (in `path`) to the savepoint `request`
/// asked for, and stops the pipeline when it asked to. A copy that fails
/// is reported to `mailer savepoint`; the checkpoint stays complete.
fn savepoint(setup: &CoordinatorSetup, id: u64, path: &std::path::Path, request: &SavepointRequest) {
    let written = Location::parse(&request.target).and_then(|target| match target {
        Location::Folder(dir) => write_savepoint(path, &dir).map_err(|e| e.to_string()),
        Location::Bucket(url) => RemoteCheckpoints::savepoint(&url, &setup.s3)
            .map_err(|e| e.to_string())
            .and_then(|bucket| bucket.write_savepoint(path)),
    });
    match written {
        Ok(()) => {
            tracing::info!(checkpoint = id, target = %request.target, "savepoint written");
            report_done(setup.store.dir(), &request.target);
            if request.stop {
                tracing::info!("stopping the pipeline after its savepoint");
                setup.control.stop();
            }
        }
        Err(e) => {
            let reason = format!("cannot write the savepoint to `{}`: {e}", request.target);
            tracing::warn!(checkpoint = id, %reason, "savepoint failed; the pipeline goes on");
            report_failure(setup.store.dir(), &request.target, &reason);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The savepoint requests handed back.
    #[derive(Default)]
    struct Requests {
        savepoints: Mutex<Vec<SavepointRequest>>,
    }

    impl RunControl for Requests {
        fn stop(&self) {}

        fn request_savepoint(&self, request: SavepointRequest) {
            self.savepoints.lock().unwrap().push(request);
        }
    }

    fn setup(dir: &std::path::Path, tolerable_failures: u32) -> CoordinatorSetup {
        CoordinatorSetup {
            store: CheckpointStore::open(dir, 3).unwrap(),
            expected_acks: 2,
            pipeline: "p".into(),
            manifest_hash: "h".into(),
            key_groups: 128,
            operators: Vec::new(),
            plugin_files: HashMap::new(),
            tolerable_failures,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(600),
            stats: Arc::default(),
            control: Arc::new(Requests::default()),
            outcomes: None,
            s3: S3Settings::default(),
        }
    }

    fn started(id: u64) -> CheckpointEvent {
        CheckpointEvent::Started {
            id,
            positions: [("source".to_owned(), serde_json::json!({ "next": id }))].into(),
            savepoint: None,
            swaps: Vec::new(),
        }
    }

    fn acked(id: u64) -> CheckpointEvent {
        CheckpointEvent::Acked {
            id,
            snapshots: Vec::new(),
        }
    }

    fn failed(id: u64) -> CheckpointEvent {
        CheckpointEvent::Failed {
            id,
            reason: "disk full".into(),
        }
    }

    #[test]
    fn a_failed_savepoint_is_asked_for_again_and_swaps_are_recorded_with_their_plugins() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = setup(dir.path(), 3);
        s.operators = vec![OperatorMeta {
            name: "m".into(),
            world: Some("map".into()),
            plugin_digest: Some("v1".into()),
            manifest_digest: None,
        }];
        let control = Arc::new(Requests::default());
        s.control = control.clone();
        let store = s.store.clone();
        let request = SavepointRequest {
            target: dir.path().join("sp").display().to_string(),
            stop: false,
        };
        let (tx, rx) = flume::unbounded();
        for id in 1..=2 {
            store.begin(id).unwrap();
        }
        // The swapped-in version, as the plugin store keeps it.
        let file = dir.path().join("store-v2.wasm");
        std::fs::write(&file, b"component v2").unwrap();
        let mut first = started(1);
        if let CheckpointEvent::Started { savepoint, swaps, .. } = &mut first {
            *savepoint = Some(request.clone());
            *swaps = vec![PluginSwap {
                operator: "m".into(),
                digest: "v2".into(),
                file,
            }];
        }
        for e in [first, failed(1), acked(1), started(2), acked(2), acked(2)] {
            tx.send(e).unwrap();
        }
        drop(tx);
        run_coordinator(s, rx).unwrap();
        assert_eq!(*control.savepoints.lock().unwrap(), [request]);
        let (path, latest) = store.latest().unwrap().unwrap();
        assert_eq!(latest.operators[0].plugin_digest.as_deref(), Some("v2"));
        assert_eq!(latest.operators[0].manifest_digest.as_deref(), Some("v1"));
        // The checkpoint keeps the swapped-in version beside its state (the
        // manifest's own needs no copy).
        assert_eq!(latest.plugins, [("v2".to_owned(), 12)].into());
        let kept = crate::checkpoint::plugin_in(&path, "v2");
        assert_eq!(std::fs::read(kept).unwrap(), b"component v2");
    }

    #[test]
    fn a_checkpoint_whose_swapped_in_plugin_is_gone_fails_and_is_never_complete() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = setup(dir.path(), 3);
        s.expected_acks = 1;
        s.operators = vec![OperatorMeta {
            name: "m".into(),
            world: Some("map".into()),
            plugin_digest: Some("v2".into()),
            manifest_digest: Some("v1".into()),
        }];
        let gone = dir.path().join("store/v2.wasm");
        s.plugin_files = [("v2".to_owned(), gone.clone())].into();
        let (stats, store) = (s.stats.clone(), s.store.clone());
        store.begin(1).unwrap();
        let (tx, rx) = flume::unbounded();
        tx.send(started(1)).unwrap();
        tx.send(acked(1)).unwrap();
        drop(tx);
        run_coordinator(s, rx).unwrap();
        assert_eq!(stats.failed.load(Ordering::Relaxed), 1);
        assert!(store.latest().unwrap().is_none());
        let reason = stats.history()[0].reason.clone().unwrap_or_default();
        assert!(
            reason.contains("copying a swapped-in plugin") && reason.contains(&gone.display().to_string()),
            "{reason}"
        );
    }

    #[test]
    fn failed_checkpoints_are_counted_and_tolerated_up_to_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), 1);
        let stats = s.stats.clone();
        let store = s.store.clone();
        let (tx, rx) = flume::unbounded();
        for id in 1..=2 {
            store.begin(id).unwrap();
        }
        for e in [started(1), failed(1), acked(1), started(2), acked(2), acked(2)] {
            tx.send(e).unwrap();
        }
        drop(tx);
        run_coordinator(s, rx).unwrap();
        assert_eq!(stats.failed.load(Ordering::Relaxed), 1);
        assert_eq!(stats.completed.load(Ordering::Relaxed), 1);
        let (_, latest) = store.latest().unwrap().unwrap();
        assert_eq!(
            (latest.id, latest.source.clone()),
            (2, serde_json::json!({ "next": 2 }))
        );
        assert!(
            !super::super::pending_dir(dir.path(), 1).exists(),
            "a failed checkpoint's folder is removed"
        );
    }

    #[test]
    fn a_checkpoint_a_stage_never_acknowledges_fails_at_the_timeout_and_its_late_acks_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = setup(dir.path(), 1);
        s.timeout = Duration::from_millis(300);
        let (stats, store) = (s.stats.clone(), s.store.clone());
        store.begin(1).unwrap();
        let (tx, rx) = flume::unbounded();
        // One of the two acknowledgements, then nothing for a while: the
        // second stage is stuck. Its acknowledgement comes after the
        // timeout, too late to complete the checkpoint.
        tx.send(started(1)).unwrap();
        tx.send(acked(1)).unwrap();
        let late = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(700));
            tx.send(acked(1)).unwrap();
        });
        run_coordinator(s, rx).unwrap();
        late.join().unwrap();
        assert_eq!(stats.failed.load(Ordering::Relaxed), 1);
        assert_eq!(stats.completed.load(Ordering::Relaxed), 0);
        assert!(store.latest().unwrap().is_none());
        let reason = stats.history()[0].reason.clone().unwrap_or_default();
        assert!(
            reason.contains("not complete within the checkpoint timeout (300ms)")
                && reason.contains("1 of 2"),
            "{reason}"
        );
    }

    #[test]
    fn a_checkpoint_the_source_cannot_start_fails_after_its_interval_and_the_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = setup(dir.path(), 0);
        (s.interval, s.timeout) = (Duration::from_millis(100), Duration::from_millis(200));
        let (tx, rx) = flume::unbounded::<CheckpointEvent>();
        // The source is blocked: no checkpoint starts, its sender stays.
        let started = Instant::now();
        let stopped = run_coordinator(s, rx);
        drop(tx);
        let Err(CoordinatorError::TooManyFailures { reason, .. }) = stopped else {
            panic!("a stalled pipeline stops: {stopped:?}");
        };
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(
            reason.contains("the source could not place its barrier"),
            "{reason}"
        );
    }

    #[test]
    fn more_failures_in_a_row_than_tolerated_stop_the_pipeline() {
        let dir = tempfile::tempdir().unwrap();
        let s = setup(dir.path(), 1);
        let (tx, rx) = flume::unbounded();
        for id in 1..=2 {
            s.store.begin(id).unwrap();
            for e in [started(id), failed(id), acked(id)] {
                tx.send(e).unwrap();
            }
        }
        drop(tx);
        let err = run_coordinator(s, rx).unwrap_err();
        assert!(err.to_string().contains("2 checkpoints in a row failed"), "{err}");
    }
}
