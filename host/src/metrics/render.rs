//! The Prometheus text exposition of a [`Telemetry`]: the histograms from
//! its registry, everything else read from the run's counters at scrape.

use super::{PluginInfo, RunGraph, TaskSnapshot, Telemetry};
use prometheus::core::Collector;
use prometheus::{CounterVec, Encoder, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry, TextEncoder};
use std::sync::atomic::Ordering;

/// Builds one family, registers it and hands it back to be filled.
struct Families {
    registry: Registry,
}

impl Families {
    fn add<C: Collector + Clone + 'static>(&self, c: C) -> C {
        self.registry
            .register(Box::new(c.clone()))
            .expect("distinct metric names");
        c
    }

    fn counter(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help), labels).expect("valid options"))
    }

    fn seconds(&self, name: &str, help: &str, labels: &[&str]) -> CounterVec {
        self.add(CounterVec::new(Opts::new(name, help), labels).expect("valid options"))
    }

    fn gauge(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid options"))
    }

    fn float_gauge(&self, name: &str, help: &str, labels: &[&str]) -> GaugeVec {
        self.add(GaugeVec::new(Opts::new(name, help), labels).expect("valid options"))
    }
}

impl Telemetry {
    /// Every metric as Prometheus text; `plugins` are the versions running
    /// now.
    pub fn render(&self, plugins: &[PluginInfo]) -> String {
        let families = Families {
            registry: Registry::new(),
        };
        let graph = self.graph();
        let p = self.pipeline.as_str();
        stages(&families, p, &graph);
        edges(&families, p, &graph);
        operators(&families, p, &graph);
        self.checkpoints(&families, &graph);
        self.source(&families);
        tasks(&families, p, self.tasks());
        let info = families.gauge(
            "mailer_plugin_info",
            "The plugin each operator runs (value 1)",
            &["pipeline", "operator", "name", "version", "digest", "world"],
        );
        for plugin in plugins {
            info.with_label_values(&[
                p,
                &plugin.operator,
                &plugin.name,
                plugin.version.as_deref().unwrap_or(""),
                &plugin.digest,
                &plugin.world,
            ])
            .set(1);
        }
        let mut all = self.registry.gather();
        all.extend(families.registry.gather());
        all.sort_by(|a, b| a.name().cmp(b.name()));
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&all, &mut out)
            .expect("text encoding into memory");
        String::from_utf8(out).expect("the text format is UTF-8")
    }

    fn checkpoints(&self, f: &Families, graph: &RunGraph) {
        let Some(c) = &graph.checkpoints else { return };
        let labels = [self.pipeline.as_str()];
        f.counter("mailer_checkpoints_total", "Checkpoints completed", &["pipeline"])
            .with_label_values(&labels)
            .inc_by(c.completed.load(Ordering::Relaxed));
        f.counter(
            "mailer_checkpoint_failures_total",
            "Checkpoints that failed",
            &["pipeline"],
        )
        .with_label_values(&labels)
        .inc_by(c.failed.load(Ordering::Relaxed));
        f.gauge(
            "mailer_checkpoint_size_bytes",
            "Bytes written by the last completed checkpoint",
            &["pipeline"],
        )
        .with_label_values(&labels)
        .set(c.last_bytes.load(Ordering::Relaxed) as i64);
        f.counter(
            "mailer_checkpoint_uploaded_bytes_total",
            "Bytes uploaded to the checkpoints' bucket",
            &["pipeline"],
        )
        .with_label_values(&labels)
        .inc_by(c.uploaded_bytes.load(Ordering::Relaxed));
        let last = c.last_success_ms.load(Ordering::Relaxed);
        if last > 0 {
            let since = (crate::clock::now_ms() - last).max(0) as f64 / 1000.0;
            f.float_gauge(
                "mailer_checkpoint_seconds_since_success",
                "Seconds since the last checkpoint completed",
                &["pipeline"],
            )
            .with_label_values(&labels)
            .set(since);
            f.float_gauge(
                "mailer_checkpoint_last_success_timestamp_seconds",
                "When the last checkpoint completed, seconds since 1970",
                &["pipeline"],
            )
            .with_label_values(&labels)
            .set(last as f64 / 1000.0);
        }
    }

    fn source(&self, f: &Families) {
        let p = self.pipeline.as_str();
        let lag = f.gauge(
            "mailer_source_lag_records",
            "Records of a source split not read yet",
            &["pipeline", "split"],
        );
        for split in self.source.lag() {
            lag.with_label_values(&[p, &split.split]).set(split.records);
        }
        if let Some(w) = self.source.watermark() {
            f.float_gauge(
                "mailer_source_watermark_timestamp_seconds",
                "The newest watermark the source sent, seconds since 1970",
                &["pipeline"],
            )
            .with_label_values(&[p])
            .set(w as f64 / 1000.0);
        }
    }
}

