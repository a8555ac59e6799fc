//! The word count at several keyed parallelisms.

use crate::support::*;

fn word_count(parallelism: usize, input: &str) -> std::collections::BTreeMap<String, String> {
    let w = Workdir::new();
    w.write("words.txt", input);
    let manifest = w.manifest(&format!(
        r#"
[pipeline]
name = "wc"
batch_size = 64

[source]
type = "file"
path = "words.txt"

[[operators]]
type = "flat_map"
plugin = "{{plugin:split-words}}"

[[operators]]
type = "key_by"
parallelism = {parallelism}

[[operators]]
type = "reduce"
plugin = "{{plugin:count}}"

[sink]
type = "file"
path = "out.txt"
"#
    ));
    let out = run(&["run", manifest.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    last_values(&w.read("out.txt"))
}

#[test]
fn totals_are_identical_at_parallelism_1_2_and_4() {
    // Enough distinct words that every worker gets keys, repeated unevenly.
    let input: String = (0..3000)
        .map(|i| format!("w{} w{} common\n", i % 97, (i * 7) % 13))
        .collect();
    let expected = count_words(&input);
    for p in [1, 2, 4] {
        assert_eq!(word_count(p, &input), expected, "parallelism {p}");
    }
}
