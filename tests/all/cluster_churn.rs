//! Cluster mode under churn, as users run it: three processes of one group
//! stopped (SIGTERM) and killed (SIGKILL) and started again more than
//! twenty times while records keep coming, then scaled 1 -> 3 -> 2 live;
//! over 200 000 keyed records with the counts' state in memory and in
//! RocksDB. The whole output is read with an independent `read_committed`
//! consumer: each word's counts 1..n exactly once, nothing else.

use crate::cluster_runs::{Member, assert_exact_counts, input_and_output, lines, word_count_with};
use crate::kafka::produce;
use crate::support::*;
use std::time::Duration;

/// Words in the input: each word's counts run to about 1 500.
const WORDS: usize = 150;
/// Lines fed between two membership changes (three words each).
const LINES_PER_STEP: usize = 2_500;

/// Feeds the next step's lines to `input`, keeping them in `fed`.
fn feed(input: &str, fed: &mut Vec<(String, String)>) {
    let more = lines(fed.len(), LINES_PER_STEP, WORDS);
    produce(input, &more);
    fed.extend(more);
}

fn churn(prefix: &str, state: &str) {
    let w = Workdir::new();
    let (input, output) = input_and_output(prefix);
    let m = word_count_with(&w, &input, &output, state);
    let names = ["a", "b", "c"];
    let mut members: Vec<Member> = names.iter().map(|n| Member::start(&w, &m, n)).collect();
    let mut fed = Vec::new();
    let mut changes = 0;
    // Twelve rounds, each taking one process away (killed in even rounds,
    // stopped in odd ones) and starting it again: 24 membership changes,
    // records coming all along.
    for round in 0..12 {
        feed(&input, &mut fed);
        let i = round % names.len();
        let gone = members.remove(i);
        if round % 2 == 0 {
            gone.kill();
        } else {
            gone.stop();
        }
        std::thread::sleep(Duration::from_millis(700));
        feed(&input, &mut fed);
        members.insert(i, Member::start(&w, &m, names[i]));
        changes += 2;
        std::thread::sleep(Duration::from_millis(1500));
    }
    assert!(changes >= 20);
    assert_exact_counts(&output, &fed, &mut members.iter_mut().collect::<Vec<_>>());

    // Scaled live: down to one process, up to three, down to two.
    let a = members.remove(0);
    for m in members.drain(..) {
        m.stop();
    }
    members.push(a);
    feed(&input, &mut fed);
    assert_exact_counts(&output, &fed, &mut members.iter_mut().collect::<Vec<_>>());
    members.push(Member::start(&w, &m, "b"));
    members.push(Member::start(&w, &m, "c"));
    feed(&input, &mut fed);
    assert_exact_counts(&output, &fed, &mut members.iter_mut().collect::<Vec<_>>());
    members.pop().expect("c").stop();
    feed(&input, &mut fed);
    assert_exact_counts(&output, &fed, &mut members.iter_mut().collect::<Vec<_>>());

    let keyed_records = fed.len() * 3;
    assert!(keyed_records >= 200_000, "{keyed_records} keyed records");
    for m in members {
        m.stop();
    }
    // Nothing more is written once all stopped.
    assert_exact_counts(&output, &fed, &mut []);
}

#[test]
fn churn_and_rescaling_lose_and_repeat_nothing_with_state_in_memory() {
    churn("cluster-churn-memory", "");
}

#[test]
fn churn_and_rescaling_lose_and_repeat_nothing_with_state_in_rocksdb() {
    churn("cluster-churn-rocksdb", "[state]\nbackend = \"rocksdb\"\n");
}
