//! The graph form of manifests: what each operator and sink reads, and the
//! errors of a graph that cannot run, each at its line.

use super::{Manifest, Stream};

fn parse(text: &str) -> Result<Manifest, String> {
    let file = std::env::temp_dir().join("graph.toml");
    Manifest::parse(&file, text.to_owned(), |_| None).map_err(|e| e.to_string())
}

const HEAD: &str = r#"[pipeline]
name = "g"
"#;

const TWO_SOURCES: &str = r#"
[[sources]]
name = "a"
type = "generator"
count = 10

[[sources]]
name = "b"
type = "generator"
count = 10
"#;

fn with(body: &str) -> String {
    format!("{HEAD}{TWO_SOURCES}{body}")
}

const PROJECT: &str = r#"type = "project"
fields = ["x"]"#;

#[test]
fn operators_and_sinks_read_what_they_name_or_what_is_before_them() {
    let m = parse(&with(&format!(
        r#"
[[operators]]
name = "both"
inputs = ["a", "b"]
{PROJECT}

[[operators]]
name = "next"
{PROJECT}

[[operators]]
name = "side"
input = "a"
{PROJECT}

[[sinks]]
name = "out"
type = "stdout"

[[sinks]]
name = "all"
inputs = ["next", "b"]
type = "stdout"
"#
    )))
    .unwrap();
    use Stream::*;
    assert_eq!(
        m.graph.operator_inputs,
        vec![vec![Source(0), Source(1)], vec![Operator(0)], vec![Source(0)]]
    );
    assert_eq!(
        m.graph.sink_inputs,
        vec![vec![Operator(2)], vec![Operator(1), Source(1)]]
    );
}

#[test]
fn a_linear_manifest_is_a_chain_from_its_source_to_its_sink() {
    let m = parse(&format!(
        "{HEAD}\n[source]\ntype = \"generator\"\n\n[[operators]]\n{PROJECT}\n\n[[operators]]\ntype = \"key_by\"\n\n[[operators]]\ntype = \"aggregate\"\naggregates = [\"count\"]\n\n[sink]\ntype = \"stdout\"\n"
    ))
    .unwrap();
    use Stream::*;
    assert_eq!(
        m.graph.operator_inputs,
        vec![vec![Source(0)], vec![Operator(0)], vec![Operator(1)]]
    );
    assert_eq!(m.graph.sink_inputs, vec![vec![Operator(2)]]);
}

/// Each broken graph, with the error it gets (`line:column: message`).
#[test]
fn a_graph_that_cannot_run_is_refused_at_its_line() {
    let sink = "\n[[sinks]]\nname = \"out\"\ntype = \"stdout\"\n";
    let cases = [
        (
            with(&format!("\n[[operators]]\n{PROJECT}\n{sink}")),
            "with several sources, say which this reads",
        ),
        (
            with(&format!("\n[[operators]]\ninput = \"nope\"\n{PROJECT}\n{sink}")),
            "15:1: `nope` is neither a source nor an operator before it",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"x\"\ninput = \"a\"\n{PROJECT}\n\n[[operators]]\ninput = \"y\"\n{PROJECT}\n\n[[operators]]\nname = \"y\"\ninput = \"x\"\n{PROJECT}\n{sink}"
            )),
            "`y` is neither a source nor an operator before it",
        ),
        (
            with(&format!("\n[[operators]]\ninput = \"a\"\n{PROJECT}\n{sink}")),
            "nothing reads source `b`",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"x\"\ninputs = [\"a\", \"b\"]\n{PROJECT}\n\n[[operators]]\nname = \"y\"\ninput = \"a\"\n{PROJECT}\n\n[[sinks]]\nname = \"out\"\ninput = \"x\"\ntype = \"stdout\"\n"
            )),
            "nothing reads the output of operator `y`",
        ),
        (
            with(&format!(
                "\n[[operators]]\ninputs = [\"a\", \"a\"]\n{PROJECT}\n{sink}"
            )),
            "`a` is named twice in `inputs`",
        ),
        (
            with(&format!(
                "\n[[operators]]\ninput = \"a\"\ninputs = [\"b\"]\n{PROJECT}\n{sink}"
            )),
            "give `input` or `inputs`, not both",
        ),
        (
            with("\n[[sinks]]\nname = \"a\"\ninputs = [\"a\", \"b\"]\ntype = \"stdout\"\n"),
            "the name `a` is used twice",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"out\"\ninputs = [\"a\", \"b\"]\n{PROJECT}\n{sink}"
            )),
            "sink name `out` is an operator's name too",
        ),
        (
            with("\n[[sinks]]\nname = \"dead-letter\"\ninputs = [\"a\", \"b\"]\ntype = \"stdout\"\n"),
            "the name `dead-letter` is reserved",
        ),
        (
            with("\n[[sinks]]\nname = \"stage-2\"\ninputs = [\"a\", \"b\"]\ntype = \"stdout\"\n"),
            "the name `stage-2` is reserved",
        ),
        (
            with("\n[[sinks]]\nname = \"a b\"\ninputs = [\"a\", \"b\"]\ntype = \"stdout\"\n"),
            "the name `a b` is invalid",
        ),
        (
            format!("{HEAD}\n[source]\ntype = \"generator\"\n{TWO_SOURCES}\n[sink]\ntype = \"stdout\"\n"),
            "give `[source]` or `[[sources]]`, not both",
        ),
        (
            format!("{HEAD}\n[sink]\ntype = \"stdout\"\n"),
            "1:1: the pipeline has no source",
        ),
        (
            with(&format!(
                "\n[[operators]]\ntype = \"aggregate\"\ninputs = [\"a\", \"b\"]\naggregates = [\"count\"]\n{sink}"
            )),
            "`aggregate` needs a keyed stream",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(&text).expect_err(&text);
        assert!(
            err.contains(expected),
            "expected {expected:?}, got {err:?} for:\n{text}"
        );
    }
}

