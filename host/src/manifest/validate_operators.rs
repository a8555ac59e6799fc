//! Checks of the operator list: each operator's settings, the order they
//! can run in, and unique names.

use super::spec::*;
use super::{Manifest, ManifestError};
use crate::connectors::config::shown;
use crate::failure::FailurePolicy;
use std::collections::HashSet;
use std::ops::Range;

pub(super) fn check_operators(m: &mut Manifest) -> Result<(), ManifestError> {
    let count = m.spec.operators.len();
    let mut names = Vec::with_capacity(count);
    let mut seen = HashSet::new();
    // Whether each operator's output is keyed: a `key_by`'s is, and so is
    // that of an operator reading one keyed stream (a union's is not).
    let mut keyed_outputs: Vec<bool> = Vec::with_capacity(count);
    // The keyed workers of each keyed output (a `key_by`'s parallelism).
    let mut keyed_workers: Vec<Option<usize>> = Vec::with_capacity(count);
    let mut inputs = Vec::with_capacity(count);
    for (i, op) in m.spec.operators.iter().enumerate() {
        let span = op.span();
        let reads = super::graph::operator_inputs(m, i, op.get_ref(), &span, &names)?;
        let keyed = super::Stream::reads_keyed(&reads, &keyed_outputs);
        let workers_of = |s: &super::Stream| match s {
            super::Stream::Operator(o) | super::Stream::Output(o, _) => keyed_workers[*o],
            super::Stream::Source(_) => None,
        };
        let keyed_input =
            |s: &super::Stream| super::Stream::reads_keyed(std::slice::from_ref(s), &keyed_outputs);
        let workers = match op.get_ref() {
            OperatorSpec::KeyBy(k) => Some(k.parallelism),
            OperatorSpec::LookupJoin(j) if j.global && !keyed_input(&reads[0]) => None,
            OperatorSpec::IntervalJoin(_) | OperatorSpec::LookupJoin(_) | OperatorSpec::CoProcess(_) => {
                workers_of(&reads[0])
            }
            _ if keyed => workers_of(&reads[0]),
            _ => None,
        };
        let sides = || [workers_of(&reads[0]), workers_of(&reads[1])];
        match op.get_ref() {
            OperatorSpec::IntervalJoin(j) => {
                let named = [("left", &j.left), ("right", &j.right)];
                check_join(m, &span, "interval_join", named, sides(), j.late)?;
                check_interval(m, j, &span)?;
                check_join_plugin(m, j.plugin.as_ref(), j.on_error, &span)?;
            }
            OperatorSpec::CoProcess(p) => {
                let named = [
                    ("left", p.left.as_ref().expect("resolved")),
                    ("right", p.right.as_ref().expect("resolved")),
                ];
                check_join(m, &span, "co_process", named, sides(), LateSpec::Drop)?;
                if p.input.is_some() || p.inputs.is_some() || p.parallelism.is_some() {
                    return Err(m.error_at(
                        &span,
                        "input",
                        "a `co_process` reads `left` and `right` on their keyed workers: remove `input`, `inputs` and `parallelism`",
                    ));
                }
            }
            OperatorSpec::LookupJoin(j) if j.global => {
                check_global_join(m, j, &span, keyed_input(&reads[0]))?;
                check_join_plugin(m, j.plugin.as_ref(), j.on_error, &span)?;
            }
            OperatorSpec::LookupJoin(j) => {
                check_not_global(m, j, &span)?;
                check_join_plugin(m, j.plugin.as_ref(), j.on_error, &span)?;
                let named = [("input", &j.input), ("table", &j.table)];
                check_join(m, &span, "lookup_join", named, sides(), j.late)?;
                use crate::operators::join::JoinKind;
                if matches!(j.join, JoinKind::Right | JoinKind::Full) {
                    return Err(m.error_at(
                        &span,
                        "join",
                        "a `lookup_join` is `inner` or `left`: a table row is not an event to emit alone",
                    ));
                }
            }
            _ => {}
        }
        keyed_outputs.push(workers.is_some());
        keyed_workers.push(workers);
        inputs.push(reads);
        // An explicit name must be unique; a default one gets the operator's
        // position when taken.
        let (explicit, default) = match op.get_ref() {
            OperatorSpec::KeyBy(k) => {
                check_key_by(m, k, &span, i + 1 == count)?;
                (k.name.clone(), "key_by".to_owned())
            }
            OperatorSpec::Window(w) => {
                needs_keyed(m, &span, "window", keyed)?;
                check_window(m, w, &span)?;
                (w.name.clone(), "window".to_owned())
            }
            OperatorSpec::Aggregate(a) => {
                needs_keyed(m, &span, "aggregate", keyed)?;
                check_aggregates(m, &a.aggregates, &span)?;
                check_policy(m, a.on_error, &span)?;
                (a.name.clone(), "aggregate".to_owned())
            }
            OperatorSpec::FieldFilter(f) => {
                check_field_filter(m, f, &span)?;
                (f.name.clone(), "field_filter".to_owned())
            }
            OperatorSpec::Project(p) => {
                check_policy(m, p.on_error, &span)?;
                (p.name.clone(), "project".to_owned())
            }
            OperatorSpec::Rename(r) => {
                check_policy(m, r.on_error, &span)?;
                (r.name.clone(), "rename".to_owned())
            }
            OperatorSpec::Set(s) => {
                check_policy(m, s.on_error, &span)?;
                (s.name.clone(), "set".to_owned())
            }
            OperatorSpec::IntervalJoin(j) => (j.name.clone(), "interval_join".to_owned()),
            OperatorSpec::LookupJoin(j) => (j.name.clone(), "lookup_join".to_owned()),
            OperatorSpec::Branch(b) => {
                super::validate_branch::check_branch(m, b, &span, keyed)?;
                (b.name.clone(), "branch".to_owned())
            }
            other => {
                match other {
                    OperatorSpec::Reduce(_) => needs_keyed(m, &span, "reduce", keyed)?,
                    OperatorSpec::Process(_) => needs_keyed(m, &span, "process", keyed)?,
                    _ => {}
                }
                let p = other.plugin().expect("every other operator runs a plugin");
                if !matches!(other, OperatorSpec::CoProcess(_)) && (p.left.is_some() || p.right.is_some()) {
                    let key = if p.left.is_some() { "left" } else { "right" };
                    return Err(m.error_at(
                        &span,
                        key,
                        "`left` and `right` are the inputs of a `co_process` (or a join): read one stream with `input`",
                    ));
                }
                check_state_ttl(m, other, &span)?;
                let default = check_plugin(m, p, &span, keyed)?;
                (p.name.clone(), default)
            }
        };
        let name = match explicit {
            Some(n) => n,
            None if seen.contains(&default) => format!("{default}-{i}"),
            None => default,
        };
        if !seen.insert(name.clone()) {
            return Err(m.error_at(
                &span,
                "name",
                format!("operator name `{name}` is used twice: give each operator a unique `name`"),
            ));
        }
        names.push(name);
    }
    m.operator_names = names;
    m.graph = super::graph::finish(m, inputs)?;
    Ok(())
}