/// The tasks of a cluster-mode process (no family in one process).
fn tasks(f: &Families, p: &str, tasks: Vec<TaskSnapshot>) {
    if tasks.is_empty() {
        return;
    }
    let labels = ["pipeline", "task"];
    let records = f.counter(
        "mailer_task_records_total",
        "Records a cluster task ran through its operators",
        &labels,
    );
    let restored = f.gauge(
        "mailer_task_restored_records",
        "Changelog records a keyed task's restore applied",
        &labels,
    );
    let remaining = f.gauge(
        "mailer_task_restore_remaining_records",
        "Changelog records a keyed task's restore has yet to read (at most)",
        &labels,
    );
    let restoring = f.gauge(
        "mailer_task_restoring",
        "1 while a keyed task restores its state, else 0",
        &labels,
    );
    for t in tasks {
        let l = [p, t.name.as_str()];
        records.with_label_values(&l).inc_by(t.records);
        restored.with_label_values(&l).set(t.restored as i64);
        let left = if t.restoring {
            t.to_restore.saturating_sub(t.restored)
        } else {
            0
        };
        remaining.with_label_values(&l).set(left as i64);
        restoring.with_label_values(&l).set(i64::from(t.restoring));
    }
}

fn stages(f: &Families, p: &str, graph: &RunGraph) {
    let labels = ["pipeline", "stage"];
    let records_in = f.counter(
        "mailer_stage_records_in_total",
        "Records that entered a stage",
        &labels,
    );
    let records_out = f.counter(
        "mailer_stage_records_out_total",
        "Records that left a stage",
        &labels,
    );
    let errors = f.counter(
        "mailer_stage_errors_total",
        "Records the operators of a stage failed on",
        &labels,
    );
    let workers = f.gauge("mailer_stage_workers", "Workers of a stage", &labels);
    let worker_labels = ["pipeline", "stage", "worker"];
    let worker_in = f.counter(
        "mailer_stage_worker_records_in_total",
        "Records that entered one worker of a stage",
        &worker_labels,
    );
    let worker_out = f.counter(
        "mailer_stage_worker_records_out_total",
        "Records that left one worker of a stage",
        &worker_labels,
    );
    for stage in &graph.stages {
        let l = [p, stage.stats.name.as_str()];
        records_in
            .with_label_values(&l)
            .inc_by(stage.stats.records_in.load(Ordering::Relaxed));
        records_out
            .with_label_values(&l)
            .inc_by(stage.stats.records_out.load(Ordering::Relaxed));
        let failed = graph
            .operators
            .iter()
            .filter(|o| o.stage == stage.stats.name)
            .map(|o| o.failures.failures.load(Ordering::Relaxed))
            .sum();
        errors.with_label_values(&l).inc_by(failed);
        workers.with_label_values(&l).set(stage.workers as i64);
        for (w, counts) in stage.worker_stats.iter().enumerate() {
            let w = w.to_string();
            let l = [p, stage.stats.name.as_str(), w.as_str()];
            worker_in
                .with_label_values(&l)
                .inc_by(counts.records_in.load(Ordering::Relaxed));
            worker_out
                .with_label_values(&l)
                .inc_by(counts.records_out.load(Ordering::Relaxed));
        }
    }
}

