//! Cluster mode through what only a real broker does: a member frozen past
//! its session and transaction timeouts (a zombie) while its partitions
//! move. Every check reads the output with an independent `read_committed`
//! consumer: each word's counts 1..n exactly once, nothing else.

use crate::cluster_runs::{Member, assert_exact_counts, input_and_output, lines, settled_status, word_count};
use crate::kafka::produce;
use crate::support::*;
use std::time::Duration;

#[test]
fn a_member_frozen_past_its_session_and_transaction_timeouts_is_fenced_and_rejoins() {
    let w = Workdir::new();
    let (input, output) = input_and_output("cluster-zombie");
    // session_timeout 6 s; commit_interval 300 ms, so a transaction times
    // out after 10 s (4 x commit_interval, at least 10 s).
    let m = word_count(&w, &input, &output);
    let mut input_so_far = lines(0, 300, 30);
    produce(&input, &input_so_far);
    let mut a = Member::start(&w, &m, "a");
    let mut b = Member::start(&w, &m, "b");
    settled_status(&m, &input, 2);

    // `a` freezes with work in an open transaction: records keep coming
    // for 20 s, past its session (the group hands its partitions to `b`)
    // and its transaction timeout (the brokers abort what it left open).
    a.signal(libc::SIGSTOP);
    for round in 1..=10 {
        let more = lines(300 * round, 60, 30);
        produce(&input, &more);
        input_so_far.extend(more);
        std::thread::sleep(Duration::from_secs(2));
    }
    assert_exact_counts(&output, &input_so_far, &mut [&mut b]);

    // Woken, the zombie writes nothing of what it held: its transaction
    // was aborted and its producer fenced; it rejoins and gets a share
    // again, its tasks restored from their changelogs.
    a.signal(libc::SIGCONT);
    let more = lines(3300, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    // A cooperative rebalance moves partitions in two rounds: the second
    // may come after the group first looks settled.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let text = settled_status(&m, &input, 2);
        let held_by_a = text
            .lines()
            .filter(|l| {
                l.starts_with(&input) && l.split_whitespace().nth(4).is_some_and(|c| c.ends_with("-a"))
            })
            .count();
        if held_by_a > 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the woken member holds partitions again:\n{text}\n{}",
            a.log()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let more = lines(3600, 300, 30);
    produce(&input, &more);
    input_so_far.extend(more);
    assert_exact_counts(&output, &input_so_far, &mut [&mut a, &mut b]);
    let logs = [a.stop(), b.stop()];
    assert_exact_counts(&output, &input_so_far, &mut []);
    assert!(
        !logs.iter().any(|l| l.contains("panicked")),
        "{}",
        logs.join("\n----\n")
    );
}
