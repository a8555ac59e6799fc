//! Starts the threads of a run over its wiring — the source stage, each
//! operator stage (one thread, or a router, workers and a merge), each sink
//! and side output — and records each in the run's graph for the metrics.

use super::parallel::{Spread, spawn_parallel};
use super::side_stage::SideStage;
use super::sink::{SinkCheckpoints, run_sink};
use super::source::{SourceCheckpoints, SourceSlot, SourceTime, run_sources};
use super::stage::{StageHandle, spawn_stage};
use super::wiring::Wiring;
use super::worker::run_chain;
use super::{Control, RunError, Shutdown};
use crate::connectors::{Sink, Source};
use crate::metrics::{RunGraph, StageEntry, StageStats, Telemetry};
use crate::operators::Chain;
use crate::plan::{OperatorStage, Producer};
use std::sync::Arc;

/// What starts the threads, and what it started.
pub(super) struct Spawner<'a> {
    pub(super) wiring: Wiring,
    pub(super) graph: RunGraph,
    pub(super) handles: Vec<StageHandle>,
    pub(super) shutdown: &'a Shutdown,
    /// Messages an edge inside a parallel stage holds.
    pub(super) messages: usize,
    pub(super) batch_size: usize,
}

impl Spawner<'_> {
    /// Registers a stage of one worker; its counts.
    fn entry(&mut self, name: String, workers: usize, operators: Vec<String>) -> Arc<StageStats> {
        let stats = StageStats::new(name);
        self.graph.stages.push(StageEntry {
            stats: stats.clone(),
            workers,
            worker_stats: vec![stats.clone()],
            operators,
        });
        stats
    }

    /// The source stage: every source on one thread (those feeding global
    /// tables, `loads_table`, read first). Returns each source's counts.
    pub(super) fn sources(
        &mut self,
        sources: Vec<(String, Box<dyn Source>)>,
        loads_table: &[bool],
        time: SourceTime,
        checkpoints: Option<SourceCheckpoints>,
        control: &Control,
        telemetry: Arc<Telemetry>,
    ) -> Result<Vec<Arc<StageStats>>, RunError> {
        let mut slots = Vec::with_capacity(sources.len());
        for (i, (name, source)) in sources.into_iter().enumerate() {
            let stats = self.entry(name.clone(), 1, Vec::new());
            let out = self.wiring.outlet(Producer::Source(i));
            slots.push(SourceSlot {
                name,
                source,
                out,
                stats,
                loads_table: loads_table[i],
            });
        }
        let counts = slots.iter().map(|s| s.stats.clone()).collect();
        let (shutdown, control, batch) = (self.shutdown.clone(), control.clone(), self.batch_size);
        self.handles.push(spawn_stage("source".into(), move || {
            run_sources(slots, batch, time, checkpoints, (shutdown, control), telemetry)
        })?);
        Ok(counts)
    }

    /// Each operator stage with its workers' chains.
    pub(super) fn stages(
        &mut self,
        stages: &[OperatorStage],
        chains: Vec<Vec<Chain>>,
    ) -> Result<(), RunError> {
        for (i, (stage, mut chains)) in stages.iter().zip(chains).enumerate() {
            let operators = stage.operators.iter().map(|o| o.name.clone()).collect();
            let stats = self.entry(stage.name.clone(), chains.len(), operators);
            let (input, out) = (self.wiring.stage_input(i), self.wiring.outlet(Producer::Stage(i)));
            if chains.len() == 1 {
                let chain = chains.pop().expect("one chain");
                self.handles.push(spawn_stage(stage.name.clone(), move || {
                    run_chain(chain, input, out, stats)
                })?);
            } else {
                let workers: Vec<Arc<StageStats>> = (0..chains.len())
                    .map(|w| StageStats::new(format!("{}[{w}]", stage.name)))
                    .collect();
                let entry = self.graph.stages.last_mut().expect("just registered");
                entry.worker_stats = workers.clone();
                self.handles.extend(spawn_parallel(
                    stats,
                    chains.into_iter().zip(workers).collect(),
                    Spread {
                        routing: stage.routing,
                        broadcast: stage.broadcast_input,
                    },
                    input,
                    out,
                    self.messages,
                    self.shutdown,
                )?);
            }
        }
        Ok(())
    }

    /// Each sink; returns their counts.
    pub(super) fn sinks(
        &mut self,
        stages: usize,
        sinks: Vec<(String, Box<dyn Sink>, Option<SinkCheckpoints>)>,
    ) -> Result<Vec<Arc<StageStats>>, RunError> {
        let mut counts = Vec::with_capacity(sinks.len());
        for (i, (name, sink, acks)) in sinks.into_iter().enumerate() {
            let stats = self.entry(name.clone(), 1, Vec::new());
            counts.push(stats.clone());
            let input = self.wiring.sink_input(stages, i);
            self.handles
                .push(spawn_stage(name, move || run_sink(sink, input, stats, acks))?);
        }
        Ok(counts)
    }

    /// Each side output's stage; returns the dead-letter stage's counts
    /// (zero without one).
    pub(super) fn side_stages(
        &mut self,
        side_stages: Vec<(SideStage, Option<SinkCheckpoints>)>,
    ) -> Result<Arc<StageStats>, RunError> {
        let mut dead_letter = StageStats::new("dead-letter");
        for (stage, acks) in side_stages {
            let stats = self.entry(stage.name.to_owned(), 1, Vec::new());
            if stage.name == "dead-letter" {
                dead_letter = stats.clone();
            }
            let batch = self.batch_size;
            self.handles.push(spawn_stage(stage.name.into(), move || {
                stage.run(batch, &stats, acks)
            })?);
        }
        Ok(dead_letter)
    }
}
