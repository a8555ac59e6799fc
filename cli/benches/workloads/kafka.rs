//! Kafka on the broker at `KAFKA_BOOTSTRAP` (`just bench` starts one):
//! `kafka-raw` (a plain rdkafka consume -> produce loop), against
//! `kafka-passthrough-*` (Kafka -> Wasm map -> Kafka, at least once and
//! exactly once) on the same data; and `kafka-latency` (p50/p99 end to end
//! at a fixed input rate).

use crate::common::{env_or, peak_rss_kib};
use mailer::manifest::Manifest;
use mailer::plugin::PluginEngine;
use mailer::runtime::{Shutdown, run};
use mailer_test_support::kafka::{bootstrap, create_topic, producer, send, unique_topic};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    vec![
        ("kafka-raw".to_owned(), Box::new(raw) as Box<dyn Fn()>),
        (
            "kafka-passthrough-at-least-once".to_owned(),
            Box::new(|| passthrough("kafka-passthrough-at-least-once", false)),
        ),
        (
            "kafka-passthrough-exactly-once".to_owned(),
            Box::new(|| passthrough("kafka-passthrough-exactly-once", true)),
        ),
        ("kafka-latency".to_owned(), Box::new(latency)),
        ("kafka-latency-raw".to_owned(), Box::new(latency_raw)),
    ]
}

fn records() -> u64 {
    env_or("MAILER_BENCH_KAFKA_RECORDS", 300_000)
}

fn topic(prefix: &str) -> String {
    unique_topic(&format!("bench-{prefix}"))
}

/// An input topic of 3 partitions holding `n` records (`g` as decimal text,
/// 100 keys), as the benchmarks read it.
fn input(n: u64) -> String {
    let t = topic("in");
    create_topic(&t, 3);
    let p = producer();
    for g in 0..n {
        send(&p, &t, &(g % 100).to_string(), g.to_string().as_bytes());
    }
    p.flush(Duration::from_secs(120)).unwrap();
    t
}

fn consumer(topic: &str, partitions: i32) -> BaseConsumer {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap())
        .set("group.id", format!("{topic}-reader"))
        .set("fetch.wait.max.ms", "10")
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    c.assign(&list).unwrap();
    c
}

/// Consume -> double -> produce with rdkafka alone: the broker's and the
/// client's own cost, to compare the pipeline with.
fn raw() {
    let n = records();
    let (inp, out) = (input(n), topic("out"));
    create_topic(&out, 3);
    let started = Instant::now();
    let c = consumer(&inp, 3);
    let p = producer();
    let mut seen = 0u64;
    while seen < n {
        if let Some(m) = c.poll(Duration::from_millis(100)) {
            let m = m.unwrap();
            let v: u64 = std::str::from_utf8(m.payload().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            let key = std::str::from_utf8(m.key().unwrap()).unwrap().to_owned();
            send(&p, &out, &key, (v * 2).to_string().as_bytes());
            seen += 1;
        }
    }
    p.flush(Duration::from_secs(120)).unwrap();
    print_line("kafka-raw", n, started.elapsed().as_secs_f64(), "");
}

fn print_line(name: &str, n: u64, secs: f64, extra: &str) {
    println!(
        "bench {name} records={n} secs={secs:.3} rec_per_s={:.0} peak_rss_kib={}{extra}",
        n as f64 / secs,
        peak_rss_kib()
    );
}

/// A manifest in a fresh folder: Kafka `input` -> `bench-double` -> Kafka
/// `output`.
fn manifest(dir: &Path, input: &str, output: &str, exactly_once: bool, bounded: bool) -> PathBuf {
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/bench-double.wasm");
    let eo = if exactly_once {
        "exactly_once = true\n\n[checkpoint]\ninterval = \"1s\"\n"
    } else {
        ""
    };
    let text = format!(
        r#"[pipeline]
name = "{input}"

[source]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topics = ["{input}"]
group_id = "{input}"
bounded = {bounded}

[[operators]]
type = "map"
plugin = "{plugin}"

[sink]
type = "kafka"
bootstrap_servers = "{bootstrap}"
topic = "{output}"
{eo}"#,
        bootstrap = bootstrap(),
        plugin = plugin.display()
    );
    let path = dir.join("pipeline.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn passthrough(name: &str, exactly_once: bool) {
    let n = records();
    let (inp, out) = (input(n), topic("out"));
    create_topic(&out, 3);
    let dir = tempfile::tempdir().unwrap();
    let m = Manifest::load(&manifest(dir.path(), &inp, &out, exactly_once, true)).unwrap();
    let engine = PluginEngine::new().unwrap();
    let plan = mailer::plan::build(&m, &engine).unwrap();
    let report = run(plan, &Shutdown::new()).unwrap();
    assert_eq!(report.sink_records, n, "{name}: records at the sink");
    print_line(name, n, report.elapsed.as_secs_f64(), "");
}

/// Records sent at a fixed rate carry their send time; the pipeline (at
/// least once) doubles nothing it cannot (the value is the time) — it runs
/// `uppercase`, which leaves digits as they are — and a reader measures
/// each record's time from send to read.
fn latency() {
    measure_latency("kafka-latency", |inp, out| {
        let dir = tempfile::tempdir().unwrap();
        let path = manifest(dir.path(), inp, out, false, false);
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("bench-double.wasm", "uppercase.wasm")
            .replace("bounded = false", "bounded = false\nstart = \"latest\"");
        std::fs::write(&path, text).unwrap();
        let m = Manifest::load(&path).unwrap();
        let plan = mailer::plan::build(&m, &PluginEngine::new().unwrap()).unwrap();
        let shutdown = Shutdown::new();
        let pipeline = {
            let shutdown = shutdown.clone();
            std::thread::spawn(move || run(plan, &shutdown).unwrap())
        };
        Box::new(move || {
            shutdown.cancel();
            pipeline.join().unwrap();
            drop(dir);
        })
    });
}

/// The same measurement through a plain rdkafka consume -> produce loop
/// (the client settings of the pipeline's source and sink): what the
/// broker and librdkafka cost by themselves.
fn latency_raw() {
    measure_latency("kafka-latency-raw", |inp, out| {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (inp, out, stopped) = (inp.to_owned(), out.to_owned(), stop.clone());
        let forward = std::thread::spawn(move || {
            let c = consumer(&inp, 3);
            c.assign(&latest(&inp, 3)).unwrap();
            let p = producer();
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(50)) {
                    let key = std::str::from_utf8(m.key().unwrap_or_default())
                        .unwrap()
                        .to_owned();
                    send(&p, &out, &key, m.payload().unwrap_or_default());
                }
                p.poll(Duration::ZERO);
            }
            p.flush(Duration::from_secs(10)).unwrap();
        });
        Box::new(move || {
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            forward.join().unwrap();
        })
    });
}