/// A join (`what`) reads two keyed streams (`named`: key and stream, by
/// side) of the same keyed workers (`workers`, by side); late records to the
/// late output need one.
fn check_join(
    m: &Manifest,
    span: &Range<usize>,
    what: &str,
    named: [(&str, &String); 2],
    workers: [Option<usize>; 2],
    late: LateSpec,
) -> Result<(), ManifestError> {
    for ((key, name), side) in named.into_iter().zip(workers) {
        if side.is_none() {
            return Err(m.error_at(
                span,
                key,
                format!("`{what}` needs keyed streams: `{name}` is not keyed; read a `key_by`'s output"),
            ));
        }
    }
    if let [Some(l), Some(r)] = workers
        && l != r
    {
        return Err(m.error_at(
            span,
            named[1].0,
            format!("the two sides of `{what}` are keyed over {l} and {r} workers: give their `key_by`s the same parallelism"),
        ));
    }
    if late == LateSpec::SideOutput && m.spec.late_output.is_none() {
        return Err(m.error_at(
            span,
            "late",
            "`late = \"side-output\"` needs a `[late_output]` sink in the manifest",
        ));
    }
    Ok(())
}

/// A join with a global table: as of `latest`, its stream keyed or on its
/// own `parallelism`, `max_rows` at least 1.
fn check_global_join(
    m: &Manifest,
    j: &LookupJoinOperatorSpec,
    span: &Range<usize>,
    keyed: bool,
) -> Result<(), ManifestError> {
    use crate::operators::join::{AsOf, JoinKind};
    if j.as_of != AsOf::Latest {
        return Err(m.error_at(
            span,
            "as_of",
            "a global table is joined as of `latest`: every worker reads it whole and no stream record waits for it; key both sides by the join key and drop `global` to join as of `event_time`",
        ));
    }
    if matches!(j.join, JoinKind::Right | JoinKind::Full) {
        return Err(m.error_at(
            span,
            "join",
            "a `lookup_join` is `inner` or `left`: a table row is not an event to emit alone",
        ));
    }
    if j.max_rows == Some(0) {
        return Err(m.error_at(span, "max_rows", "max_rows must be at least 1"));
    }
    check_parallelism(m, j.parallelism, keyed, span)
}

