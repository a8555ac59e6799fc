//! The trials of a new version of a keyed process operator against a
//! brute-force model (issue 47): random interleavings of batches, canaries
//! started, promoted and rolled back, shadows started and ended, plain
//! swaps arriving during a trial, checkpoints and crashes, through a real
//! [`WasmProcess`](super::WasmProcess) made as the operator factory makes
//! it ([`WasmNode`]), running the test plugins `counter-v1` (counts each
//! key, emits `<key>\t<count>`) and `counter-next` (the same state, emits
//! `<key>\t<count>\tnext`, fails a value `flaky<n>` with n a multiple of
//! ten), under `on_error = "skip"` and `"fail"`, in both call modes.
//!
//! A swap point travels in the stream: the harness keeps the points
//! requested (as `swap::Swaps` publishes them) in flight until a
//! [`Step::Deliver`] hands the oldest one to the operator, so a batch may
//! run between a promotion's or a plain swap's request and its point.
//!
//! After every batch the operator's output must be exactly the model's:
//! each record by the version the model says owns its key's key group at
//! that moment (a running canary's key groups the canary's, every key the
//! new version's from its swap point on, none the canary's once it rolled
//! back), in the documented order (the current version's keys, then the
//! canary's, then what a canary failed under `fail`, given back to the
//! current version), each key's count one above the last record handled;
//! a run may end with an error only when the current version fails a
//! record under `fail`. After every step the operator's state, read back
//! with a state query, must hold the model's counts, and every trial's
//! stats the state the model gives it; a shadow must compare the records
//! the model says it picks, and never change the output or the state.

use crate::batch::Batch;
use crate::failure::{FailureHandler, FailurePolicy, FailureStats, OperatorError, preview};
use crate::operators::wasm::WasmNode;
use crate::operators::{InstanceContext, Operator, OperatorIdentity, StateOpener};
use crate::plugin::{CallMode, CallStats, Grants, LoadedPlugin, PluginEngine, PluginLimits, World};
use crate::record::Record;
use crate::state::{BackendKind, SnapshotSource, StateBackend, StateError, StateRequest};
use crate::swap::{CanaryState, CanaryStats, ShadowState, ShadowStats, SwapKind, SwapPoint};
use bytes::Bytes;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

mod checks;

/// The operator's name.
const OPERATOR: &str = "counts";

/// The pipeline's key groups (its `max_parallelism`).
const KEY_GROUPS: u32 = 128;

/// The keys records have.
const KEYS: [&str; 8] = ["k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"];

/// How many cases the property test runs: 64, or
/// `MAILER_TRIAL_MODEL_CASES`.
fn cases() -> u32 {
    std::env::var("MAILER_TRIAL_MODEL_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(64)
}

/// A version of the operator's plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    /// `counter-v1`: counts, never fails.
    V1,
    /// `counter-next`: counts, marks its lines `next`, fails flaky records.
    Next,
}

impl Version {
    /// Whether this version fails a record of value `value`.
    fn fails(self, value: &str) -> bool {
        self == Version::Next
            && value
                .strip_prefix("flaky")
                .and_then(|n| n.parse::<u64>().ok())
                .is_some_and(|n| n % 10 == 0)
    }

    /// The line this version emits for `key` counted `count` times.
    fn line(self, key: &str, count: u64) -> String {
        match self {
            Version::V1 => format!("{key}\t{count}"),
            Version::Next => format!("{key}\t{count}\tnext"),
        }
    }

    /// Its compiled plugin.
    fn plugin(self) -> &'static Arc<LoadedPlugin> {
        let plugins = plugins();
        match self {
            Version::V1 => &plugins.v1,
            Version::Next => &plugins.next,
        }
    }
}

/// The two versions, compiled once for every case.
struct Plugins {
    /// Kept for the plugins' lifetime (its ticker drives their deadlines).
    _engine: PluginEngine,
    v1: Arc<LoadedPlugin>,
    next: Arc<LoadedPlugin>,
}