/// A branch on the union of both sources, with two branches and the
/// default.
const BRANCH: &str = r#"
[[operators]]
name = "route"
type = "branch"
inputs = ["a", "b"]

[[operators.branches]]
name = "big"
field = "x"
op = "gt"
value = 10

[[operators.branches]]
name = "named"
field = "name"
op = "exists"
"#;

#[test]
fn readers_of_a_branch_read_its_outputs_by_name() {
    let m = parse(&with(&format!(
        r#"{BRANCH}
[[operators]]
name = "small"
input = "route.default"
{PROJECT}

[[sinks]]
name = "big"
input = "route.big"
type = "stdout"

[[sinks]]
name = "rest"
inputs = ["small", "route.named"]
type = "stdout"
"#
    )))
    .unwrap();
    use Stream::*;
    assert_eq!(
        m.graph.operator_inputs,
        vec![vec![Source(0), Source(1)], vec![Output(0, 2)]]
    );
    assert_eq!(
        m.graph.sink_inputs,
        vec![vec![Output(0, 0)], vec![Operator(1), Output(0, 1)]]
    );
}

/// Each broken branch, with the error it gets.
#[test]
fn a_branch_that_cannot_run_is_refused_at_its_line() {
    let sink = |input: &str| format!("\n[[sinks]]\nname = \"out\"\ninput = \"{input}\"\ntype = \"stdout\"\n");
    let cases = [
        (
            with(&format!("{BRANCH}{}", sink("route"))),
            "`route` is a branch: read one of its outputs, `route.big`, `route.named`, `route.default`",
        ),
        (
            with(&format!("{BRANCH}{}", sink("route.huge"))),
            "branch `route` has no output `huge`: its outputs are `route.big`",
        ),
        (
            with(&format!(
                "{BRANCH}\n[[sinks]]\nname = \"out\"\ntype = \"stdout\"\n"
            )),
            "the operator before it is the branch `route`: name the output this reads in `input`",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"p\"\ninputs = [\"a\", \"b\"]\n{PROJECT}\n{}",
                sink("p.x")
            )),
            "`p.x`: operator `p` has one output, read as `p`",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\nbranches = []\n{}",
                sink("route.default")
            )),
            "a `branch` needs at least one `[[operators.branches]]`",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\n\n[[operators.branches]]\nname = \"default\"\nfield = \"x\"\nop = \"exists\"\n{}",
                sink("route.default")
            )),
            "`default` names the output of records no branch takes",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\n\n[[operators.branches]]\nname = \"x\"\n{}",
                sink("route.x")
            )),
            "branch `x` has no predicate",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\n\n[[operators.branches]]\nname = \"x\"\nfield = \"x\"\nop = \"gt\"\n{}",
                sink("route.x")
            )),
            "`op = \"gt\"` needs a `value` to compare with",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\n\n[[operators.branches]]\nname = \"x\"\nfield = \"x\"\nop = \"exists\"\nplugin = \"f.wasm\"\n{}",
                sink("route.x")
            )),
            "branch `x` has both a condition and a plugin",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\n\n[[operators.branches]]\nname = \"x\"\nplugin = \"missing.wasm\"\n{}",
                sink("route.x")
            )),
            "missing.wasm`) does not exist; build it first",
        ),
        (
            with(&format!(
                "\n[[operators]]\nname = \"route\"\ntype = \"branch\"\ninputs = [\"a\", \"b\"]\n\n[[operators.branches]]\nname = \"x\"\nfield = \"x\"\nop = \"exists\"\n\n[[operators.branches]]\nname = \"x\"\nfield = \"y\"\nop = \"exists\"\n{}",
                sink("route.x")
            )),
            "the branch name `x` is used twice",
        ),
    ];
    for (text, expected) in cases {
        let err = parse(&text).expect_err(&text);
        assert!(
            err.contains(expected),
            "expected {expected:?}, got {err:?} for:\n{text}"
        );
    }
}
