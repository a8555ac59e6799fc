//! The example, run: every word's last count on both sinks is its count in
//! the input.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The last `word=count` per word.
fn last_counts(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .map(|l| {
            let (w, c) = l
                .split_once('=')
                .unwrap_or_else(|| panic!("not word=count: {l:?}"));
            (w.to_owned(), c.parse().unwrap())
        })
        .collect()
}

#[test]
fn the_embedded_word_count_counts_every_word_of_both_sources() {
    let dir = tempfile::tempdir().unwrap();
    let text = "the quick brown fox\njumps over the lazy dog\nThe end\n";
    let input = dir.path().join("input.txt");
    std::fs::write(&input, text).unwrap();
    let plugin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/dist/count.wasm");
    assert!(
        plugin.is_file(),
        "{} is missing: run `just plugins` first",
        plugin.display()
    );
    let output = dir.path().join("counts.txt");
    let out = Command::new(env!("CARGO_BIN_EXE_embedded-wordcount"))
        .args([&input, &plugin, &output])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    for w in text.split_whitespace() {
        *expected.entry(w.to_lowercase()).or_default() += 1;
    }
    for g in 0..100 {
        *expected.entry(format!("w{g}")).or_default() += 1;
    }
    let screen = String::from_utf8(out.stdout).unwrap();
    let file = std::fs::read_to_string(&output).unwrap();
    assert_eq!(last_counts(&screen), expected, "stdout");
    assert_eq!(last_counts(&file), expected, "the file");
    let total: u64 = expected.values().sum();
    assert_eq!(screen.lines().count() as u64, total, "one update per word");
}
