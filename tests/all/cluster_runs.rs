//! Cluster mode run whole: the same manifest in several `mailer` processes
//! of one consumer group, against the real broker. Word count (6 input
//! partitions -> split-words -> key_by -> count -> Kafka, exactly once):
//! the union of the processes' committed output holds each word's counts
//! 1..n exactly once, through kills, stops, joins and scaling.

use crate::kafka::{bootstrap, consume_all, create_topic, produce, unique_topic};
use crate::support::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

/// A word-count pipeline in cluster mode reading `input`, writing `output`.
pub(crate) fn word_count(w: &Workdir, input: &str, output: &str) -> PathBuf {
    word_count_with(w, input, output, "")
}

/// The word count with `extra` at its end: more `[cluster]` settings, or
/// sections.
pub(crate) fn word_count_with(w: &Workdir, input: &str, output: &str, extra: &str) -> PathBuf {
    w.manifest(&format!(
        r#"
[pipeline]
name = "{input}"
batch_size = 50

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}"
format = "string"

[[operators]]
type = "flat_map"
plugin = "{{plugin:split-words}}"

[[operators]]
type = "key_by"
parallelism = 1

[[operators]]
name = "counts"
type = "reduce"
plugin = "{{plugin:count}}"

[sink]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topic = "{output}"
exactly_once = true

[cluster]
group = "{input}"
instance_id = "${{MAILER_INSTANCE}}"
commit_interval = "300ms"
session_timeout = "6s"
{extra}
"#
    ))
}

/// One process of the cluster, its log in the work folder.
pub(crate) struct Member {
    child: Child,
    log: PathBuf,
}

impl Member {
    pub(crate) fn start(w: &Workdir, manifest: &Path, instance: &str) -> Self {
        Self::start_with(w, manifest, instance, &[])
    }