/// The plugins, loaded from `plugins/dist/` as a pipeline loads them.
fn plugins() -> &'static Plugins {
    static PLUGINS: OnceLock<Plugins> = OnceLock::new();
    PLUGINS.get_or_init(|| {
        let engine = PluginEngine::new().expect("a plugin engine");
        let load = |file: &str| {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../plugins/dist")
                .join(file);
            assert!(path.exists(), "{} is missing: run `just plugins`", path.display());
            engine
                .load(&path, World::Process, OPERATOR)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        };
        let (v1, next) = (load("counter-v1.wasm"), load("counter-next.wasm"));
        Plugins {
            _engine: engine,
            v1,
            next,
        }
    })
}

/// A process operator `counts` on worker 0 of 1 running `version`, its
/// state fresh or restored from the snapshot in `restore`, granted
/// `grants`, as [`WasmNode::instantiate`] makes it for a pipeline.
fn make_operator(
    version: Version,
    (policy, mode): (FailurePolicy, CallMode),
    failures: &Arc<FailureStats>,
    restore: Option<&Path>,
    grants: &Arc<Grants>,
) -> Box<dyn Operator> {
    let node = WasmNode {
        plugin: version.plugin().clone(),
        limits: PluginLimits::default(),
        mode,
        state_ttl: HashMap::new(),
    };
    let calls = Arc::new(CallStats::detached(false));
    let identity = OperatorIdentity {
        name: OPERATOR,
        calls: &calls,
        grants,
    };
    let source = restore.map(|dir| SnapshotSource {
        path: dir.to_owned(),
        backend: BackendKind::Memory.name().to_owned(),
        same_key_groups: true,
    });
    // What a restore from a checkpoint opens: the snapshot's entries.
    let restored = |_: &str| -> Result<Box<dyn StateBackend>, StateError> {
        let source = source.as_ref().expect("opened only to restore");
        BackendKind::Memory.restore("trial", 0, std::slice::from_ref(source), &|_| true)
    };
    let open_state: Option<&StateOpener<'_>> = match restore {
        Some(_) => Some(&restored),
        None => None,
    };
    let ctx = InstanceContext {
        dead_letter: None,
        late_output: None,
        state: &BackendKind::Memory,
        stage: "trial",
        worker: 0,
        op_index: 1,
        key_groups: KEY_GROUPS,
        parallelism: 1,
        restore: None,
        open_state,
    };
    let failure = FailureHandler::new(OPERATOR, policy, None, failures.clone()).for_worker(0);
    node.instantiate(&identity, &ctx, failure)
        .expect("the operator is made")
}

/// One step of a run.
#[derive(Debug, Clone)]
enum Step {
    /// A batch of records, each (index into [`KEYS`], value).
    Records(Vec<(usize, String)>),
    /// A canary of `version` on `quarters` quarters of the key groups is
    /// requested (refused while a trial runs).
    StartCanary { version: Version, quarters: u8 },
    /// A shadow of `version` comparing one record in `every` is requested
    /// (refused while a trial runs).
    StartShadow { version: Version, every: u8 },
    /// The trial passed: the watcher promotes the canary, or the shadow is
    /// promoted by hand (a swap to its version, ending it).
    Promote,
    /// The trial ends: the watcher rolls the canary back, or the shadow is
    /// aborted.
    RollBack,
    /// A plain swap to `version` is requested, ending a trial that runs.
    Swap(Version),
    /// The oldest swap point in flight reaches the operator.
    Deliver,
    /// A checkpoint barrier, behind the points in flight: the state is
    /// snapshotted, the version it runs recorded.
    Checkpoint,
    /// The process dies: the operator comes back from the last checkpoint,
    /// with its version; what came after it is forgotten.
    Crash,
}

/// What a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrialKind {
    /// A canary on the key groups below `groups`.
    Canary { groups: u32 },
    /// A shadow comparing one record in `every`.
    Shadow { every: u64 },
}