/// Every partition of `topic` at its end.
fn latest(topic: &str, partitions: i32) -> TopicPartitionList {
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition_offset(topic, p, Offset::End).unwrap();
    }
    list
}

/// Sends records at `MAILER_BENCH_KAFKA_RATE` per second for 10 s through
/// what `start(input, output)` starts (it returns how to stop it), and
/// prints the p50/p99/max of send-to-read times.
fn measure_latency(name: &str, start: impl FnOnce(&str, &str) -> Box<dyn FnOnce()>) {
    let rate: u64 = env_or("MAILER_BENCH_KAFKA_RATE", 5_000);
    let n: u64 = rate * 10;
    let (inp, out) = (topic("lat-in"), topic("lat-out"));
    create_topic(&inp, 3);
    create_topic(&out, 3);
    let stop = start(&inp, &out);
    std::thread::sleep(Duration::from_secs(2));
    let reader = {
        let out = out.clone();
        std::thread::spawn(move || {
            let c = consumer(&out, 3);
            let mut lat = Vec::with_capacity(n as usize);
            let deadline = Instant::now() + Duration::from_secs(120);
            while (lat.len() as u64) < n && Instant::now() < deadline {
                if let Some(Ok(m)) = c.poll(Duration::from_millis(100)) {
                    let sent: i64 = std::str::from_utf8(m.payload().unwrap())
                        .unwrap()
                        .parse()
                        .unwrap();
                    lat.push(mailer::clock::now_ms() - sent);
                }
            }
            lat
        })
    };
    let p = producer();
    let started = Instant::now();
    for i in 0..n {
        let due = started + Duration::from_secs_f64(i as f64 / rate as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        send(
            &p,
            &inp,
            &(i % 100).to_string(),
            mailer::clock::now_ms().to_string().as_bytes(),
        );
        p.poll(Duration::ZERO);
    }
    p.flush(Duration::from_secs(60)).unwrap();
    let mut lat = reader.join().unwrap();
    stop();
    assert_eq!(lat.len() as u64, n, "every record read back");
    lat.sort_unstable();
    let at = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    print_line(
        name,
        n,
        started.elapsed().as_secs_f64(),
        &format!(
            " input_rate={rate} p50_ms={} p99_ms={} max_ms={}",
            at(0.5),
            at(0.99),
            at(1.0)
        ),
    );
}