fn edges(f: &Families, p: &str, graph: &RunGraph) {
    let labels = ["pipeline", "edge", "from", "to"];
    let queued = f.gauge(
        "mailer_edge_queued_messages",
        "Messages waiting in an edge",
        &labels,
    );
    let queued_records = f.gauge(
        "mailer_edge_queued_records",
        "Records waiting in an edge (in the batches it holds)",
        &labels,
    );
    let capacity = f.gauge(
        "mailer_edge_capacity_messages",
        "Messages an edge holds at most",
        &labels,
    );
    let blocked = f.seconds(
        "mailer_edge_blocked_seconds_total",
        "Seconds senders spent blocked on a full edge (backpressure)",
        &labels,
    );
    let records = f.counter(
        "mailer_edge_records_total",
        "Records that crossed an edge",
        &labels,
    );
    for e in &graph.edges {
        let name = format!("{}->{}", e.from, e.to);
        let l = [p, name.as_str(), e.from.as_str(), e.to.as_str()];
        queued.with_label_values(&l).set(e.stats.queued() as i64);
        queued_records
            .with_label_values(&l)
            .set(e.stats.queued_records() as i64);
        capacity.with_label_values(&l).set(e.stats.capacity as i64);
        blocked.with_label_values(&l).inc_by(e.stats.blocked_seconds());
        records
            .with_label_values(&l)
            .inc_by(e.stats.records.load(Ordering::Relaxed));
    }
}

fn operators(f: &Families, p: &str, graph: &RunGraph) {
    let labels = ["pipeline", "operator"];
    let counters = [
        ("mailer_operator_records_total", "Records given to an operator"),
        ("mailer_operator_failures_total", "Records an operator failed on"),
        (
            "mailer_operator_skipped_total",
            "Failed records dropped by on_error = skip",
        ),
        (
            "mailer_operator_dead_lettered_total",
            "Failed records sent to the dead-letter sink",
        ),
        ("mailer_operator_traps_total", "Plugin calls that trapped"),
        (
            "mailer_operator_deadline_hits_total",
            "Plugin calls interrupted at their deadline",
        ),
        (
            "mailer_operator_fuel_consumed_total",
            "Fuel the plugin's calls burned (operators with `fuel`)",
        ),
        (
            "mailer_operator_fuel_exhausted_total",
            "Plugin calls stopped when their fuel ran out",
        ),
        (
            "mailer_operator_log_lines_dropped_total",
            "Lines of the plugin's log import dropped past 100 per call",
        ),
        (
            "mailer_operator_late_records_total",
            "Records too late for their windows (dropped, or sent to the late output)",
        ),
        (
            "mailer_operator_unmatched_fields_total",
            "Fields a project or rename names that a record lacked (one per field and record)",
        ),
    ]
    .map(|(name, help)| f.counter(name, help, &labels));
    let worker_records = f.counter(
        "mailer_operator_worker_records_total",
        "Records given to one worker of an operator",
        &["pipeline", "operator", "worker"],
    );
    for op in &graph.operators {
        for (w, n) in op.failures.worker_records().into_iter().enumerate() {
            let w = w.to_string();
            worker_records
                .with_label_values(&[p, op.name.as_str(), w.as_str()])
                .inc_by(n);
        }
        let l = [p, op.name.as_str()];
        let s = &op.failures;
        let values = [
            s.records.load(Ordering::Relaxed),
            s.failures.load(Ordering::Relaxed),
            s.skipped.load(Ordering::Relaxed),
            s.dead_lettered.load(Ordering::Relaxed),
            op.calls.traps.load(Ordering::Relaxed),
            op.calls.deadline_hits.load(Ordering::Relaxed),
            op.calls.fuel_consumed.load(Ordering::Relaxed),
            op.calls.fuel_exhausted.load(Ordering::Relaxed),
            op.calls.log_dropped.load(Ordering::Relaxed),
            op.late.as_ref().map_or(0, |l| l.load(Ordering::Relaxed)),
            s.unmatched_fields.load(Ordering::Relaxed),
        ];
        for (family, value) in counters.iter().zip(values) {
            family.with_label_values(&l).inc_by(value);
        }
    }
}