/// The settings only a global table takes are absent.
fn check_not_global(
    m: &Manifest,
    j: &LookupJoinOperatorSpec,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    let given = [
        ("key_field", j.key_field.is_some()),
        ("max_rows", j.max_rows.is_some()),
        ("parallelism", j.parallelism.is_some()),
        (
            "on_error",
            j.on_error != FailurePolicy::Fail && j.plugin.is_none(),
        ),
    ];
    match given.iter().find(|(_, set)| *set) {
        Some((key, _)) => Err(m.error_at(
            span,
            key,
            format!(
                "`{key}` is for a global table (`global = true`); a keyed table joins each record by its key"
            ),
        )),
        None => Ok(()),
    }
}

/// An interval join's bounds are in order.
fn check_interval(
    m: &Manifest,
    j: &IntervalJoinOperatorSpec,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    if j.lower > j.upper {
        return Err(m.error_at(
            span,
            "lower",
            format!(
                "`lower` ({} ms) is after `upper` ({} ms): the interval is empty",
                j.lower, j.upper
            ),
        ));
    }
    Ok(())
}

fn check_state_ttl(m: &Manifest, op: &OperatorSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    let Some(p) = op.plugin() else { return Ok(()) };
    if !p.state_ttl.is_empty() && !matches!(op, OperatorSpec::Process(_) | OperatorSpec::CoProcess(_)) {
        return Err(m.error_at(
            span,
            "state_ttl",
            "`state_ttl` is for `process` and `co_process` operators (only they have named state): remove it",
        ));
    }
    for (name, ttl) in &p.state_ttl {
        if name.len() > 255 {
            return Err(m.error_at(
                span,
                "state_ttl",
                format!("state name `{name:.40}…` is longer than 255 bytes"),
            ));
        }
        if ttl.is_zero() {
            return Err(m.error_at(
                span,
                "state_ttl",
                format!(
                    "the time-to-live of state `{name}` is zero: give a positive duration such as \"60s\""
                ),
            ));
        }
    }
    Ok(())
}

fn max_parallelism(m: &Manifest) -> usize {
    m.spec.pipeline.get_ref().max_parallelism as usize
}

fn needs_keyed(m: &Manifest, span: &Range<usize>, what: &str, keyed: bool) -> Result<(), ManifestError> {
    if keyed {
        return Ok(());
    }
    Err(m.error_at(
        span,
        "type",
        format!("`{what}` needs a keyed stream: add an operator with `type = \"key_by\"` before it"),
    ))
}

fn check_key_by(m: &Manifest, k: &KeyBySpec, span: &Range<usize>, last: bool) -> Result<(), ManifestError> {
    check_policy(m, k.on_error, span)?;
    let max = max_parallelism(m);
    if !(1..=max).contains(&k.parallelism) {
        return Err(m.error_at(
            span,
            "parallelism",
            format!(
                "key_by parallelism {} is out of range: expected 1 to max_parallelism ({max})",
                k.parallelism
            ),
        ));
    }
    if last {
        return Err(m.error_at(
            span,
            "type",
            "`key_by` is the last operator: put the keyed operators (e.g. a `reduce`) after it",
        ));
    }
    Ok(())
}

pub(super) fn check_policy(
    m: &Manifest,
    policy: FailurePolicy,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    if policy == FailurePolicy::DeadLetter && m.spec.dead_letter.is_none() {
        return Err(m.error_at(
            span,
            "on_error",
            "`on_error = \"dead-letter\"` needs a `[dead_letter]` sink in the manifest",
        ));
    }
    Ok(())
}

fn check_aggregates(
    m: &Manifest,
    aggregates: &[crate::operators::window::AggregateKind],
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    if aggregates.is_empty() {
        return Err(m.error_at(
            span,
            "aggregates",
            "`aggregates` is empty: name at least one of count, sum, min, max, avg",
        ));
    }
    Ok(())
}

fn check_field_filter(m: &Manifest, f: &FieldFilterSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    check_policy(m, f.on_error, span)?;
    condition(m, span, &f.field, f.op, f.value.as_ref())?;
    Ok(())
}

