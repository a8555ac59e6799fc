//! The manifest parser on any input — arbitrary text, and a full manifest
//! with lines swapped for odd ones — gives a manifest or an error, never a
//! panic.

use super::Manifest;
use proptest::prelude::*;

/// A manifest touching most sections and operator kinds.
const FULL: &str = r#"[pipeline]
name = "p"
batch_size = 64
edge_capacity = 128
max_parallelism = 16

[source]
type = "generator"
count = 100
keys = 5
rate = 1000

[watermark]
max_out_of_orderness = "1s"
idle_timeout = "5s"

[[operators]]
name = "f"
type = "field_filter"
field = "a.b"
op = "gt"
value = 3

[[operators]]
type = "key_by"
parallelism = 2

[[operators]]
name = "w"
type = "window"
window = "tumbling"
size = "10s"
allowed_lateness = "1s"

[sink]
type = "file"
path = "out.txt"
append = true

[dead_letter]
type = "stdout"

[state]
backend = "memory"

[checkpoint]
interval = "1s"
keep = 2
"#;

/// Lines an edit may put in place of one of `FULL`'s.
const ODD: &[&str] = &[
    "",
    "[[operators]]",
    "[sink]",
    "type = \"window\"",
    "type = \"reduce\"",
    "type = \"kafka\"",
    "type = \"postgres\"",
    "window = \"session\"",
    "size = \"0s\"",
    "size = \"-1s\"",
    "parallelism = 0",
    "parallelism = 4294967296",
    "batch_size = 0",
    "edge_capacity = 0",
    "keep = 0",
    "interval = \"0s\"",
    "rate = 18446744073709551615",
    "count = -1",
    "max_parallelism = 0",
    "path = \"${NOPE}\"",
    "path = \"/\"",
    "value = { a = 1 }",
    "field = \"\"",
    "op = \"regex\"",
    "value = \"(\"",
    "name = \"\"",
    "plugin = \"missing.wasm\"",
    "allowed_lateness = \"100000000000000000000s\"",
];

/// Parses `text` as a manifest in the temp folder (which exists, so the
/// checks of paths run too; nothing is written).
fn parse(text: String) -> Result<Manifest, super::ManifestError> {
    Manifest::parse(&std::env::temp_dir().join("mailer-parse-test.toml"), text, |_| {
        None
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn any_text_is_a_manifest_or_an_error(text in "\\PC{0,300}") {
        let _ = parse(text);
    }

    #[test]
    fn a_manifest_with_odd_lines_is_a_manifest_or_an_error(
        edits in proptest::collection::vec((any::<usize>(), 0..ODD.len() + 1, "[ -~]{0,30}"), 1..6),
    ) {
        let mut lines: Vec<String> = FULL.lines().map(str::to_owned).collect();
        for (at, pick, random) in edits {
            let at = at % lines.len();
            lines[at] = ODD.get(pick).map_or(random, |l| (*l).to_owned());
        }
        let _ = parse(lines.join("\n"));
    }
}

#[test]
fn the_full_manifest_parses() {
    parse(FULL.to_owned()).unwrap();
}
