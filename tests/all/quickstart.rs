//! The quickstart pipeline, exactly as the README runs it.

use crate::support::*;

#[test]
fn quickstart_final_counts_equal_an_independent_count() {
    let manifest = repo().join("pipelines/quickstart.toml");
    let out = mailer()
        .env("NO_COLOR", "1")
        .arg("run")
        .arg(&manifest)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let words = std::fs::read_to_string(repo().join("pipelines/data/words.txt")).unwrap();
    let expected = count_words(&words);
    assert!(expected.len() > 50, "the sample text has many words");
    assert_eq!(last_values(&stdout(&out)), expected);
    let total: u64 = expected.values().map(|v| v.parse::<u64>().unwrap()).sum();
    assert_eq!(
        stdout(&out).lines().count() as u64,
        total,
        "one update per word occurrence"
    );
}

#[test]
fn describe_shows_stages_edges_and_plugin_digests() {
    let out = run(&[
        "describe",
        repo().join("pipelines/quickstart.toml").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("stage `stage-1`: parallelism 1"), "{text}");
    assert!(
        text.contains("stage `keyed-2`: parallelism 2, keyed by hash over 128 key groups"),
        "{text}"
    );
    assert!(
        text.contains("edge: capacity 4096 records (4 batches of up to 1024)"),
        "{text}"
    );
    assert!(text.contains("world `flat-map` sha256 "), "{text}");
    assert!(text.contains("world `reduce` sha256 "), "{text}");
}