    /// [`Member::start`] with more environment variables (test hooks).
    pub(crate) fn start_with(w: &Workdir, manifest: &Path, instance: &str, env: &[(&str, &str)]) -> Self {
        let n = std::fs::read_dir(w.path(".")).map_or(0, |d| d.count());
        let log = w.path(&format!("{instance}-{n}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let child = cli(instance)
            .envs(env.iter().copied())
            .arg("run")
            .arg(manifest)
            .stdout(Stdio::null())
            .stderr(Stdio::from(file))
            .spawn()
            .unwrap();
        Self { child, log }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM: it commits, leaves the group and exits cleanly.
    pub(crate) fn stop(mut self) -> String {
        sigterm(&self.child);
        let status = self.child.wait().unwrap();
        let log = self.log();
        assert!(status.success(), "a stopped member failed:\n{log}");
        log
    }

    /// SIGKILL: nothing committed after its last commit.
    pub(crate) fn kill(mut self) -> String {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        self.log()
    }

    /// Waits up to `within` for the process to end on its own (killing it
    /// after that): its exit status, and its log.
    pub(crate) fn exit(mut self, within: Duration) -> (std::process::ExitStatus, String) {
        let deadline = Instant::now() + within;
        while self.child.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        (self.child.wait().unwrap(), self.log())
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to the process.
    pub(crate) fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own child process.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// Fails the test when the process ended.
    pub(crate) fn assert_running(&mut self) {
        if let Some(status) = self.child.try_wait().unwrap() {
            panic!("a member exited ({status}):\n{}", self.log());
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `lines` lines of words, each word `w<i>` for i in 0..`words`.
pub(crate) fn lines(from: usize, count: usize, words: usize) -> Vec<(String, String)> {
    (from..from + count)
        .map(|i| {
            let line = format!(
                "w{} w{} w{}",
                i % words,
                (i * 7 + 3) % words,
                (i * 13 + 5) % words
            );
            (format!("line{i}"), line)
        })
        .collect()
}

/// How often each word occurs in `input`.
pub(crate) fn occurrences(input: &[(String, String)]) -> BTreeMap<String, u64> {
    let mut n = BTreeMap::new();
    for (_, line) in input {
        for word in line.split_whitespace() {
            *n.entry(word.to_owned()).or_default() += 1;
        }
    }
    n
}

/// Reads `output` (read_committed) until it holds `expected` records (or
/// 240 s pass while `members` keep running), then checks each word's
/// counts are exactly 1..=n.
pub(crate) fn assert_exact_counts(output: &str, input: &[(String, String)], members: &mut [&mut Member]) {
    let expected = occurrences(input);
    let total: u64 = expected.values().sum();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut got = consume_all(output, 1);
    while (got.len() as u64) < total && Instant::now() < deadline {
        for m in members.iter_mut() {
            m.assert_running();
        }
        std::thread::sleep(Duration::from_millis(500));
        got = consume_all(output, 1);
    }
    let logs: Vec<String> = members.iter().map(|m| m.log()).collect();
    assert_counts_exact(&got, &expected, &logs.join("\n----\n"));
}

/// Each word's counts in `got` are exactly 1..=n, n its occurrences in
/// `expected`; `logs` are shown when they are not.
pub(crate) fn assert_counts_exact(got: &[(String, String)], expected: &BTreeMap<String, u64>, logs: &str) {
    let total: u64 = expected.values().sum();
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (word, count) in got {
        counts
            .entry(word.clone())
            .or_default()
            .push(count.parse().unwrap_or_else(|_| panic!("not a count: {count}")));
    }
    for (word, n) in expected {
        let mut seen = counts.remove(word).unwrap_or_default();
        seen.sort_unstable();
        let want: Vec<u64> = (1..=*n).collect();
        assert!(
            seen == want,
            "word {word}: counts {:?} (len {}), expected 1..={n}; the members' logs:\n{logs}",
            &seen[..seen.len().min(20)],
            seen.len()
        );
    }
    assert!(counts.is_empty(), "words never written: {:?}", counts.keys());
    assert_eq!(got.len() as u64, total, "records in the output");
}

/// A `mailer` command as process `instance` of the cluster (the broker's
/// address and the admin token in its environment).
fn cli(instance: &str) -> std::process::Command {
    let mut command = mailer();
    command
        .env("KAFKA_BOOTSTRAP", bootstrap())
        .env("MAILER_INSTANCE", instance)
        .env("MAILER_ADMIN_TOKEN", TOKEN);
    command
}

/// `mailer cluster status` of manifest `m` (pipeline `pipeline`) once its
/// group settled: `members` members, every source and repartition
/// partition held by one and read to its end. Fails after 120 s.
pub(crate) fn settled_status(m: &Path, pipeline: &str, members: usize) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = cli("status")
            .args(["cluster", "status", m.to_str().unwrap()])
            .output()
            .unwrap();
        let text = stdout(&status);
        let partitions: Vec<Vec<&str>> = text
            .lines()
            .filter(|l| l.starts_with(pipeline))
            .map(|l| l.split_whitespace().collect())
            .collect();
        let settled = status.status.success()
            && text.contains(&format!("{members} member(s)"))
            && !partitions.is_empty()
            && partitions
                .iter()
                .all(|f| f.len() == 5 && f[3] == "0" && f[4].starts_with("mailer-"));
        if settled {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the group did not settle:\n{text}\n{}",
            stderr(&status)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The cluster's status once the group settled with `members` and each of
/// them holds some of `pipeline`'s partitions; fails after 90 s.
pub(crate) fn held_by_each(m: &Path, pipeline: &str, members: &[&str]) -> String {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let text = settled_status(m, pipeline, members.len());
        let holds = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(pipeline))
                .any(|l| holder_is(l, name))
        };
        if members.iter().all(|name| holds(name)) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the partitions were never shared:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// How many keyed tasks (repartition partitions) member `name` holds in a
/// cluster status `text`.
pub(crate) fn keyed_tasks_of(text: &str, name: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(".repartition/") && holder_is(l, name))
        .count()
}

/// Whether a status line's partition is held by member `name`.
fn holder_is(line: &str, name: &str) -> bool {
    line.split_whitespace()
        .nth(4)
        .is_some_and(|c| c.ends_with(&format!("-{name}")))
}

pub(crate) fn input_and_output(prefix: &str) -> (String, String) {
    let (input, output) = (
        unique_topic(&format!("{prefix}-in")),
        unique_topic(&format!("{prefix}-out")),
    );
    create_topic(&input, 6);
    create_topic(&output, 1);
    (input, output)
}

#[test]
fn three_processes_count_words_exactly_once() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-wc");
    let m = word_count(&w, &input, &output);
    let first = lines(0, 300, 40);
    produce(&input, &first);
    let mut members: Vec<Member> = ["a", "b", "c"].iter().map(|i| Member::start(&w, &m, i)).collect();
    // The first process may take every partition and read the first
    // lines alone; a cooperative rebalance then moves partitions in two
    // rounds. The second lines come once two processes hold keyed tasks.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let text = settled_status(&m, &input, 3);
        let holders: std::collections::BTreeSet<&str> = text
            .lines()
            .filter(|l| l.starts_with(&format!("{input}.")) && l.contains(".repartition/"))
            .filter_map(|l| l.split_whitespace().nth(4))
            .collect();
        if holders.len() >= 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the keyed tasks were never shared:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let second = lines(300, 300, 40);
    produce(&input, &second);
    let all: Vec<_> = first.into_iter().chain(second).collect();
    assert_exact_counts(&output, &all, &mut members.iter_mut().collect::<Vec<_>>());
    let text = settled_status(&m, &input, 3);
    let source_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{input}/")))
        .collect();
    assert_eq!(source_lines.len(), 6, "{text}");
    for line in source_lines {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[3], "0", "the source is read and committed: {line}");
        assert!(fields[4].starts_with("mailer-"), "held by a member: {line}");
    }
    let logs: Vec<String> = members.into_iter().map(Member::stop).collect();
    let with_tasks = logs
        .iter()
        .filter(|l| l.contains("task restored from its changelog"))
        .count();
    assert!(
        with_tasks >= 2,
        "the keyed tasks were shared:\n{}",
        logs.join("\n----\n")
    );
    // Stopped cleanly: nothing more is written.
    assert_exact_counts(&output, &all, &mut []);
}

#[test]
fn a_killed_a_stopped_and_a_new_process_lose_and_repeat_nothing() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-chaos");
    let m = word_count(&w, &input, &output);
    let mut input_so_far = lines(0, 200, 30);
    produce(&input, &input_so_far);
    let mut members: Vec<(&str, Member)> = ["a", "b", "c"]
        .into_iter()
        .map(|name| (name, Member::start(&w, &m, name)))
        .collect();
    // Once the group spread the partitions and the keyed tasks hold state,
    // the process holding the most keyed tasks dies at once, mid-run, and
    // comes back: its transactional id fences whatever its killed self
    // left open, and the group hands its partitions out again, each task's
    // state restored from its changelog.
    let text = held_by_each(&m, &input, &["a", "b", "c"]);
    assert_exact_counts(
        &output,
        &input_so_far,
        &mut members.iter_mut().map(|(_, p)| p).collect::<Vec<_>>(),
    );
    let keyed_of = |name: &str| keyed_tasks_of(&text, name);
    let victim = (0..members.len())
        .max_by_key(|&i| keyed_of(members[i].0))
        .unwrap();
    let (name, killed) = members.remove(victim);
    let more = lines(200, 200, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    std::thread::sleep(Duration::from_millis(300));
    let killed_log = killed.kill();
    members.push((name, Member::start(&w, &m, name)));
    let more = lines(400, 200, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(
        &output,
        &input_so_far,
        &mut members.iter_mut().map(|(_, p)| p).collect::<Vec<_>>(),
    );
    // Another stops as asked.
    let (_, stopped) = members.remove(0);
    let stopped_log = stopped.stop();
    let more = lines(600, 200, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(
        &output,
        &input_so_far,
        &mut members.iter_mut().map(|(_, p)| p).collect::<Vec<_>>(),
    );
    // A newcomer joins.
    members.push(("d", Member::start(&w, &m, "d")));
    let more = lines(800, 200, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(
        &output,
        &input_so_far,
        &mut members.iter_mut().map(|(_, p)| p).collect::<Vec<_>>(),
    );
    // Which member restored the moved state depends on how the group
    // spread the repartition partitions: any of them will do.
    let mut logs = vec![killed_log, stopped_log];
    logs.extend(members.into_iter().map(|(_, p)| p.stop()));
    let restored_state = logs.iter().any(|log| {
        log.lines()
            .any(|l| l.contains("task restored from its changelog") && !l.contains("records=0 "))
    });
    assert!(
        restored_state,
        "a task moved with its state restored from the changelog:\n{}",
        logs.join("\n----\n")
    );
    assert_exact_counts(&output, &input_so_far, &mut []);
}

#[test]
fn a_restarted_process_restores_its_tasks_from_the_state_it_kept() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-kept");
    let m = word_count_with(&w, &input, &output, "[state]\nbackend = \"rocksdb\"\n");
    let mut input_so_far = lines(0, 300, 40);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    let first_log = a.stop();
    assert!(
        first_log.contains("task revoked") && first_log.contains("kept=true"),
        "the stopped process kept its tasks' state:\n{first_log}"
    );
    let more = lines(300, 100, 40);
    produce(&input, &more);
    input_so_far.extend(more);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    let log = a.stop();
    // Every change of the first run is in the kept state: the restore
    // starts past them and applies none.
    let restored: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("task restored from its changelog"))
        .collect();
    assert!(!restored.is_empty(), "{log}");
    for line in restored {
        assert!(
            line.contains("records=0 ") && !line.contains("from_offset=0 "),
            "restored from the kept state, not the changelog's start: {line}\n{log}"
        );
    }
}

/// Every `name{…} value` sample of `metrics` whose labels contain `label`.
fn samples(metrics: &str, name: &str, label: &str) -> Vec<u64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[test]
fn a_process_shows_its_tasks_and_their_restores_in_metrics_and_status() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-metrics");
    let port = free_port();
    let admin = format!("[admin]\nlisten = \"127.0.0.1:{port}\"\ntoken = \"${{MAILER_ADMIN_TOKEN}}\"\n");
    let m = word_count_with(&w, &input, &output, &admin);
    let mut input_so_far = lines(0, 300, 40);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    let scrape = || get_text(&format!("http://127.0.0.1:{port}/metrics"), None).1;
    let metrics = scrape();
    let source_records: u64 = samples(&metrics, "mailer_task_records_total", &format!("task=\"{input}/"))
        .iter()
        .sum();
    assert_eq!(
        source_records, 300,
        "every source record counted by its task:\n{metrics}"
    );
    let keyed_records: u64 = samples(&metrics, "mailer_task_records_total", ".repartition/")
        .iter()
        .sum();
    assert_eq!(
        keyed_records,
        300 * 3,
        "every word counted by its keyed task:\n{metrics}"
    );
    let restoring = samples(&metrics, "mailer_task_restoring", ".repartition/");
    assert!(
        !restoring.is_empty() && restoring.iter().all(|&r| r == 0),
        "{metrics}"
    );
    let (_, snapshot) = get(&format!("http://127.0.0.1:{port}/dashboard/snapshot"), None);
    let tasks = snapshot["tasks"].as_array().expect("the dashboard's tasks");
    assert_eq!(tasks.len(), 6 + restoring.len(), "{snapshot}");
    a.stop();

    // Restarted, in memory: every task's state comes back from its changelog.
    let more = lines(300, 100, 40);
    produce(&input, &more);
    input_so_far.extend(more);
    let mut a = Member::start(&w, &m, "a");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a]);
    let metrics = scrape();
    let restored: u64 = samples(&metrics, "mailer_task_restored_records", ".repartition/")
        .iter()
        .sum();
    // Each task's last restore, as logged (a rebalance may restore it twice).
    let field = |line: &str, name: &str| {
        line.split(&format!("{name}="))
            .nth(1)
            .unwrap()
            .split(' ')
            .next()
            .unwrap()
            .to_owned()
    };
    let last_restores: BTreeMap<String, u64> = a
        .log()
        .lines()
        .filter(|l| l.contains("task restored from its changelog"))
        .map(|l| (field(l, "task"), field(l, "records").parse().unwrap()))
        .collect();
    let logged: u64 = last_restores.values().sum();
    assert!(restored >= 40, "the first run's counts were restored:\n{metrics}");
    assert_eq!(
        restored,
        logged,
        "the metrics and the log agree:\n{metrics}\n{}",
        a.log()
    );
    let status = cli("status")
        .args(["cluster", "status", m.to_str().unwrap()])
        .output()
        .unwrap();
    let text = stdout(&status);
    assert!(status.status.success(), "{}", stderr(&status));
    assert!(
        text.contains(&format!("@127.0.0.1:{port}")),
        "the member's admin address:\n{text}"
    );
    assert!(
        text.contains("task(s), 0 restoring"),
        "its tasks, none restoring now:\n{text}"
    );
    assert!(!text.contains("tasks not shown"), "{text}");

    // Each word's live count, asked of the processes: the one running the
    // word's task answers.
    let counts = occurrences(&input_so_far);
    let state = |args: &[&str]| {
        let out = cli("state").arg("state").args(args).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_str::<serde_json::Value>(&stdout(&out)).unwrap()
    };
    let manifest = m.to_str().unwrap();
    for (word, n) in counts.iter().take(5) {
        let got = state(&["get", manifest, "counts", word]);
        assert_eq!(got["state"]["accumulator"], n.to_string(), "{word}: {got}");
    }
    let scan = state(&["scan", manifest, "counts", "--limit", "3"]);
    let scanned: Vec<(String, String)> = scan["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let count = k["state"]["accumulator"].as_str().unwrap().to_owned();
            (k["key"].as_str().unwrap().to_owned(), count)
        })
        .collect();
    let first: Vec<(String, String)> = counts
        .iter()
        .take(3)
        .map(|(w, n)| (w.clone(), n.to_string()))
        .collect();
    assert_eq!(scanned, first);
    a.stop();
}

/// Runs `mailer plugin <args…>` on manifest `m`: its stdout as JSON.
fn plugin_cli(m: &Path, args: &[&str]) -> serde_json::Value {
    let (command, rest) = args.split_first().unwrap();
    let out = cli("cli")
        .args(["plugin", command, m.to_str().unwrap()])
        .args(rest)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    serde_json::from_str(&stdout(&out)).unwrap()
}

#[test]
fn a_plugin_swap_reaches_every_process_and_switches_at_a_commit() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-swap");
    // Two processes of one machine: each takes a free port and publishes it.
    let admin = "[admin]\nlisten = \"127.0.0.1:0\"\ntoken = \"${MAILER_ADMIN_TOKEN}\"\n";
    let m = word_count_with(&w, &input, &output, admin);
    let first = lines(0, 300, 40);
    produce(&input, &first);
    let mut a = Member::start(&w, &m, "a");
    let mut b = Member::start(&w, &m, "b");
    assert_exact_counts(&output, &first, &mut [&mut a, &mut b]);
    let by_ten = plugin("count-by-ten");
    let swapped = plugin_cli(&m, &["swap", "counts", by_ten.to_str().unwrap()]);
    let members = swapped.as_object().unwrap();
    assert_eq!(members.len(), 2, "both processes were asked: {swapped}");
    assert!(
        members.values().all(|answer| answer["operator"] == "counts"),
        "{swapped}"
    );
    // Applied at each process's next commit.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = plugin_cli(&m, &["list"]);
        let applied = listed.as_object().unwrap().values().all(|member| {
            member["swaps"]
                .as_array()
                .is_some_and(|swaps| swaps.iter().any(|s| s["status"] == "applied"))
        });
        if applied {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the swap was not applied everywhere: {listed}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // From now on every record adds ten, from where the count stood.
    let second = lines(300, 300, 40);
    produce(&input, &second);
    let (before, after) = (occurrences(&first), occurrences(&second));
    let total: u64 = before.values().chain(after.values()).sum();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut got = consume_all(&output, 1);
    while (got.len() as u64) < total && Instant::now() < deadline {
        a.assert_running();
        b.assert_running();
        std::thread::sleep(Duration::from_millis(500));
        got = consume_all(&output, 1);
    }
    let logs = format!("{}\n----\n{}", a.log(), b.log());
    let mut counts: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (word, count) in &got {
        counts.entry(word).or_default().push(count.parse().unwrap());
    }
    for (word, seen) in &mut counts {
        seen.sort_unstable();
        let n1 = before.get(*word).copied().unwrap_or(0);
        let n2 = after.get(*word).copied().unwrap_or(0);
        let want: Vec<u64> = (1..=n1).chain((1..=n2).map(|k| n1 + 10 * k)).collect();
        assert_eq!(seen, &want, "word {word}; the logs:\n{logs}");
    }
    assert_eq!(got.len() as u64, total, "records in the output");
    for log in [a.stop(), b.stop()] {
        assert!(log.contains("plugin swapped at a commit"), "{log}");
    }
}

#[test]
fn a_standby_takes_over_a_stopped_process_tasks_warm() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-standby");
    let m = word_count_with(&w, &input, &output, "standby_replicas = 1\n");
    let mut input_so_far = lines(0, 300, 40);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    let mut b = Member::start(&w, &m, "b");
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    // Each keeps the other's tasks warm (picked every 2 s, or kept from
    // the rebalance that moved them): six copies in all, each logged once
    // it read its changelog to the end.
    let deadline = Instant::now() + Duration::from_secs(120);
    let caught_up = |m: &Member| m.log().matches("standby caught up with its changelog").count();
    while caught_up(&a) + caught_up(&b) < 6 {
        assert!(
            Instant::now() < deadline,
            "no standbys:\n{}\n----\n{}",
            a.log(),
            b.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Only once the group settled do the picks (every 2 s) keep exactly the
    // other member's tasks warm.
    let text = settled_status(&m, &input, 2);
    std::thread::sleep(Duration::from_secs(5));
    // The group balances partitions, not keyed tasks: the member holding
    // more repartition partitions (keyed tasks) is the one to stop.
    let keyed_of = |suffix: &str| {
        text.lines()
            .filter(|l| l.contains(".repartition/"))
            .filter(|l| l.split_whitespace().nth(4).is_some_and(|c| c.ends_with(suffix)))
            .count()
    };
    let (stopped, mut survivor, moved) = match keyed_of("-a") > keyed_of("-b") {
        true => (a, b, keyed_of("-a")),
        false => (b, a, keyed_of("-b")),
    };
    let before_stop = survivor.log().len();
    stopped.stop();
    let more = lines(300, 100, 40);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut survivor]);
    let log = survivor.stop();
    // The survivor runs all six keyed tasks: its own go on untouched (the
    // cooperative rebalance moves only the stopped one's), and those that
    // moved come from its standbys; none restores from its changelog's
    // start.
    let restored: Vec<&str> = log[before_stop..]
        .lines()
        .filter(|l| l.contains("task restored from its changelog"))
        .collect();
    assert!(restored.len() >= moved, "{moved} tasks moved:\n{text}\n{log}");
    for line in restored {
        assert!(
            !line.contains("from_offset=0 "),
            "restored from the start: {line}\n{log}"
        );
    }
}

