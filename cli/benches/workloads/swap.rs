//! `hot-swap`: a generator at full speed -> `uppercase` Wasm map -> a sink
//! that notes when each batch arrives; the map is swapped 20 times
//! (uppercase <-> lowercase). Per swap: the output gap at the switch (the
//! time between the last batch of the old version and the first of the
//! new) and the time from the request to the switch; p50 and p99 of each.
//!
//! `shadow`: the same pipeline for 2 s as it is, 2 s with a shadow of every
//! record that agrees on each (`uppercase` again), 2 s with one that
//! differs on each (`lowercase`; two calls per record either way), then
//! that shadow promoted: the throughput of each phase, their ratios to the
//! plain one, and the output gap at the promotion.

use crate::common::peak_rss_kib;
use mailer::batch::Batch;
use mailer::connectors::Endpoint;
use mailer::connectors::{ConnectorError, Sink};
use mailer::manifest::Manifest;
use mailer::plugin::{LoadedPlugin, PluginEngine, World};
use mailer::runtime::{Control, Shutdown, run_with};
use mailer::swap::SwapPoint;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const SWAPS: usize = 20;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    vec![
        ("hot-swap".to_owned(), Box::new(hot_swap) as Box<dyn Fn()>),
        ("shadow".to_owned(), Box::new(shadow) as Box<dyn Fn()>),
    ]
}

/// Notes each switch of version (by the case of a batch's first value):
/// when it came and how long the output paused before it.
struct SwitchSink {
    upper: Option<bool>,
    last_write: Instant,
    records: Arc<AtomicU64>,
    switches: flume::Sender<(Instant, Duration)>,
}

impl Sink for SwitchSink {
    fn write(&mut self, batch: &Batch) -> Result<(), ConnectorError> {
        let now = Instant::now();
        if !batch.is_empty() {
            let upper = batch.record(0).value.first().is_some_and(u8::is_ascii_uppercase);
            if self.upper.is_some_and(|u| u != upper) {
                let _ = self.switches.send((now, now - self.last_write));
            }
            self.upper = Some(upper);
        }
        self.records.fetch_add(batch.len() as u64, Ordering::Relaxed);
        self.last_write = now;
        Ok(())
    }

    fn flush(&mut self) -> Result<(), ConnectorError> {
        Ok(())
    }
}

/// The pipeline running, its versions of `case` ([lowercase, uppercase]),
/// the records its sink got, and the switches of version it saw.
struct Running {
    control: Control,
    shutdown: Shutdown,
    run: std::thread::JoinHandle<()>,
    versions: [Arc<LoadedPlugin>; 2],
    records: Arc<AtomicU64>,
    switches: flume::Receiver<(Instant, Duration)>,
    /// The engine, which times the plugins' deadlines while it lives.
    _engine: PluginEngine,
}

/// Starts the generator -> `uppercase` map -> switch sink pipeline.
fn start_case_pipeline(dir: &Path) -> Running {
    let plugins = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist");
    let manifest = dir.join("pipeline.toml");
    std::fs::write(
        &manifest,
        format!(
            r#"[pipeline]
name = "hot-swap"

[source]
type = "generator"
value_prefix = "Order"

[[operators]]
name = "case"
type = "map"
plugin = "{}"

[sink]
type = "blackhole"
"#,
            plugins.join("uppercase.wasm").display()
        ),
    )
    .unwrap();
    let m = Manifest::load(&manifest).unwrap();
    let engine = PluginEngine::new().unwrap();
    let mut plan = mailer::plan::build(&m, &engine).unwrap();
    let versions = [
        engine
            .load(&plugins.join("lowercase.wasm"), World::Map, "case")
            .unwrap(),
        engine
            .load(&plugins.join("uppercase.wasm"), World::Map, "case")
            .unwrap(),
    ];
    let records = Arc::new(AtomicU64::new(0));
    let (switches_tx, switches) = flume::unbounded();
    {
        let records = records.clone();
        plan.sinks[0].end = Endpoint {
            name: "sink".into(),
            description: "switch sink".into(),
            open: Box::new(move |_| {
                Ok(Box::new(SwitchSink {
                    upper: None,
                    last_write: Instant::now(),
                    records,
                    switches: switches_tx,
                }) as _)
            }),
        };
    }
    let (shutdown, control) = (Shutdown::new(), Control::new());
    let run = {
        let (shutdown, control) = (shutdown.clone(), control.clone());
        std::thread::spawn(move || {
            run_with(plan, &shutdown, &control).unwrap();
        })
    };
    Running {
        control,
        shutdown,
        run,
        versions,
        records,
        switches,
        _engine: engine,
    }
}

