//! `cluster-w2-p<N>`: W2 (key_by over 100,000 keys -> running sum, the
//! `bench-sum` plugin, one update per record) through Kafka in cluster
//! mode, exactly once, on N processes of this machine; records/s = N
//! records / the wall time from the processes' start to the last update
//! committed. `cluster-rebalance`: the pause of the output while a process
//! joins or leaves (p50/p99 over 10 rebalances with input flowing).

use crate::common::env_or;
use mailer::connectors::splitmix64;
use mailer_test_support::kafka::{bootstrap, create_topic, producer, send, unique_topic};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEYS: u64 = 100_000;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    let mut v: Vec<(String, Box<dyn Fn()>)> = (1..=3)
        .map(|n| {
            let name = format!("cluster-w2-p{n}");
            let run_name = name.clone();
            (name, Box::new(move || throughput(&run_name, n)) as Box<dyn Fn()>)
        })
        .collect();
    v.push(("cluster-rebalance".to_owned(), Box::new(rebalance_pause)));
    v
}

fn records() -> u64 {
    env_or("MAILER_BENCH_CLUSTER_RECORDS", 200_000)
}

/// W2's generator (key = splitmix64(g) mod K, value = g, as decimal text)
/// into `topic` through `p`, records `from..to`.
fn fill(p: &BaseProducer, topic: &str, from: u64, to: u64) {
    for g in from..to {
        send(
            p,
            topic,
            &(splitmix64(g) % KEYS).to_string(),
            g.to_string().as_bytes(),
        );
    }
    p.flush(Duration::from_secs(300)).unwrap();
}

/// The manifest: the default (cooperative) rebalancing.
fn manifest(dir: &Path, input: &str, output: &str) -> PathBuf {
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/bench-sum.wasm");
    let text = format!(
        r#"[pipeline]
name = "{input}"

[source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{input}"

[[operators]]
type = "key_by"
parallelism = 1

[[operators]]
name = "sum"
type = "reduce"
plugin = "{plugin}"

[sink]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{output}"
exactly_once = true

[cluster]
group = "{input}"
instance_id = "${{MAILER_INSTANCE}}"
session_timeout = "6s"
"#,
        bootstrap = bootstrap(),
        plugin = plugin.display()
    );
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn start(manifest: &Path, instance: &str, log: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_mailer"))
        .env("MAILER_INSTANCE", instance)
        .env("MAILER_LOG", "warn")
        .arg("run")
        .arg(manifest)
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
        .spawn()
        .unwrap()
}

fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    child.wait().unwrap();
}

/// A `read_committed` reader of `topic` from its beginning.
fn reader(topic: &str) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", format!("{topic}-reader"))
        .set("isolation.level", "read_committed")
        .set("fetch.wait.max.ms", "10")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, 0, Offset::Beginning).unwrap();
    c.assign(&list).unwrap();
    c
}

fn topics() -> (String, String) {
    let (input, output) = (
        unique_topic("bench-cluster-in"),
        unique_topic("bench-cluster-out"),
    );
    create_topic(&input, 6);
    create_topic(&output, 1);
    (input, output)
}

fn throughput(name: &str, processes: usize) {
    let n = records();
    let (input, output) = topics();
    fill(&producer(), &input, 0, n);
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), &input, &output);
    let started = Instant::now();
    let members: Vec<Child> = (0..processes)
        .map(|i| start(&m, &format!("m{i}"), &dir.path().join(format!("m{i}.log"))))
        .collect();
    let out = reader(&output);
    let mut seen = 0u64;
    while seen < n {
        if let Some(m) = out.poll(Duration::from_millis(200)) {
            m.unwrap();
            seen += 1;
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "{seen} of {n} updates"
        );
    }
    let secs = started.elapsed().as_secs_f64();
    members.into_iter().for_each(stop);
    println!(
        "bench {name} records={n} secs={secs:.3} rec_per_s={:.0} processes={processes}",
        n as f64 / secs
    );
}

/// Input flows at a steady rate into 2 processes while a third joins and
/// leaves, 10 times in all; each rebalance's pause is the longest gap
/// between committed updates from the moment it starts to 15 s later.
fn rebalance_pause() {
    let rate = env_or("MAILER_BENCH_CLUSTER_RATE", 2_000u64);
    let (input, output) = topics();
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), &input, &output);
    let log = |i: &str| dir.path().join(format!("{i}.log"));
    let steady = [start(&m, "a", &log("a")), start(&m, "b", &log("b"))];
    let feeding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let feeder = {
        let (input, feeding) = (input.clone(), feeding.clone());
        std::thread::spawn(move || {
            let (p, mut g) = (producer(), 0);
            while feeding.load(std::sync::atomic::Ordering::Relaxed) {
                fill(&p, &input, g, g + rate / 10);
                g += rate / 10;
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let out = reader(&output);
    // Updates arrive steadily before the first rebalance.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(20) {
        out.poll(Duration::from_millis(50));
    }
    let mut pauses = Vec::new();
    let mut third: Option<Child> = None;
    let (measured, mut updates) = (Instant::now(), 0u64);
    for round in 0..10 {
        match third.take() {
            None => third = Some(start(&m, "c", &log(&format!("c{round}")))),
            Some(c) => stop(c),
        }
        let begun = Instant::now();
        let mut last = begun;
        let mut longest = Duration::ZERO;
        while begun.elapsed() < Duration::from_secs(15) {
            if let Some(Ok(_)) = out.poll(Duration::from_millis(10)) {
                updates += 1;
                longest = longest.max(last.elapsed());
                last = Instant::now();
            }
        }
        longest = longest.max(last.elapsed());
        pauses.push(longest.as_secs_f64() * 1000.0);
    }
    let secs = measured.elapsed().as_secs_f64();
    feeding.store(false, std::sync::atomic::Ordering::Relaxed);
    feeder.join().unwrap();
    third.into_iter().chain(steady).for_each(stop);
    pauses.sort_by(f64::total_cmp);
    let p50 = pauses[pauses.len() / 2];
    let p99 = pauses[pauses.len() - 1];
    println!(
        "bench cluster-rebalance records={updates} secs={secs:.3} rec_per_s={:.0} rebalances={} pause_p50_ms={p50:.0} pause_p99_ms={p99:.0} rate={rate}",
        updates as f64 / secs,
        pauses.len()
    );
}
