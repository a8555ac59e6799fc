//! Process plugins: keyed state behind WIT that no key can escape, timers
//! that fire in event-time order once and never after deletion, and the
//! `fraud-timer` pipeline end to end.

use crate::support::*;
use bytes::Bytes;
use mailer::batch::Batch;
use mailer::failure::{FailureHandler, FailurePolicy};
use mailer::operators::Operator;
use mailer::operators::wasm::WasmProcess;
use mailer::plugin::{CallMode, PluginEngine, PluginLimits, World};
use mailer::record::Record;
use mailer::state::{BackendKind, KeyedContext, KeyedState, StateBackend};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

/// A process operator running the plugin `name` over `backend`, its
/// processing-time clock read from `clock`.
fn operator(
    name: &str,
    backend: Box<dyn StateBackend>,
    mode: CallMode,
    clock: Arc<AtomicI64>,
) -> WasmProcess {
    let engine = PluginEngine::new().unwrap();
    let plugin = engine.load(&plugin(name), World::Process, name).unwrap();
    let limits = PluginLimits {
        timeout: Duration::from_secs(5),
        memory_bytes: 64 << 20,
        ..Default::default()
    };
    let instance = mailer::plugin::PluginInstance::new(plugin, limits).unwrap();
    let keyed = KeyedContext::new(
        KeyedState::new(backend, 1, 128),
        Default::default(),
        Arc::new(move || clock.load(Ordering::Relaxed)),
    );
    let failure = FailureHandler::new(name, FailurePolicy::Fail, None, Default::default());
    WasmProcess::new(name, instance, keyed, mode, failure)
}

fn rec(key: &str, value: &str) -> Record {
    Record::new(Some(Bytes::copy_from_slice(key.as_bytes())), value.to_owned(), 0)
}

fn values(batch: Batch) -> Vec<String> {
    batch
        .into_records()
        .into_iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect()
}

/// A fresh, empty backend of kind `kind` (`memory` or `rocksdb`).
fn fresh_backend(w: &Workdir, kind: &str) -> Box<dyn StateBackend> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let worker = NEXT.fetch_add(1, Ordering::Relaxed);
    match kind {
        "memory" => BackendKind::Memory.open("s", worker).unwrap(),
        _ => BackendKind::rocks(w.path("state")).open("s", worker).unwrap(),
    }
}

#[test]
fn a_plugin_cannot_reach_another_keys_state() {
    let w = Workdir::new();
    for kind in ["memory", "rocksdb"] {
        for mode in [CallMode::Batch, CallMode::Record] {
            let mut op = operator(
                "test-state-escape",
                fresh_backend(&w, kind),
                mode,
                Default::default(),
            );
            let mut seen = Vec::new();
            for _ in 0..3 {
                // Each record's value names the key whose state it goes after.
                let batch = vec![rec("a", "b"), rec("b", "a"), rec("c", "a"), rec("a", "c")];
                seen.extend(values(op.process(Batch::Records(batch)).unwrap()));
            }
            // Within a batch, records are handled key by key: a, a, b, c.
            let expected: Vec<String> = (1..=3)
                .flat_map(|round| {
                    let a = 2 * round - 1;
                    [a, a + 1, round, round].map(|n| format!("{n} none"))
                })
                .collect();
            assert_eq!(seen, expected, "{kind} {mode:?}");
        }
    }
}

#[test]
fn timers_fire_in_event_time_order_once_and_deleted_ones_never() {
    let w = Workdir::new();
    for kind in ["memory", "rocksdb"] {
        let clock = Arc::new(AtomicI64::new(1_000));
        let mut op = operator(
            "test-timers",
            fresh_backend(&w, kind),
            CallMode::Batch,
            clock.clone(),
        );
        let commands = vec![
            rec("a", "register 300; register 100; register 100"),
            rec("b", "register 200; register 50; delete 50"),
            rec("c", "register 150; register-processing 5000"),
            rec("a", "register 250; delete 300"),
        ];
        assert!(values(op.process(Batch::Records(commands)).unwrap()).is_empty());
        let mut out = Vec::new();
        op.on_watermark(120, &mut out).unwrap();
        op.process(Batch::Records(vec![rec("b", "register 130; register 400")]))
            .unwrap();
        op.on_watermark(260, &mut out).unwrap();
        op.on_watermark(260, &mut out).unwrap();
        clock.store(6_000, Ordering::Relaxed);
        op.on_processing_time(6_000, &mut out).unwrap();
        op.on_end(&mut out).unwrap();
        let fired: Vec<String> = out
            .into_iter()
            .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
            .collect();
        assert_eq!(
            fired,
            [
                "a event 100 watermark=120",
                "b event 130 watermark=260",
                "c event 150 watermark=260",
                "b event 200 watermark=260",
                "a event 250 watermark=260",
                "c processing 5000 watermark=260",
                "b event 400 watermark=9223372036854775807",
            ],
            "{kind}"
        );
    }
}

#[test]
fn a_failed_record_changes_no_state() {
    let w = Workdir::new();
    let mut op = operator(
        "test-timers",
        fresh_backend(&w, "memory"),
        CallMode::Batch,
        Default::default(),
    );
    // The second command of the failing record must not stay registered.
    let batch = vec![rec("a", "register 10"), rec("a", "register 20; explode 5")];
    let err = op.process(Batch::Records(batch)).unwrap_err();
    assert!(err.to_string().contains("unknown command `explode`"), "{err}");
    let mut out = Vec::new();
    op.on_end(&mut out).unwrap();
    let fired: Vec<String> = out
        .into_iter()
        .map(|r| String::from_utf8(r.value.to_vec()).unwrap())
        .collect();
    assert_eq!(fired, ["a event 10 watermark=9223372036854775807"]);
}

#[test]
fn fraud_timer_flags_each_burst_of_three_declines() {
    let manifest = repo().join("pipelines/fraud-timer.toml");
    let out = run(&["run", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut alerts: Vec<String> = stdout(&out).lines().map(str::to_owned).collect();
    alerts.sort();
    let t = 1_700_000_000_000i64;
    let alert = |card: &str, first: i64, last: i64| {
        format!(
            r#"{{"card":"{card}","declines":3,"first":{},"last":{}}}"#,
            t + first,
            t + last
        )
    };
    assert_eq!(
        alerts,
        [
            alert("c1", 10_000, 28_000),
            alert("c3", 20_000, 30_000),
            alert("c3", 400_000, 420_000),
            alert("c5", 100_000, 120_000),
            alert("c6", 200_000, 250_000),
        ]
    );
}