#[test]
fn scaling_from_one_to_three_to_two_processes_keeps_counts_exact() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-scale");
    let m = word_count(&w, &input, &output);
    let mut input_so_far = lines(0, 200, 25);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    std::thread::sleep(Duration::from_secs(3));
    let mut b = Member::start(&w, &m, "b");
    let c = Member::start(&w, &m, "c");
    for round in 1..4 {
        let more = lines(round * 200, 200, 25);
        produce(&input, &more);
        input_so_far.extend(more);
        std::thread::sleep(Duration::from_millis(700));
    }
    c.stop();
    let more = lines(800, 200, 25);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    b.stop();
    a.stop();
}

/// Event-time tumbling windows over JSON events (user, ts, amount), in
/// cluster mode or (`cluster` false) as one bounded process.
/// The windowed pipeline (W3-like, event time) reading `input`, in cluster
/// mode or in one process; `watermark` adds to its `[watermark]`.
fn windows(w: &Workdir, input: &str, output: &str, cluster: bool, watermark: &str) -> PathBuf {
    let (bounded, exactly_once, section) = if cluster {
        (
            "",
            "exactly_once = true",
            format!(
                "[cluster]\ngroup = \"{input}\"\ninstance_id = \"${{MAILER_INSTANCE}}\"\ncommit_interval = \"300ms\"\nsession_timeout = \"6s\"\nrepartition_partitions = 4\n"
            ),
        )
    } else {
        ("bounded = true", "", String::new())
    };
    let name = if cluster { "cluster.toml" } else { "one.toml" };
    w.write(
        name,
        &format!(
            r#"
[pipeline]
name = "{input}"
batch_size = 50

[source]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{input}"]
group_id = "{input}-{name}"
format = "json"
key_field = "user"
timestamp_field = "ts"
{bounded}

[watermark]
max_out_of_orderness = "2s"
{watermark}

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "per-ten-seconds"
type = "window"
window = "tumbling"
size = "10s"
aggregates = ["count", "sum"]
field = "amount"

[sink]
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topic = "{output}"
{exactly_once}

{section}"#
        ),
    )
}

