//! Whether a hostile plugin starves its neighbours. W1 (Wasm per batch) is
//! measured three times in one process:
//!
//! - `sandbox-alone`: by itself;
//! - `sandbox-beside-busy`: beside a second, well-behaved pipeline that
//!   keeps one core busy (W1 again, unbounded);
//! - `sandbox-beside-hostile`: beside a pipeline whose `hostile` map is fed
//!   records that spin until their deadline, bomb memory, overflow the
//!   stack, panic and leak; every call fails and the record is skipped.
//!
//! The sandbox holds when W1 beside the hostile pipeline runs as fast as
//! beside the busy one (a neighbour can take its share of the cores, no
//! more): the `sandbox-ratio` line gives both against `sandbox-alone`.

use crate::common::{env_or, peak_rss_kib, plan, records, stage, wasm};
use mailer::batch::Batch;
use mailer::connectors::{ConnectorError, Poll, Source};
use mailer::operator::FailurePolicy;
use mailer::plan::{Endpoint, NodeKind};
use mailer::plugin::{CallMode, PluginEngine, World};
use mailer::record::Record;
use mailer::runtime::{RunReport, Shutdown, run};
use mailer::state::BackendKind;
use std::time::Duration;

pub fn variants() -> Vec<(String, Box<dyn Fn()>)> {
    [
        ("sandbox-alone", Neighbour::None),
        ("sandbox-beside-busy", Neighbour::Busy),
        ("sandbox-beside-hostile", Neighbour::Hostile),
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
        p.source.open =
            Box::new(|_| Ok(Box::new(mailer::connectors::GeneratorSource::new(None, None, 0, 1, None)) as _));
    }
    p
}

/// The `hostile` map with a 20 ms deadline, 16 MiB of memory, failures
/// skipped, fed by [`Misdeeds`].
fn hostile(engine: &PluginEngine) -> mailer::plan::Plan {
    let mut op = wasm(engine, "hostile", World::Map, CallMode::Batch);
    op.policy = FailurePolicy::Skip;
    if let NodeKind::Plugin { limits, .. } = &mut op.kind {
        limits.timeout = Duration::from_millis(20);
        limits.memory_bytes = 16 << 20;
    }
    let mut p = plan(
        "hostile",
        0,
        None,
        1,
        vec![stage("hostile", 1, false, vec![op])],
        false,
        BackendKind::Memory,
    );
    p.source = Endpoint {
        description: "misdeeds".into(),
        open: Box::new(|_| {
            let values = env_or("MAILER_BENCH_MISDEEDS", MISDEEDS.to_owned());
            let values = values.split(',').map(str::to_owned).collect();
            Ok(Box::new(Misdeeds { values, next: 0 }) as _)
        }),
    };
    p
}

fn measure(name: &str, neighbour: Neighbour) {
    let n = records();
    let engine = PluginEngine::new().unwrap();
    let stop = Shutdown::new();
    let side = match neighbour {
        Neighbour::None => None,
        Neighbour::Busy => Some(w1(&engine, "busy", None)),
        Neighbour::Hostile => Some(hostile(&engine)),
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
    let secs = report.elapsed.as_secs_f64();
    let neighbour_figures = side.map_or_else(String::new, |s| match neighbour {
        Neighbour::Hostile => {
            let failed = s.source_records - s.sink_records;
            assert!(failed > 0, "{name}: the hostile plugin's records failed");
            format!(
                " neighbour_records={} neighbour_failed={failed}",
                s.source_records
            )
        }
        _ => format!(" neighbour_records={}", s.source_records),
    });
    println!(
        "bench {name} records={n} secs={secs:.3} rec_per_s={:.0}{neighbour_figures} peak_rss_kib={}",
        n as f64 / secs,
        peak_rss_kib()
    );
}