/// Where the model says a trial is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    /// Requested, not ended.
    Running,
    /// Promoted: a canary keeps its key groups until the swap point.
    Promoted,
    /// A canary rolled back, a shadow aborted.
    Ended,
}

/// A trial's stats, shared with the operator.
#[derive(Debug, Clone)]
enum TrialStats {
    /// A canary's.
    Canary(Arc<CanaryStats>),
    /// A shadow's.
    Shadow(Arc<ShadowStats>),
}

/// A trial requested in the run.
#[derive(Debug)]
struct Trial {
    version: Version,
    kind: TrialKind,
    status: Status,
    stats: TrialStats,
}

/// A swap point in flight: a replacement of the version, or the start of
/// a trial.
#[derive(Debug, Clone, Copy)]
enum Point {
    /// A swap (a plain one, or a trial's promotion) to this version.
    Replace(Version),
    /// The start of this trial (its index in [`Run::trials`]).
    Trial(usize),
}

/// The last checkpoint: its snapshot, the version it names and the counts
/// it holds.
#[derive(Debug)]
struct Checkpoint {
    dir: PathBuf,
    version: Version,
    counts: BTreeMap<String, u64>,
}

/// What the model says the operator holds.
#[derive(Debug)]
struct Model {
    /// The version it runs.
    current: Version,
    /// The canary the operator runs (a trial's number), until it drops it.
    canary: Option<usize>,
    /// The shadow the operator runs, and the records it saw and compared.
    shadow: Option<usize>,
    shadow_seen: u64,
    shadow_compared: u64,
    /// Each key's count.
    counts: BTreeMap<String, u64>,
}

impl Model {
    /// An operator running `current` on state holding `counts`.
    fn at(current: Version, counts: BTreeMap<String, u64>) -> Self {
        Self {
            current,
            canary: None,
            shadow: None,
            shadow_seen: 0,
            shadow_compared: 0,
            counts,
        }
    }
}

/// A run: the operator, the swaps it is sent, and the model.
struct Run {
    policy: FailurePolicy,
    mode: CallMode,
    folder: tempfile::TempDir,
    failures: Arc<FailureStats>,
    operator: Box<dyn Operator>,
    trials: Vec<Trial>,
    /// The trial the swaps know to be running (one at a time).
    requested_trial: Option<usize>,
    in_flight: VecDeque<Point>,
    checkpoint: Option<Checkpoint>,
    checkpoints: usize,
    model: Model,
}

/// Records grouped by key, keys in order of first appearance, each key's
/// values in order.
fn by_key(records: &[(String, String)]) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (key, value) in records {
        match groups.iter_mut().find(|(k, _)| k == key) {
            Some((_, values)) => values.push(value.clone()),
            None => groups.push((key.clone(), vec![value.clone()])),
        }
    }
    groups
}

/// Whether a shadow comparing one record in `every` picks a key's records
/// `seen..seen + count` (all or none): when one of them is an `every`-th.
fn shadow_picks(every: u64, seen: u64, count: u64) -> bool {
    (seen..seen + count).any(|n| n % every == 0)
}

impl Run {
    /// A fresh run of `counter-v1` under `policy` in `mode`.
    fn new(policy: FailurePolicy, mode: CallMode) -> Self {
        let failures = Arc::new(FailureStats::default());
        let operator = make_operator(Version::V1, (policy, mode), &failures, None, &Arc::default());
        Self {
            policy,
            mode,
            folder: tempfile::tempdir().expect("a temporary folder"),
            failures,
            operator,
            trials: Vec::new(),
            requested_trial: None,
            in_flight: VecDeque::new(),
            checkpoint: None,
            checkpoints: 0,
            model: Model::at(Version::V1, BTreeMap::new()),
        }
    }

    /// The trial the swaps know to be running, if any: one a worker rolled
    /// back is gone (its watcher takes it).
    fn requested_trial(&mut self) -> Option<usize> {
        self.requested_trial = self
            .requested_trial
            .filter(|&id| self.trials[id].status != Status::Ended);
        self.requested_trial
    }