#[test]
fn windows_in_a_cluster_of_three_equal_one_process() {
    cluster_windows_equal_one_process(6, &["a", "b", "c"], "");
}

#[test]
fn idle_source_partitions_hold_no_window_back_in_a_cluster() {
    // Two of the six partitions never get a record: without idle_timeout
    // the keyed tasks would wait for them forever.
    cluster_windows_equal_one_process(4, &["a", "b"], "idle_timeout = \"1s\"");
}

#[test]
fn a_keyed_task_that_moves_hears_from_source_partitions_quiet_since_before() {
    // Source tasks mark their watermark when it rises and their idleness
    // once. A keyed task that moves starts with no marks: it must still
    // hear from the quiet partitions that stayed where they were, or its
    // windows never fire again.
    let w = Workdir::new();
    let (input, one_out, cluster_out) = window_topics("cluster-moved");
    let start = an_hour_ago(10_000);
    let record = |i: i64, ts: i64, p: i32| {
        let user = format!("u{}", i % 9);
        let value = format!(r#"{{"user":"{user}","ts":{ts},"amount":{}}}"#, i % 17);
        (input.clone(), p, user, value)
    };
    let flush = |p: i32, ts: i64| {
        let user = format!("flush{p}");
        (
            input.clone(),
            p,
            user.clone(),
            format!(r#"{{"user":"{user}","ts":{ts},"amount":0}}"#),
        )
    };
    let windows_of = |records: &[(String, i32, String, String)]| {
        let real = records.iter().filter(|r| !r.2.starts_with("flush"));
        real.map(|r| {
            let v: serde_json::Value = serde_json::from_str(&r.3).unwrap();
            (r.2.clone(), v["ts"].as_i64().unwrap() / 10_000)
        })
        .collect::<std::collections::BTreeSet<_>>()
        .len()
    };
    let m = windows(&w, &input, &cluster_out, true, r#"idle_timeout = "1s""#);
    let (a, b) = (Member::start(&w, &m, "a"), Member::start(&w, &m, "b"));
    let text = held_by_each(&m, &input, &["a", "b"]);
    // Stopped: the one holding keyed tasks while the other holds a
    // partition that stays quiet after the first records (1 to 5).
    let quiet_of = |name: &str| {
        text.lines()
            .any(|l| (1..6).any(|p| l.starts_with(&format!("{input}/{p} "))) && holder_is(l, name))
    };
    let ((moving, staying), stopped) = if keyed_tasks_of(&text, "a") > 0 && quiet_of("b") {
        ((a, b), "a")
    } else {
        assert!(keyed_tasks_of(&text, "b") > 0 && quiet_of("a"), "{text}");
        ((b, a), "b")
    };
    // First records in partitions 0 to 3, far ahead at the end of each:
    // their windows fire; partitions 4 and 5 are idle from the start, 1 to
    // 3 once they are read.
    let mut first: Vec<_> = (0..600i64)
        .map(|i| record(i, start + i * 333, i as i32 % 4))
        .collect();
    let later = start + 600_000;
    first.extend((0..4).map(|p| flush(p, later)));
    send_all(&first);
    let fired = windows_of(&first);
    let deadline = Instant::now() + Duration::from_secs(120);
    while consume_all(&cluster_out, 1)
        .iter()
        .filter(|(k, _)| !k.starts_with("flush"))
        .count()
        < fired
    {
        assert!(
            Instant::now() < deadline,
            "the first windows never fired:\n{}\n----\n{}",
            moving.log(),
            staying.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(3));
    let log = moving.stop();
    assert!(!log.is_empty(), "{stopped} ran");
    // Then records in partition 0 only: the moved keyed tasks must hear
    // partitions 1 to 5 are idle from the member that kept them.
    let mut second: Vec<_> = (0..600i64).map(|i| record(i, later + i * 333, 0)).collect();
    second.push(flush(0, later + 600_000));
    send_all(&second);
    let all: Vec<_> = first.into_iter().chain(second).collect();
    let one = windows(&w, &input, &one_out, false, r#"idle_timeout = "1s""#);
    let one_log = run_to_end(&one, &[]);
    let real = |key: &str| !key.starts_with("flush");
    let expected = committed_sorted(&one_out, &real);
    assert_eq!(
        expected.len(),
        windows_of(&all),
        "one process fired every window:\n{one_log}"
    );
    let (got, logs) = cluster_output(&cluster_out, expected.len(), real, vec![staying]);
    assert_eq!(got.len(), expected.len(), "windows fired after the move:\n{logs}");
    assert!(got == expected, "the cluster's windows differ from one process's");
}

/// An hour ago, in whole `unit`s of ms: recent event times, as the test
/// broker expires older records by their timestamps (7 days).
fn an_hour_ago(unit: i64) -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    now / unit * unit - 3_600_000
}

/// Writes each (topic, partition, key, value), all of them before it returns.
fn send_all(records: &[(String, i32, String, String)]) {
    let producer = crate::kafka::producer();
    for (topic, p, key, value) in records {
        let record = rdkafka::producer::BaseRecord::to(topic)
            .partition(*p)
            .key(key)
            .payload(value);
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(30)).unwrap();
}

/// The records of one-partition topic `topic` whose keys `real` keeps,
/// sorted.
fn committed_sorted(topic: &str, real: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
    let mut records: Vec<_> = consume_all(topic, 1)
        .into_iter()
        .filter(|(k, _)| real(k))
        .collect();
    records.sort();
    records
}

/// What the cluster of `members` committed to `output`, the records `real`
/// keeps, sorted, once it holds `expected` of them (or after 240 s); then
/// the members are stopped, and their logs follow.
fn cluster_output(
    output: &str,
    expected: usize,
    real: impl Fn(&str) -> bool,
    mut members: Vec<Member>,
) -> (Vec<(String, String)>, String) {
    let read = || committed_sorted(output, &real);
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut got = read();
    while got.len() < expected && Instant::now() < deadline {
        for m in &mut members {
            m.assert_running();
        }
        std::thread::sleep(Duration::from_millis(500));
        got = read();
    }
    let logs: Vec<String> = members.into_iter().map(Member::stop).collect();
    (got, logs.join("\n----\n"))
}

/// A window test's topics: its input (6 partitions) and the outputs of
/// one process and of the cluster (1 each).
fn window_topics(prefix: &str) -> (String, String, String) {
    let names = ["in", "one", "cluster"].map(|role| unique_topic(&format!("{prefix}-{role}")));
    create_topic(&names[0], 6);
    create_topic(&names[1], 1);
    create_topic(&names[2], 1);
    let [input, one, cluster] = names;
    (input, one, cluster)
}

/// Event-time windows over records in the first `fed` of 6 partitions: the
/// cluster of `members` fires the same windows as one process.
fn cluster_windows_equal_one_process(fed: i32, members: &[&str], watermark: &str) {
    let w = Workdir::new();
    let (input, one_out, cluster_out) = window_topics("cluster-win");
    // Out of order within the 2 s bound, over 40 windows of 10 s (window
    // results carry the window's end).
    let start = an_hour_ago(10_000);
    let mut records: Vec<_> = (0..1200i64)
        .map(|i| {
            let ts = start + i * 333 - (i * 7919 % 5) * 300;
            let user = format!("u{}", i % 9);
            let value = format!(r#"{{"user":"{user}","ts":{ts},"amount":{}}}"#, i % 17);
            (input.clone(), i as i32 % fed, user, value)
        })
        .collect();
    // Far past the rest, in every partition fed: every real window fires in
    // the cluster (whose watermark is the minimum over the partitions).
    let late = start + 3_600_000;
    records.extend((0..fed).map(|p| {
        let user = format!("flush{p}");
        let value = format!(r#"{{"user":"{user}","ts":{late},"amount":0}}"#);
        (input.clone(), p, user, value)
    }));
    send_all(&records);

    let one = windows(&w, &input, &one_out, false, watermark);
    let one_log = run_to_end(&one, &[]);
    let m = windows(&w, &input, &cluster_out, true, watermark);
    let members: Vec<Member> = members.iter().map(|i| Member::start(&w, &m, i)).collect();

    let real = |key: &str| !key.starts_with("flush");
    let expected = committed_sorted(&one_out, &real);
    assert!(
        expected.len() > 300,
        "one process fired its windows: {}\n{one_log}",
        expected.len()
    );
    let (got, logs) = cluster_output(&cluster_out, expected.len(), real, members);
    assert_eq!(got.len(), expected.len(), "windows fired:\n{logs}");
    assert!(got == expected, "the cluster's windows differ from one process's");
}

/// Orders (JSON: order, customer, ts) joined with the customers table
/// (JSON: customer, tier, ts) as of each order's event time, in cluster
/// mode or (`cluster` false) as one bounded process.
fn orders_enrich(w: &Workdir, (orders, customers): (&str, &str), output: &str, cluster: bool) -> PathBuf {
    let (bounded, exactly_once, section) = if cluster {
        (
            "",
            "exactly_once = true",
            format!(
                "[cluster]\ngroup = \"{orders}\"\ninstance_id = \"${{MAILER_INSTANCE}}\"\ncommit_interval = \"300ms\"\nsession_timeout = \"6s\"\nrepartition_partitions = 3\n"
            ),
        )
    } else {
        ("bounded = true", "", String::new())
    };
    // One consumer reads both sources in a cluster, with the first's options.
    let table_bounded = if cluster { "" } else { bounded };
    let name = if cluster { "cluster.toml" } else { "one.toml" };
    w.write(
        name,
        &format!(
            r#"
[pipeline]
name = "{orders}"
batch_size = 50

[[sources]]
name = "orders"
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{orders}"]
group_id = "{orders}-{name}"
format = "json"
timestamp_field = "ts"
{bounded}

[[sources]]
name = "customers"
type = "kafka"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topics = ["{customers}"]
group_id = "{customers}-{name}"
format = "json"
key_field = "customer"
timestamp_field = "ts"
{table_bounded}

[watermark]
max_out_of_orderness = "2s"

[[operators]]
name = "orders-by-customer"
type = "key_by"
input = "orders"
field = "customer"
parallelism = 2

[[operators]]
name = "customers-by-id"
type = "key_by"
input = "customers"
parallelism = 2

[[operators]]
name = "enriched"
type = "lookup_join"
input = "orders-by-customer"
table = "customers-by-id"
as_of = "event_time"
join = "left"

[[sinks]]
name = "out"
type = "kafka"
input = "enriched"
bootstrap_servers = "${{KAFKA_BOOTSTRAP}}"
topic = "{output}"
{exactly_once}

{section}"#
        ),
    )
}

#[test]
fn a_lookup_join_in_a_cluster_of_two_equals_one_process() {
    let w = Workdir::new();
    let (orders, customers) = (unique_topic("cluster-orders"), unique_topic("cluster-customers"));
    let (one_out, cluster_out) = (
        unique_topic("cluster-join-one"),
        unique_topic("cluster-join-cluster"),
    );
    create_topic(&orders, 4);
    create_topic(&customers, 2);
    create_topic(&one_out, 1);
    create_topic(&cluster_out, 1);
    let start = an_hour_ago(1000);
    // Ten customers, each with a first tier before any order and a new
    // one every 25 s (a customer's changes in one partition, in order);
    // orders of twelve customers (two of them in no table: "table": null)
    // every 250 ms, out of order within the 2 s bound.
    let mut records: Vec<(String, i32, String, String)> = Vec::new();
    for i in 0..60i64 {
        let (c, tier) = (i % 10, i / 10);
        let customer = format!("c{c}");
        let ts = start - 10_000 + tier * 25_000 + c * 100;
        let value = format!(r#"{{"customer":"{customer}","tier":{tier},"ts":{ts}}}"#);
        records.push((customers.clone(), (c % 2) as i32, customer, value));
    }
    for i in 0..600i64 {
        let customer = format!("c{}", i % 12);
        let ts = start + i * 250 - (i * 7919 % 4) * 400;
        let value = format!(r#"{{"order":{i},"customer":"{customer}","ts":{ts}}}"#);
        records.push((orders.clone(), (i % 4) as i32, String::new(), value));
    }
    // Far past the rest, in every partition of both topics: every order
    // before them finds its watermark in the cluster.
    let late = start + 3_600_000;
    for p in 0..4 {
        let value = format!(r#"{{"order":-1,"customer":"flush","ts":{late}}}"#);
        records.push((orders.clone(), p, String::new(), value));
    }
    for p in 0..2 {
        let value = format!(r#"{{"customer":"flush{p}","tier":0,"ts":{late}}}"#);
        records.push((customers.clone(), p, format!("flush{p}"), value));
    }
    send_all(&records);

    let one = orders_enrich(&w, (&orders, &customers), &one_out, false);
    let one_log = run_to_end(&one, &[]);
    let m = orders_enrich(&w, (&orders, &customers), &cluster_out, true);
    let members = vec![Member::start(&w, &m, "a"), Member::start(&w, &m, "b")];

    let real = |key: &str| key != "flush";
    let expected = committed_sorted(&one_out, &real);
    assert_eq!(expected.len(), 600, "one process joined every order:\n{one_log}");
    let nulls = expected
        .iter()
        .filter(|(_, v)| v.contains(r#""table":null"#))
        .count();
    assert_eq!(nulls, 100, "the orders of c10 and c11 find no row");
    let (got, logs) = cluster_output(&cluster_out, expected.len(), real, members);
    assert_eq!(got.len(), expected.len(), "orders joined:\n{logs}");
    assert!(got == expected, "the cluster's joins differ from one process's");
}

#[test]
fn the_example_validates_and_what_cluster_mode_cannot_run_is_refused() {
    let example = repo().join("pipelines/cluster-word-count.toml");
    let out = mailer()
        .env("KAFKA_BOOTSTRAP", "127.0.0.1:9")
        .env("MAILER_INSTANCE", "a")
        .args(["validate", example.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&example)
        .unwrap()
        .replace("${MAILER_INSTANCE}", "a");
    let text = text.replace("${KAFKA_BOOTSTRAP}", "127.0.0.1:9");
    let plugins = repo().join("plugins/dist");
    let text = text.replace("../plugins/dist", plugins.to_str().unwrap());
    let w = Workdir::new();
    let cases = [
        (
            text.clone() + "\n[checkpoint]\ninterval = \"1s\"\n",
            "cluster mode runs no `[checkpoint]`",
        ),
        (
            text.replace("[cluster]\n", "[cluster]\nrepartition_partitions = 0\n"),
            "repartition_partitions 0 is out of range",
        ),
        (
            text.replace("format = \"string\"", "format = \"string\"\nbounded = true"),
            "a cluster's processes run until stopped",
        ),
        (
            text.replace(
                "[sink]\ntype = \"kafka\"\nbootstrap_servers = \"127.0.0.1:9\"\ntopic = \"word-counts\"\nexactly_once = true",
                "[sink]\ntype = \"stdout\"",
            ),
            "cluster mode writes a Kafka sink only",
        ),
        (
            text.replace("group = \"cluster-word-count\"\ninstance", "group = \" \"\ninstance"),
            "group must not be empty",
        ),
    ];
    for (i, (manifest, expected)) in cases.iter().enumerate() {
        let path = w.write(&format!("refused-{i}.toml"), manifest);
        assert_refused(&path, expected, expected);
    }
}
