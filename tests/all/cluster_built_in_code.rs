//! Cluster mode in a pipeline built in code (`Pipeline::cluster`): native
//! closures split and count words in two members of one consumer group
//! (threads of this test), exactly once, against the real broker.

use crate::cluster_runs::{assert_counts_exact, input_and_output, lines, occurrences};
use crate::kafka::{bootstrap, consume_all, produce};
use mailer::Pipeline;
use mailer::config_string::ConfigString;
use mailer::connectors::kafka::{KafkaSinkSpec, KafkaSourceSpec};
use mailer::manifest::ClusterSpec;
use mailer::record::Record;
use mailer::runtime::{RunReport, Shutdown};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One member: the word count built in code, run until `shutdown`.
fn member(
    input: &str,
    output: &str,
    instance: &str,
    shutdown: &Shutdown,
) -> JoinHandle<Result<RunReport, String>> {
    let (input, output, instance, shutdown) = (
        input.to_owned(),
        output.to_owned(),
        instance.to_owned(),
        shutdown.clone(),
    );
    std::thread::spawn(move || {
        let mut cluster = ClusterSpec::new(&input);
        cluster.instance_id = Some(ConfigString::new(instance));
        cluster.commit_interval = Duration::from_millis(300);
        cluster.session_timeout = Duration::from_secs(6);
        let source = KafkaSourceSpec::new(&bootstrap(), &[&input], &input);
        let mut sink = KafkaSinkSpec::new(&bootstrap(), &output);
        sink.exactly_once = true;
        let p = Pipeline::new(&input).batch_size(50).cluster(cluster);
        p.kafka_source("lines", source)
            .flat_map("split", |line: Record| {
                line.value
                    .split(|b| *b == b' ')
                    .filter(|w| !w.is_empty())
                    .map(|w| {
                        Record::new(
                            Some(line.value.slice_ref(w)),
                            line.value.slice_ref(w),
                            line.timestamp,
                        )
                    })
                    .collect::<Vec<_>>()
            })
            .key_by_record_key(1)
            .reduce_with("counts", |count, _| {
                let before: u64 = count.map_or(0, |c| std::str::from_utf8(c).unwrap().parse().unwrap());
                (before + 1).to_string().into_bytes()
            })
            .kafka_sink("out", sink);
        p.run_until(&shutdown).map_err(|e| e.to_string())
    })
}

#[test]
fn a_pipeline_built_in_code_counts_words_exactly_once_in_two_members() {
    let (input, output) = input_and_output("cluster-code");
    let first = lines(0, 300, 40);
    produce(&input, &first);
    let shutdown = Shutdown::new();
    let members = [
        member(&input, &output, "a", &shutdown),
        member(&input, &output, "b", &shutdown),
    ];
    std::thread::sleep(Duration::from_secs(2));
    let second = lines(300, 300, 40);
    produce(&input, &second);
    let all: Vec<_> = first.into_iter().chain(second).collect();
    let expected = occurrences(&all);
    let total: u64 = expected.values().sum();
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut got = consume_all(&output, 1);
    while (got.len() as u64) < total && Instant::now() < deadline && members.iter().all(|m| !m.is_finished())
    {
        std::thread::sleep(Duration::from_millis(500));
        got = consume_all(&output, 1);
    }
    shutdown.cancel();
    let ends: Vec<String> = members
        .into_iter()
        .map(|m| format!("{:?}", m.join().expect("a member panicked")))
        .collect();
    assert!(
        ends.iter().all(|e| e.starts_with("Ok(")),
        "the members ended: {ends:?}"
    );
    assert_counts_exact(&got, &expected, &ends.join("\n"));
}
