//! Whether a hostile plugin starves its neighbours. W1 (Wasm per batch) is
//! measured three times in one process:
//!
//! - `sandbox-alone`: by itself;
//! - `sandbox-beside-busy`: beside a second, well-behaved pipeline that
//!   keeps one core busy (W1 again, unbounded);
//! - `sandbox-beside-hostile`: beside a pipeline whose `hostile` map is fed
//!   records that spin until their deadline, bomb memory, overflow the
//!   stack, panic and leak; every call fails and the record is skipped;
//! - `sandbox-beside-raw`: beside a pipeline of the raw hostile components
//!   (`tests/hostile`), fed records that make them grow a table to the
//!   maximum, return a 1 GiB batch and flood the log.
//!
//! Each figure is the median of `MAILER_BENCH_RUNS` (5) runs in one process.
//! The sandbox holds when W1 beside a hostile pipeline runs as fast as
//! beside the busy one (a neighbour can take its share of the cores, no
//! more): the `sandbox-ratio` line gives them against `sandbox-alone` and
//! `sandbox-beside-busy`.

use crate::common::{env_or, peak_rss_kib, plan, records, stage, wasm, wasm_at};
use mailer::batch::Batch;
use mailer::connectors::Endpoint;
use mailer::connectors::{ConnectorError, Poll, Source};
use mailer::failure::FailurePolicy;
use mailer::operators::NodeKind;
use mailer::plugin::{CallMode, PluginEngine, World};
use mailer::record::Record;
use mailer::runtime::{RunReport, Shutdown, run};
use mailer::state::BackendKind;
use mailer_hostile::Misdeed;
use std::time::Duration;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    [
        ("sandbox-alone", Neighbour::None),
        ("sandbox-beside-busy", Neighbour::Busy),
        ("sandbox-beside-hostile", Neighbour::Hostile),
        ("sandbox-beside-raw", Neighbour::Raw),
    ]
    .into_iter()
    .map(|(name, n)| {
        (
            name.to_owned(),
            Box::new(move || measure(name, n)) as Box<dyn Fn()>,
        )
    })
    .collect()
}

#[derive(Clone, Copy, PartialEq)]
enum Neighbour {
    None,
    Busy,
    Hostile,
    Raw,
}

/// What the hostile pipeline's records ask its plugin to do, in turn
/// (`MAILER_BENCH_MISDEEDS`, comma-separated, picks some of them).
const MISDEEDS: &str = "loop,bomb,stack,panic,leak";

/// An unbounded source of misdeeds, one record per poll.
struct Misdeeds {
    values: Vec<String>,
    next: usize,
}

impl Source for Misdeeds {
    fn poll(&mut self, _max: usize) -> Result<Poll, ConnectorError> {
        let value = self.values[self.next % self.values.len()].clone();
        self.next += 1;
        Ok(Poll::Records(Batch::Records(vec![Record::new(None, value, 0)])))
    }
}

/// W1 (Wasm per batch) over `n` generated records, or unbounded.
fn w1(engine: &PluginEngine, name: &str, n: Option<u64>) -> mailer::plan::Plan {
    let operators = crate::w1::wasm_operators(engine, CallMode::Batch);
    let mut p = plan(
        name,
        n.unwrap_or(u64::MAX),
        None,
        1,
        vec![stage("map-filter", 1, false, operators)],
        false,
        BackendKind::Memory,
    );
    if n.is_none() {
        p.sources[0].open =
            Box::new(|_| Ok(Box::new(mailer::connectors::GeneratorSource::new(None, None, 0, 1, None)) as _));
    }
    p
}