    /// Ends trial `id` as `status`, as the swaps do (a canary's watcher, a
    /// shadow's promotion or abort, a swap point ending it).
    fn end_trial(&mut self, id: usize, status: Status) {
        let trial = &mut self.trials[id];
        match (&trial.stats, status) {
            (TrialStats::Canary(stats), Status::Promoted) => stats.end(CanaryState::Promoted),
            (TrialStats::Canary(stats), _) => stats.end(CanaryState::RolledBack),
            (TrialStats::Shadow(stats), Status::Promoted) => stats.end(ShadowState::Promoted),
            (TrialStats::Shadow(stats), _) => stats.end(ShadowState::Aborted),
        }
        trial.status = status;
    }

    /// Takes `step`, then checks every trial's stats and the state.
    fn step(&mut self, step: &Step) -> Result<(), TestCaseError> {
        match step {
            Step::Records(records) => {
                let records: Vec<(String, String)> = records
                    .iter()
                    .map(|(key, value)| (KEYS[*key].to_owned(), value.clone()))
                    .collect();
                self.records(&records)?;
            }
            Step::StartCanary { version, quarters } => {
                if self.requested_trial().is_none() {
                    let share = f64::from(*quarters) / 4.0;
                    let stats = Arc::new(CanaryStats::new(share, KEY_GROUPS, self.failures.clone()));
                    let groups = u32::from(*quarters) * KEY_GROUPS / 4;
                    self.request_trial(*version, TrialKind::Canary { groups }, TrialStats::Canary(stats));
                }
            }
            Step::StartShadow { version, every } => {
                if self.requested_trial().is_none() {
                    let stats = Arc::new(ShadowStats::new(1.0 / f64::from(*every)));
                    let every = u64::from(*every);
                    self.request_trial(*version, TrialKind::Shadow { every }, TrialStats::Shadow(stats));
                }
            }
            Step::Promote => {
                if let Some(id) = self.requested_trial() {
                    self.requested_trial = None;
                    self.end_trial(id, Status::Promoted);
                    self.in_flight.push_back(Point::Replace(self.trials[id].version));
                }
            }
            Step::RollBack => {
                if let Some(id) = self.requested_trial() {
                    self.requested_trial = None;
                    self.end_trial(id, Status::Ended);
                }
            }
            Step::Swap(version) => {
                if let Some(id) = self.requested_trial() {
                    self.requested_trial = None;
                    self.end_trial(id, Status::Ended);
                }
                self.in_flight.push_back(Point::Replace(*version));
            }
            Step::Deliver => {
                if let Some(point) = self.in_flight.pop_front() {
                    self.deliver(point)?;
                }
            }
            Step::Checkpoint => {
                // The points in flight were sent before the barrier: they
                // reach the operator first.
                while let Some(point) = self.in_flight.pop_front() {
                    self.deliver(point)?;
                }
                self.checkpoints += 1;
                let dir = self
                    .folder
                    .path()
                    .join(format!("checkpoint-{}", self.checkpoints));
                let snapshotted = self.operator.snapshot(&dir);
                prop_assert!(matches!(snapshotted, Ok(true)), "snapshot: {:?}", snapshotted);
                self.checkpoint = Some(Checkpoint {
                    dir,
                    version: self.model.current,
                    counts: self.model.counts.clone(),
                });
            }
            Step::Crash => self.restart(),
        }
        self.check_trials()?;
        self.check_state()
    }

    /// Requests trial `kind` of `version` counting into `stats`.
    fn request_trial(&mut self, version: Version, kind: TrialKind, stats: TrialStats) {
        self.trials.push(Trial {
            version,
            kind,
            status: Status::Running,
            stats,
        });
        let id = self.trials.len() - 1;
        self.requested_trial = Some(id);
        self.in_flight.push_back(Point::Trial(id));
    }

