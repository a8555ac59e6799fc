//! Checks of a `branch` operator: its branches' names and predicates.

use super::spec::{BranchOperatorSpec, BranchSpec};
use super::validate_operators::{
    check_limits, check_parallelism, check_plugin_file, check_policy, check_sandbox, condition,
};
use super::{Manifest, ManifestError};
use crate::operators::branch::DEFAULT_OUTPUT;
use std::collections::HashSet;
use std::ops::Range;

/// Checks branch operator `b` (at `span`; `keyed`: after a `key_by`).
pub(super) fn check_branch(
    m: &Manifest,
    b: &BranchOperatorSpec,
    span: &Range<usize>,
    keyed: bool,
) -> Result<(), ManifestError> {
    check_parallelism(m, b.parallelism, keyed, span)?;
    check_policy(m, b.on_error, span)?;
    check_sandbox(m, None, 1, &b.grants, span)?;
    if b.branches.is_empty() {
        return Err(m.error_at(
            span,
            "branches",
            "a `branch` needs at least one `[[operators.branches]]` (a `name` and a condition or a plugin)",
        ));
    }
    let mut names = HashSet::new();
    for branch in &b.branches {
        let at = span.clone();
        check_output_name(m, &branch.name, &at)?;
        if !names.insert(branch.name.as_str()) {
            return Err(m.error_at(
                &at,
                "name",
                format!(
                    "the branch name `{}` is used twice: give each branch its own",
                    branch.name
                ),
            ));
        }
        check_predicate(m, branch, &at)?;
    }
    Ok(())
}

fn check_output_name(m: &Manifest, name: &str, at: &Range<usize>) -> Result<(), ManifestError> {
    let well_formed = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !well_formed {
        return Err(m.error_at(
            at,
            "name",
            format!("the branch name `{name}` is invalid: use letters, digits, `-` and `_`"),
        ));
    }
    if name == DEFAULT_OUTPUT {
        return Err(m.error_at(
            at,
            "name",
            "`default` names the output of records no branch takes: choose another name",
        ));
    }
    Ok(())
}

/// A branch tests a field (`field` and `op`, as `field_filter`) or runs a
/// `filter` plugin, not both.
fn check_predicate(m: &Manifest, b: &BranchSpec, at: &Range<usize>) -> Result<(), ManifestError> {
    match (&b.field, b.op, &b.plugin) {
        (Some(field), Some(op), None) => condition(m, at, field, op, b.value.as_ref()).map(|_| ()),
        (None, None, Some(plugin)) => {
            if b.value.is_some() {
                return Err(m.error_at(at, "value", "`value` belongs to a condition (`field` and `op`), not to a plugin"));
            }
            check_limits(m, b.timeout, b.memory_limit_mb, at)?;
            check_sandbox(m, b.fuel, 1, &Default::default(), at)?;
            check_plugin_file(m, plugin, at).map(|_| ())
        }
        (Some(_), None, None) => Err(m.error_at(at, "field", "a condition needs `op` too (`eq`, `gt`, `exists`, `regex`, ...)")),
        (None, Some(_), None) => Err(m.error_at(at, "op", "a condition needs `field` too: the JSON field to compare")),
        (None, None, None) => Err(m.error_at(
            at,
            "name",
            format!(
                "branch `{}` has no predicate: give a condition (`field`, `op`, `value`) or a `filter` `plugin`",
                b.name
            ),
        )),
        (_, _, Some(_)) => Err(m.error_at(
            at,
            "plugin",
            format!("branch `{}` has both a condition and a plugin: give one of them", b.name),
        )),
    }
}