/// A pipeline of `operators` fed misdeeds (`values`, in turn) with a 20 ms
/// deadline, 16 MiB of memory and failures skipped.
fn misbehaving(
    mut operators: Vec<mailer::operators::OperatorNode>,
    values: Vec<String>,
) -> mailer::plan::Plan {
    for op in &mut operators {
        op.policy = FailurePolicy::Skip;
        if let NodeKind::Plugin(wasm) = &mut op.kind {
            let limits = &mut wasm.limits;
            limits.timeout = Duration::from_millis(20);
            limits.memory_bytes = 16 << 20;
        }
    }
    let mut p = plan(
        "hostile",
        0,
        None,
        1,
        vec![stage("hostile", 1, false, operators)],
        false,
        BackendKind::Memory,
    );
    p.sources[0] = Endpoint {
        name: "source".into(),
        description: "misdeeds".into(),
        open: Box::new(move |_| {
            Ok(Box::new(Misdeeds {
                values: values.clone(),
                next: 0,
            }) as _)
        }),
    };
    p
}

/// The `hostile` map fed [`MISDEEDS`].
fn hostile(engine: &PluginEngine) -> mailer::plan::Plan {
    let values = env_or("MAILER_BENCH_MISDEEDS", MISDEEDS.to_owned());
    let values = values.split(',').map(str::to_owned).collect();
    misbehaving(vec![wasm(engine, "hostile", World::Map, CallMode::Batch)], values)
}

/// The raw hostile filters that misbehave while running, one after the
/// other, each fed the records that set it off.
fn raw(engine: &PluginEngine, dir: &std::path::Path) -> mailer::plan::Plan {
    let misdeeds = [Misdeed::TableGrow, Misdeed::BatchLength, Misdeed::LogFlood];
    let operators = misdeeds
        .iter()
        .map(|m| {
            let path = m.write_to(dir).expect("a raw hostile component");
            wasm_at(engine, &path, m.name(), World::Filter, CallMode::Batch)
        })
        .collect();
    let values = misdeeds
        .iter()
        .map(|m| (m.trigger() as char).to_string())
        .collect();
    misbehaving(operators, values)
}

/// Runs of each figure (`MAILER_BENCH_RUNS`); the median is printed.
fn runs() -> usize {
    env_or("MAILER_BENCH_RUNS", 5)
}

fn measure(name: &str, neighbour: Neighbour) {
    let n = records();
    let engine = PluginEngine::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut secs = Vec::new();
    let mut neighbour_figures = String::new();
    for _ in 0..runs() {
        let stop = Shutdown::new();
        let side = match neighbour {
            Neighbour::None => None,
            Neighbour::Busy => Some(w1(&engine, "busy", None)),
            Neighbour::Hostile => Some(hostile(&engine)),
            Neighbour::Raw => Some(raw(&engine, dir.path())),
        }
        .map(|p| {
            let stop = stop.clone();
            std::thread::spawn(move || run(p, &stop).unwrap())
        });
        // The neighbour gets going before the measured run starts.
        if side.is_some() {
            std::thread::sleep(Duration::from_millis(500));
        }
        let report = run(w1(&engine, name, Some(n)), &Shutdown::new()).unwrap();
        stop.abort();
        let side: Option<RunReport> = side.map(|s| s.join().unwrap());
        assert_eq!(report.sink_records, n / 2 + n % 2, "{name}: records at the sink");
        secs.push(report.elapsed.as_secs_f64());
        neighbour_figures = side.map_or_else(String::new, |s| match neighbour {
            Neighbour::Hostile | Neighbour::Raw => {
                let failed = s.source_records - s.sink_records;
                assert!(failed > 0, "{name}: the hostile plugins' records failed");
                format!(
                    " neighbour_records={} neighbour_failed={failed}",
                    s.source_records
                )
            }
            _ => format!(" neighbour_records={}", s.source_records),
        });
    }
    secs.sort_by(f64::total_cmp);
    let median = secs[secs.len() / 2];
    println!(
        "bench {name} records={n} secs={median:.3} rec_per_s={:.0} runs={}{neighbour_figures} peak_rss_kib={}",
        n as f64 / median,
        secs.len(),
        peak_rss_kib()
    );
}