    /// Hands `point` to the operator, as a worker's chain does.
    fn deliver(&mut self, point: Point) -> Result<(), TestCaseError> {
        match point {
            Point::Replace(version) => {
                let swapped = apply(&mut self.operator, version.plugin(), SwapKind::Replace);
                prop_assert!(swapped.is_ok(), "swap: {:?}", swapped.err());
                self.model.current = version;
                self.model.canary = None;
                self.model.shadow = None;
            }
            Point::Trial(id) => {
                let plugin = self.trials[id].version.plugin();
                let started = match &self.trials[id].stats {
                    TrialStats::Canary(stats) => {
                        self.model.canary = Some(id);
                        apply(&mut self.operator, plugin, SwapKind::Canary(stats.clone()))
                    }
                    TrialStats::Shadow(stats) => {
                        self.model.shadow = Some(id);
                        self.model.shadow_seen = 0;
                        self.model.shadow_compared = 0;
                        apply(&mut self.operator, plugin, SwapKind::Shadow(stats.clone()))
                    }
                };
                prop_assert!(started.is_ok(), "trial: {:?}", started.err());
            }
        }
        Ok(())
    }

    /// The process died: a new operator from the last checkpoint's
    /// snapshot (none: the first version on empty state), running the
    /// version it names, with no trial and no swap in flight.
    fn restart(&mut self) {
        let (version, dir, counts) = match &self.checkpoint {
            Some(c) => (c.version, Some(c.dir.as_path()), c.counts.clone()),
            None => (Version::V1, None, BTreeMap::new()),
        };
        self.failures = Arc::new(FailureStats::default());
        self.operator = make_operator(
            version,
            (self.policy, self.mode),
            &self.failures,
            dir,
            &Arc::default(),
        );
        self.requested_trial = None;
        self.in_flight.clear();
        self.model = Model::at(version, counts);
    }

    /// Runs `records` through the operator and checks its output (or its
    /// error) against the model's.
    fn records(&mut self, records: &[(String, String)]) -> Result<(), TestCaseError> {
        let batch = records
            .iter()
            .map(|(key, value)| Record::new(Some(Bytes::from(key.clone())), value.clone(), 0))
            .collect();
        let expected = self.expect(records);
        let got = self.operator.process(Batch::Records(batch));
        match (expected, got) {
            (Ok(lines), Ok(out)) => {
                let got: Vec<String> = out
                    .into_records()
                    .into_iter()
                    .map(|r| String::from_utf8_lossy(&r.value).into_owned())
                    .collect();
                prop_assert_eq!(got, lines, "the output of {:?}", records);
                self.check_shadow()?;
            }
            (Err((key, value)), Err(OperatorError::RecordFailed { record, .. })) => {
                let failed = Record::new(Some(Bytes::from(key)), value, 0);
                prop_assert_eq!(record, preview(&failed), "the record the run ended on");
                // The run ended: it starts again from the last checkpoint.
                self.restart();
            }
            (expected, got) => {
                let got = got.map(Batch::into_records);
                return Err(TestCaseError::fail(format!(
                    "{records:?}: expected {expected:?}, got {got:?}"
                )));
            }
        }
        Ok(())
    }
}

/// Runs `steps` under `policy` in `mode` against the model.
fn run(policy: FailurePolicy, mode: CallMode, steps: &[Step]) -> Result<(), TestCaseError> {
    let mut run = Run::new(policy, mode);
    for (i, step) in steps.iter().enumerate() {
        run.step(step)
            .map_err(|e| TestCaseError::fail(format!("step {i} ({step:?}): {e}")))?;
    }
    Ok(())
}

/// Either version.
fn version() -> impl Strategy<Value = Version> {
    prop_oneof![Just(Version::V1), Just(Version::Next)]
}

/// A record's value: a plain number, a flaky one `counter-next` handles,
/// or one it fails.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => (0u32..100).prop_map(|n| n.to_string()),
        1 => (0u32..10, 1u32..10).prop_map(|(tens, ones)| format!("flaky{}", tens * 10 + ones)),
        1 => (0u32..10).prop_map(|tens| format!("flaky{}", tens * 10)),
    ]
}