/// The sink's records per second over the next `secs`.
fn rate(records: &AtomicU64, secs: f64) -> f64 {
    let before = records.load(Ordering::Relaxed);
    std::thread::sleep(Duration::from_secs_f64(secs));
    (records.load(Ordering::Relaxed) - before) as f64 / secs
}

fn shadow() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let r = start_case_pipeline(dir.path());
    std::thread::sleep(Duration::from_millis(500));
    let plain = rate(&r.records, 2.0);
    // Shadowed by a version that agrees on every record (the same
    // plugin), then by one that differs on every record.
    let shadowed_by = |id: u64, version: &Arc<LoadedPlugin>| {
        let stats = Arc::new(mailer::swap::ShadowStats::new(1.0));
        r.control.request_swap(Arc::new(
            SwapPoint::new(id, "case", version.clone(), 1)
                .with_kind(mailer::swap::SwapKind::Shadow(stats.clone())),
        ));
        std::thread::sleep(Duration::from_millis(300));
        (rate(&r.records, 2.0), stats)
    };
    let (agreeing, same) = shadowed_by(1, &r.versions[1]);
    same.end(mailer::swap::ShadowState::Aborted);
    let lower = r.versions[0].clone();
    let (shadowed, stats) = shadowed_by(2, &lower);
    stats.end(mailer::swap::ShadowState::Promoted);
    let requested = Instant::now();
    r.control
        .request_swap(Arc::new(SwapPoint::new(3, "case", lower, 1)));
    let (at, gap) = r
        .switches
        .recv_timeout(Duration::from_secs(30))
        .expect("the promotion");
    r.shutdown.cancel();
    r.run.join().unwrap();
    let (view, same) = (stats.view(), same.view());
    let n = r.records.load(Ordering::Relaxed);
    println!(
        "bench shadow records={n} secs={:.3} rec_per_s={agreeing:.0} plain_rec_per_s={plain:.0} ratio={:.3} \
         shadow_us_per_record={:.3} current_us_per_record={:.3} mismatches={} \
         differing_rec_per_s={shadowed:.0} differing_ratio={:.3} differing_mismatches={} \
         differing_shadow_us_per_record={:.3} promotion_gap_ms={:.3} promotion_ms={:.3} peak_rss_kib={}",
        started.elapsed().as_secs_f64(),
        agreeing / plain,
        same.shadow_us_per_record,
        same.current_us_per_record,
        same.mismatches,
        shadowed / plain,
        view.mismatches,
        view.shadow_us_per_record,
        gap.as_secs_f64() * 1000.0,
        (at - requested).as_secs_f64() * 1000.0,
        peak_rss_kib(),
    );
}

fn hot_swap() {
    let dir = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let r = start_case_pipeline(dir.path());
    std::thread::sleep(Duration::from_millis(500));
    let (mut gaps, mut delays) = (Vec::new(), Vec::new());
    for i in 0..SWAPS {
        let requested = Instant::now();
        r.control.request_swap(Arc::new(SwapPoint::new(
            i as u64 + 1,
            "case",
            r.versions[i % 2].clone(),
            1,
        )));
        let (at, gap) = r
            .switches
            .recv_timeout(Duration::from_secs(30))
            .expect("the switch");
        gaps.push(gap);
        delays.push(at - requested);
        std::thread::sleep(Duration::from_millis(200));
    }
    r.shutdown.cancel();
    r.run.join().unwrap();
    let secs = started.elapsed().as_secs_f64();
    let n = r.records.load(Ordering::Relaxed);
    let ms = |mut v: Vec<Duration>, q: f64| {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1000.0
    };
    println!(
        "bench hot-swap records={n} secs={secs:.3} rec_per_s={:.0} peak_rss_kib={} swaps={SWAPS} \
         gap_p50_ms={:.3} gap_p99_ms={:.3} switch_p50_ms={:.3} switch_p99_ms={:.3}",
        n as f64 / secs,
        peak_rss_kib(),
        ms(gaps.clone(), 0.5),
        ms(gaps, 0.99),
        ms(delays.clone(), 0.5),
        ms(delays, 0.99),
    );
}
