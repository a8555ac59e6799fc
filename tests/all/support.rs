//! What the integration tests share: paths, manifests in temp folders, runs
//! of the `mailer` binary.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

pub use mailer_test_support::{Workdir, peak_rss_kib, plugin, repo, rss_kib};

/// The `mailer` binary, logging at `info` (or as `MAILER_TEST_LOG` says,
/// when set: `MAILER_TEST_LOG=mailer::cluster=debug` while debugging a test).
pub fn mailer() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_mailer"));
    let level = std::env::var("MAILER_TEST_LOG").unwrap_or_else(|_| "info".to_owned());
    c.env("MAILER_LOG", level);
    c
}

/// Manifest operators: `key_by` over 2 workers, then the `count` reduce
/// plugin as operator `counts` (each key's running count per record).
pub const KEYED_COUNT: &str = r#"[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "counts"
type = "reduce"
plugin = "{plugin:count}"
"#;

/// Runs `mailer run <args> <m>` to completion, which must succeed; its log.
pub fn run_to_end(m: &Path, args: &[&str]) -> String {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push(m.to_str().unwrap());
    let out = run(&all);
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

/// `mailer validate` refuses the manifest at `path` with an error holding
/// `expected` and located in the file; `what` names the case.
pub fn assert_refused(path: &Path, expected: &str, what: &str) {
    let out = run(&["validate", path.to_str().unwrap()]);
    assert!(!out.status.success(), "accepted: {what}");
    let err = stderr(&out);
    assert!(err.contains(expected), "{what}\nwanted {expected:?} in:\n{err}");
    let file = path.file_name().unwrap().to_string_lossy();
    assert!(err.contains(&format!("{file}:")), "located: {err}");
}

/// Runs `mailer <args>` to completion.
pub fn run(args: &[&str]) -> Output {
    mailer().args(args).output().unwrap()
}

/// Runs `mailer <args>` to completion; its output and its peak resident
/// memory in KiB: the largest `VmHWM` (the process's own high-water mark)
/// read every 5 ms while it runs. (`wait4`'s `ru_maxrss` will not do: it
/// keeps the high-water mark of the forked copy of this test process too.)
pub fn run_with_peak_rss(args: &[&str]) -> (Output, u64) {
    use std::io::Read;
    let mut child = mailer()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            r.read_to_end(&mut bytes).unwrap();
            bytes
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let mut peak = 0;
    let status = loop {
        if let Some(hwm) = peak_rss_kib(child.id()) {
            peak = peak.max(hwm);
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    };
    let output = Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    (output, peak)
}

/// Starts `mailer run <manifest>` with stdout and stderr piped.
pub fn spawn_run(manifest: &Path) -> Child {
    mailer()
        .arg("run")
        .arg(manifest)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Asks a running `mailer` to drain (SIGTERM).
pub fn sigterm(child: &Child) {
    // SAFETY: kill(2) on our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The last value printed for each key of `key<TAB>value` lines.
pub fn last_values(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(|l| {
            let (k, v) = l
                .split_once('\t')
                .unwrap_or_else(|| panic!("not key<TAB>value: {l:?}"));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

/// Word counts of `text`, computed directly.
pub fn count_words(text: &str) -> BTreeMap<String, String> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for w in text.split_ascii_whitespace() {
        *counts.entry(w.to_owned()).or_default() += 1;
    }
    counts.into_iter().map(|(k, v)| (k, v.to_string())).collect()
}

/// A `key=value` field of the final "pipeline finished" log line.
pub fn finished_field(stderr: &str, field: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("pipeline finished"))
        .unwrap_or_else(|| panic!("no `pipeline finished` line in:\n{stderr}"));
    let start = line.find(&format!("{field}=")).unwrap() + field.len() + 1;
    line[start..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// The (value, reason) of each dead letter a file sink of JSON wrote to
/// `file` in `w`.
pub fn dead_letters(w: &Workdir, file: &str) -> Vec<(String, String)> {
    w.read(file)
        .lines()
        .map(|l| {
            let d: serde_json::Value = serde_json::from_str(l).unwrap();
            let reason = d["headers"]["mailer.error"].as_str().unwrap().to_owned();
            (d["value"].as_str().unwrap().to_owned(), reason)
        })
        .collect()
}

/// The admin token the tests' manifests read from `MAILER_ADMIN_TOKEN`.
pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running `mailer`, killed if a failing test leaves it running.
pub struct Running(pub Child);

impl std::ops::Deref for Running {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Running {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs the manifest `m` with `MAILER_ADMIN_TOKEN` set, output piped.
pub fn spawn_manifest(m: &Path) -> Running {
    Running(
        mailer()
            .env("MAILER_ADMIN_TOKEN", TOKEN)
            .arg("run")
            .arg(m)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// Waits until `addr` accepts connections; fails after 180 s (a pipeline
/// compiling large plugins on a loaded machine can take a minute).
pub fn wait_for(addr: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(180);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Waits until a checkpoint completes in the folder `checkpoints` after
/// this call (its `LATEST` changes); fails after 60 s.
pub fn wait_for_new_checkpoint(checkpoints: &Path) {
    let latest = || std::fs::read_to_string(checkpoints.join("LATEST")).ok();
    let before = latest();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while latest() == before {
        assert!(std::time::Instant::now() < deadline, "no checkpoint within 60 s");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// An HTTP client that returns error statuses as answers.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// `GET url` (with the bearer `token`): the status and the JSON body.
pub fn get(url: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    let (status, body) = get_text(url, token);
    (status, serde_json::from_str(&body).unwrap_or_default())
}

/// `GET url` (with the bearer `token`): the status and the body.
pub fn get_text(url: &str, token: Option<&str>) -> (u16, String) {
    let mut req = agent().get(url);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let mut res = req.call().unwrap();
    (
        res.status().as_u16(),
        res.body_mut().read_to_string().unwrap_or_default(),
    )
}

/// `mailer run <m> <args>` with the admin token in the environment,
/// its log piped.
pub fn spawn_with_token(m: &Path, args: &[&str]) -> std::process::Child {
    mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .arg("run")
        .arg(m)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// `mailer plugin <args>` against the running pipeline of `m` (the
/// subcommand first, then the manifest, then the rest of `args`).
pub fn mailer_plugin(m: &Path, args: &[&str]) -> std::process::Output {
    mailer()
        .env("MAILER_ADMIN_TOKEN", TOKEN)
        .arg("plugin")
        .arg(args[0])
        .arg(m)
        .args(&args[1..])
        .output()
        .unwrap()
}

std::thread_local! {
    /// The SIGKILLs this test's thread delivered to `mailer` runs (or that
    /// a run's test hook delivered to itself), for the crash sweeps' summary.
    static KILLS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts a SIGKILL that ended a run (one [`sigkill`] delivered, or a test
/// hook's own) toward this thread's [`Sweep`].
pub fn count_kill() {
    KILLS.with(|k| k.set(k.get() + 1));
}

/// Kills `child` with SIGKILL (if it still runs) and counts the kill.
pub fn sigkill(child: &mut Child) {
    if child.try_wait().unwrap().is_none() {
        child.kill().unwrap();
        count_kill();
    }
}

/// What a crash sweep's sink promises.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// The whole output is one uninterrupted run's: nothing lost, nothing twice.
    ExactlyOnce,
    /// Nothing lost; records may repeat (counted, not a failure).
    AtLeastOnce,
}

/// How the whole output of a run compares with what one uninterrupted run
/// writes, each item (a line, a record, a row) counted as often as it
/// appears: `lost` copies missing, `duplicated` copies of expected items
/// beyond their number, `unexpected` copies of items no run writes.
pub struct Tally {
    pub lost: u64,
    pub duplicated: u64,
    pub unexpected: u64,
    /// A few of each, for the failure message.
    examples: Vec<String>,
}

impl Tally {
    /// `got` and `expected` as multisets: how many times each item appears.
    /// Also fits "each key's final count" (a key counted n times is n copies
    /// of it).
    pub fn of_counts<K: Ord + std::fmt::Debug>(got: &BTreeMap<K, u64>, expected: &BTreeMap<K, u64>) -> Tally {
        let mut t = Tally {
            lost: 0,
            duplicated: 0,
            unexpected: 0,
            examples: Vec::new(),
        };
        let mut shown = [0; 3];
        let mut example = |t: &mut Tally, kind: usize, line: String| {
            if shown[kind] < 5 {
                shown[kind] += 1;
                t.examples.push(line);
            }
        };
        for (item, &want) in expected {
            let have = got.get(item).copied().unwrap_or(0);
            if have < want {
                t.lost += want - have;
                example(&mut t, 0, format!("lost {}x {item:?}", want - have));
            } else if have > want {
                t.duplicated += have - want;
                example(&mut t, 1, format!("{}x more {item:?}", have - want));
            }
        }
        for (item, &have) in got {
            if !expected.contains_key(item) && have > 0 {
                t.unexpected += have;
                example(&mut t, 2, format!("unexpected {have}x {item:?}"));
            }
        }
        t
    }

    /// [`Tally::of_counts`] of two lists of items.
    pub fn of_items<T: Ord + std::fmt::Debug>(
        got: impl IntoIterator<Item = T>,
        expected: impl IntoIterator<Item = T>,
    ) -> Tally {
        let multiset = |items: &mut dyn Iterator<Item = T>| {
            let mut m = BTreeMap::new();
            for i in items {
                *m.entry(i).or_insert(0) += 1;
            }
            m
        };
        Tally::of_counts(
            &multiset(&mut got.into_iter()),
            &multiset(&mut expected.into_iter()),
        )
    }

    fn fails(&self, delivery: Delivery) -> bool {
        self.lost > 0 || self.unexpected > 0 || (self.duplicated > 0 && delivery == Delivery::ExactlyOnce)
    }

    /// Fails unless the output is exactly one run's (`what` names it).
    pub fn assert_exactly_once(&self, what: &str) {
        assert!(
            !self.fails(Delivery::ExactlyOnce),
            "{what}: lost={} duplicated={} unexpected={}, e.g. {:?}",
            self.lost,
            self.duplicated,
            self.unexpected,
            self.examples
        );
    }
}

/// One crash sweep, started before its first kill: at its end,
/// [`Sweep::report`] prints the summary line `just soak` sums
///
/// `soak sink=<file|kafka|postgres> delivery=<exactly-once|at-least-once>
/// backend=<memory|rocksdb> checkpoints=<local|s3> test=<name> kills=<n>
/// lost=<n> duplicated=<n> unexpected=<n>`
///
/// to standard error and, when `MAILER_SOAK_SUMMARY` names a file, appends
/// it there, then fails the test if the sink broke its promise.
pub struct Sweep {
    sink: &'static str,
    backend: &'static str,
    delivery: Delivery,
    checkpoints: &'static str,
    kills_before: u64,
}

impl Sweep {
    /// An exactly-once sweep of a `sink` on a state `backend`, with local
    /// checkpoints.
    pub fn start(sink: &'static str, backend: &'static str) -> Sweep {
        Sweep {
            sink,
            backend,
            delivery: Delivery::ExactlyOnce,
            checkpoints: "local",
            kills_before: KILLS.with(|k| k.get()),
        }
    }

    pub fn at_least_once(self) -> Sweep {
        Sweep {
            delivery: Delivery::AtLeastOnce,
            ..self
        }
    }

    pub fn checkpoints_in_s3(self) -> Sweep {
        Sweep {
            checkpoints: "s3",
            ..self
        }
    }

    /// The kills since [`Sweep::start`] on this thread.
    pub fn kills(&self) -> u64 {
        KILLS.with(|k| k.get()) - self.kills_before
    }

    /// Prints and records the summary line of the sweep's `tally`, then fails
    /// if anything was lost or unexpected, or duplicated exactly once.
    pub fn report(self, tally: Tally) {
        let thread = std::thread::current();
        let line = format!(
            "soak sink={} delivery={} backend={} checkpoints={} test={} kills={} lost={} duplicated={} unexpected={}",
            self.sink,
            match self.delivery {
                Delivery::ExactlyOnce => "exactly-once",
                Delivery::AtLeastOnce => "at-least-once",
            },
            self.backend,
            self.checkpoints,
            thread.name().unwrap_or("unnamed"),
            self.kills(),
            tally.lost,
            tally.duplicated,
            tally.unexpected,
        );
        eprintln!("{line}");
        if let Some(file) = std::env::var_os("MAILER_SOAK_SUMMARY") {
            use std::io::Write;
            // One write of the whole line to a file opened for appending:
            // the lines of tests running at once do not interleave.
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)
                .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
                .unwrap_or_else(|e| panic!("writing to MAILER_SOAK_SUMMARY {file:?}: {e}"));
        }
        assert!(
            !tally.fails(self.delivery),
            "{line}\nthe output differs from one uninterrupted run's, e.g. {:?}",
            tally.examples
        );
    }
}

#[test]
fn a_tally_counts_lost_repeated_and_unexpected_copies() {
    let t = Tally::of_items(["a", "a", "a", "c", "d", "d"], ["a", "b", "b", "c"]);
    assert_eq!((t.lost, t.duplicated, t.unexpected), (2, 2, 2));
    assert!(t.fails(Delivery::ExactlyOnce) && t.fails(Delivery::AtLeastOnce));
    let repeated = Tally::of_items(["a", "a", "b"], ["a", "b"]);
    assert!(repeated.fails(Delivery::ExactlyOnce) && !repeated.fails(Delivery::AtLeastOnce));
    // Final counts per key: a count below one run's lost records, above it repeated ones.
    let counts = |c: &[(&'static str, u64)]| c.iter().copied().collect::<BTreeMap<_, _>>();
    let t = Tally::of_counts(&counts(&[("x", 7), ("y", 12)]), &counts(&[("x", 10), ("y", 10)]));
    assert_eq!((t.lost, t.duplicated, t.unexpected), (3, 2, 0));
}