/// The condition of a `field_filter` or a branch: `field` `op` `value`
/// (no value for `exists`; a valid pattern for `regex`).
pub fn condition(
    m: &Manifest,
    span: &Range<usize>,
    field: &str,
    op: crate::operators::builtin::Compare,
    value: Option<&toml::Value>,
) -> Result<crate::operators::builtin::Condition, ManifestError> {
    use crate::operators::builtin::{Compare, Condition};
    let value = match (value, op) {
        (None, Compare::Exists) => serde_json::Value::Null,
        (None, op) => {
            return Err(m.error_at(
                span,
                "op",
                format!("`op = \"{op:?}\"` needs a `value` to compare with").to_lowercase(),
            ));
        }
        (Some(v), _) => crate::json::from_toml(v),
    };
    Condition::new(field, op, value).map_err(|e| m.error_at(span, "value", e))
}

/// A stateless operator's own `parallelism`: only before any `key_by`,
/// and within the key groups.
pub(super) fn check_parallelism(
    m: &Manifest,
    parallelism: Option<usize>,
    keyed: bool,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    let max = max_parallelism(m);
    let Some(par) = parallelism else { return Ok(()) };
    if keyed {
        return Err(m.error_at(
            span,
            "parallelism",
            "operators after `key_by` run on its workers: set `parallelism` on the `key_by` instead",
        ));
    }
    if !(1..=max).contains(&par) {
        return Err(m.error_at(
            span,
            "parallelism",
            format!("parallelism {par} is out of range: expected 1 to max_parallelism ({max})"),
        ));
    }
    Ok(())
}

/// A plugin's call deadline and memory limit.
pub(super) fn check_limits(
    m: &Manifest,
    timeout: std::time::Duration,
    memory_limit_mb: u64,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    if timeout.is_zero() {
        return Err(m.error_at(span, "timeout", "timeout must be longer than 0 (e.g. \"500ms\")"));
    }
    if memory_limit_mb == 0 || memory_limit_mb > 4096 {
        return Err(m.error_at(
            span,
            "memory_limit_mb",
            format!("memory_limit_mb {memory_limit_mb} is out of range: expected 1 to 4096"),
        ));
    }
    Ok(())
}

/// Checks a plugin operator; returns its default name.
fn check_plugin(
    m: &Manifest,
    p: &PluginOperatorSpec,
    span: &Range<usize>,
    keyed: bool,
) -> Result<String, ManifestError> {
    check_parallelism(m, p.parallelism, keyed, span)?;
    check_limits(m, p.timeout, p.memory_limit_mb, span)?;
    check_policy(m, p.on_error, span)?;
    check_sandbox(m, p.fuel, p.max_outputs_per_record, &p.grants, span)?;
    let path = check_plugin_file(m, &p.plugin, span)?;
    Ok(path
        .file_stem()
        .map_or_else(|| "plugin".to_owned(), |s| s.to_string_lossy().replace('_', "-")))
}

/// A join's plugin: its limits, its file, and the policy for the pairs it
/// fails on.
fn check_join_plugin(
    m: &Manifest,
    plugin: Option<&JoinPluginSpec>,
    on_error: FailurePolicy,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    check_policy(m, on_error, span)?;
    let Some(p) = plugin else { return Ok(()) };
    let s = &p.settings;
    check_limits(m, s.timeout, s.memory_limit_mb, span)?;
    check_sandbox(m, s.fuel, s.max_outputs_per_record, &GrantsSpec::default(), span)?;
    check_plugin_file(m, &p.path, span).map(|_| ())
}

/// The plugin file `plugin` names, which must exist.
pub(super) fn check_plugin_file(
    m: &Manifest,
    plugin: &crate::config_string::ConfigString,
    span: &Range<usize>,
) -> Result<std::path::PathBuf, ManifestError> {
    let path = m.path(plugin);
    if !path.is_file() {
        return Err(m.error_at(
            span,
            "plugin",
            format!(
                "plugin file {} does not exist; {}",
                shown(plugin, &path),
                missing_plugin_hint(&path)
            ),
        ));
    }
    Ok(path)
}

/// What to do about the missing plugin file `path`: for one of the
/// project's own plugins (in `plugins/dist/`), build them; for the user's,
/// build it, or fix a path that is relative to the manifest's folder.
fn missing_plugin_hint(path: &std::path::Path) -> String {
    let in_dist = path.parent().is_some_and(|dir| dir.ends_with("plugins/dist"));
    if in_dist {
        return "build the plugins with `just plugins`".into();
    }
    let wasm_target = path.components().any(|c| c.as_os_str() == "wasm32-wasip2");
    let build = if wasm_target {
        "build it first (`cargo build --release --target wasm32-wasip2` in the plugin's project)"
    } else {
        "build it first (`./build.sh` or `npm run build` in a Python or JavaScript plugin's project, `cargo build --release --target wasm32-wasip2` in a Rust one)"
    };
    format!("{build}, or correct the path (a relative path is read from the manifest's folder)")
}