/// A step, records the most likely.
fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        8 => vec((0..KEYS.len(), value()), 1..8).prop_map(Step::Records),
        3 => (version(), 1u8..4).prop_map(|(version, quarters)| Step::StartCanary { version, quarters }),
        2 => (version(), 1u8..4).prop_map(|(version, every)| Step::StartShadow { version, every }),
        2 => Just(Step::Promote),
        1 => Just(Step::RollBack),
        1 => version().prop_map(Step::Swap),
        4 => Just(Step::Deliver),
        1 => Just(Step::Checkpoint),
        1 => Just(Step::Crash),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(cases()))]

    #[test]
    fn trials_keep_one_version_per_key_group_and_the_state_for_the_survivor(
        policy in prop_oneof![Just(FailurePolicy::Skip), Just(FailurePolicy::Fail)],
        mode in prop_oneof![Just(CallMode::Batch), Just(CallMode::Record)],
        steps in vec(step(), 1..48),
    ) {
        run(policy, mode, &steps)?;
    }
}

/// The keys split at every canary share the run uses: some in the
/// canary's key groups, some not (else the model would check little).
#[test]
fn the_keys_fall_on_both_sides_of_every_canary() {
    for quarters in 1..4 {
        let groups = quarters * KEY_GROUPS / 4;
        let canary = KEYS
            .iter()
            .filter(|k| crate::key_group::of_key(k.as_bytes(), KEY_GROUPS) < groups)
            .count();
        assert!(
            (1..KEYS.len()).contains(&canary),
            "{canary} of {} keys in the canary of {quarters}/4",
            KEYS.len()
        );
    }
}

/// A shadow that traps when the directory its operator was granted is gone
/// cannot be made again: the shadow ends as failed, and the operator goes
/// on with the current version's output for that record and after it.
#[test]
fn a_shadow_whose_instance_cannot_be_made_again_ends_and_the_operator_goes_on() {
    let granted = tempfile::tempdir().unwrap();
    let grants = Arc::new(Grants {
        dir: Some(granted.path().to_owned()),
        ..Grants::default()
    });
    let failures = Arc::new(FailureStats::default());
    let policy = (FailurePolicy::Fail, CallMode::Batch);
    let mut operator = make_operator(Version::V1, policy, &failures, None, &grants);
    let stats = Arc::new(ShadowStats::new(1.0));
    apply(
        &mut operator,
        Version::Next.plugin(),
        SwapKind::Shadow(stats.clone()),
    )
    .expect("the shadow starts");
    let batch = |value: &str| Batch::Records(vec![Record::new(Some(Bytes::from("k0")), value.to_owned(), 0)]);
    let values = |out: Batch| -> Vec<String> {
        (0..out.len())
            .map(|i| String::from_utf8_lossy(&out.record(i).value).into_owned())
            .collect()
    };
    assert_eq!(values(operator.process(batch("1")).unwrap()), ["k0\t1"]);
    assert_eq!(stats.view().compared, 1);
    drop(granted);
    let out = operator.process(batch("trap")).expect("the operator goes on");
    assert_eq!(values(out), ["k0\t2"]);
    assert_eq!(stats.view().state, ShadowState::Failed);
    assert_eq!(values(operator.process(batch("3")).unwrap()), ["k0\t3"]);
    assert_eq!(stats.view().compared, 1, "the ended shadow compares nothing more");
}

/// Hands `operator` a swap point running `plugin` as `kind` says, as a
/// worker's chain does.
fn apply(
    operator: &mut Box<dyn Operator>,
    plugin: &Arc<LoadedPlugin>,
    kind: SwapKind,
) -> Result<(), OperatorError> {
    let point = SwapPoint::new(1, "op", plugin.clone(), 1).with_kind(kind);
    operator
        .plugin_slot()
        .expect("a process operator has a plugin slot")
        .apply(&point)
}