/// Fuel, the output limit and the grants of a plugin.
pub(super) fn check_sandbox(
    m: &Manifest,
    fuel: Option<u64>,
    max_outputs: u32,
    grants: &GrantsSpec,
    span: &Range<usize>,
) -> Result<(), ManifestError> {
    if fuel == Some(0) {
        return Err(m.error_at(
            span,
            "fuel",
            "fuel must be more than 0 (e.g. 10000000), or absent for no limit",
        ));
    }
    if max_outputs == 0 {
        return Err(m.error_at(
            span,
            "max_outputs_per_record",
            "max_outputs_per_record must be at least 1",
        ));
    }
    if let Some(dir) = &grants.dir {
        let path = m.path(dir);
        if !path.is_dir() {
            return Err(m.error_at(
                span,
                "grants",
                format!("`grants.dir` {} is not a directory", shown(dir, &path)),
            ));
        }
    }
    if let Some(name) = grants.env.iter().find(|n| std::env::var_os(n).is_none()) {
        return Err(m.error_at(
            span,
            "grants",
            format!("`grants.env` names `{name}`, which is not set in mailer's environment"),
        ));
    }
    Ok(())
}

fn check_window(m: &Manifest, w: &WindowOperatorSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    let (needed, unused): (&[&str], &[&str]) = match w.window {
        WindowKind::Tumbling => (&["size"], &["slide", "gap"]),
        WindowKind::Sliding => (&["size", "slide"], &["gap"]),
        WindowKind::Session => (&["gap"], &["size", "slide"]),
    };
    let value = |key: &str| match key {
        "size" => w.size,
        "slide" => w.slide,
        _ => w.gap,
    };
    let kind = format!("{:?}", w.window).to_lowercase();
    for key in needed {
        match value(key) {
            None => {
                return Err(m.error_at(
                    span,
                    "window",
                    format!("a {kind} window needs `{key}` (e.g. \"1m\")"),
                ));
            }
            Some(d) if d.as_millis() == 0 => {
                return Err(m.error_at(span, key, format!("`{key}` must be at least 1ms")));
            }
            Some(_) => {}
        }
    }
    if let Some(key) = unused.iter().find(|k| value(k).is_some()) {
        return Err(m.error_at(span, key, format!("`{key}` does not apply to a {kind} window")));
    }
    if let (Some(size), Some(slide)) = (w.size, w.slide)
        && slide > size
    {
        return Err(m.error_at(span, "slide", "`slide` must not be longer than `size`"));
    }
    if let Some(aggregates) = &w.aggregates {
        check_aggregates(m, aggregates, span)?;
    }
    if w.plugin.is_some() {
        check_sandbox(m, w.fuel, w.max_outputs_per_record, &w.grants, span)?;
        for (key, given) in [
            ("aggregates", w.aggregates.is_some()),
            ("field", w.field.is_some()),
        ] {
            if given {
                return Err(m.error_at(
                    span,
                    key,
                    format!("a window with a `plugin` computes its result in the plugin: remove `{key}`"),
                ));
            }
        }
    }
    if w.window == WindowKind::Session && w.time == TimeDomain::Processing {
        return Err(m.error_at(
            span,
            "time",
            "session windows are on event time only: remove `time = \"processing\"`",
        ));
    }
    if w.late == LateSpec::SideOutput && m.spec.late_output.is_none() {
        return Err(m.error_at(
            span,
            "late",
            "`late = \"side-output\"` needs a `[late_output]` sink in the manifest",
        ));
    }
    check_policy(m, w.on_error, span)
}

#[cfg(test)]
mod tests {
    use super::missing_plugin_hint;
    use std::path::Path;

    #[test]
    fn a_missing_plugin_is_explained_by_where_it_was_expected() {
        let ours = missing_plugin_hint(Path::new("/repo/plugins/dist/count.wasm"));
        assert_eq!(ours, "build the plugins with `just plugins`");
        let rust = missing_plugin_hint(Path::new("/p/target/wasm32-wasip2/release/mine.wasm"));
        assert!(
            rust.starts_with("build it first (`cargo build --release"),
            "{rust}"
        );
        assert!(rust.ends_with("read from the manifest's folder)"), "{rust}");
        let other = missing_plugin_hint(Path::new("/p/mine.wasm"));
        assert!(other.contains("`./build.sh` or `npm run build`"), "{other}");
    }
}
