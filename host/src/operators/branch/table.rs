//! The `branch` table: named outputs, each with its predicate (a condition
//! on a JSON field or a `filter`-world plugin), and `<name>.default`.

use super::{BranchNode, DEFAULT_OUTPUT, PredicateNode};
use crate::config_problem::ConfigProblem;
use crate::config_string::{ConfigString, ConfigStrings};
use crate::failure::FailurePolicy;
use crate::operators::builtin::{Compare, Condition};
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, one_stream_table};
use crate::operators::plugin_table::{self, GrantsSpec, defaults};
use crate::operators::{NodeKind, OperatorNode, Step};
use crate::plugin::{CallMode, World};
use serde::Deserialize;
use std::collections::HashSet;
use std::time::Duration;

/// The `branch` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchOperatorSpec {
    /// The operator's name (its outputs are `<name>.<branch>` and
    /// `<name>.default`); `branch` when absent.
    pub name: Option<String>,
    /// The branches, in the order they are tried.
    pub branches: Vec<BranchSpec>,
    /// What to do with a record a predicate fails on (not JSON for a
    /// condition, a plugin's error): `fail` (default), `skip` or
    /// `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// What the branches' plugins may reach; nothing when absent.
    #[serde(default)]
    pub grants: GrantsSpec,
    /// Workers, when it runs before any `key_by` (default 1). After a
    /// `key_by`, it runs on its workers instead.
    pub parallelism: Option<usize>,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// One branch of a `branch` operator: its name and its predicate, a
/// condition on a JSON field (`field`, `op`, `value`, as `field_filter`)
/// or a `filter`-world `plugin` (the records it keeps).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchSpec {
    /// The output's name (read as `<operator>.<name>`); not `default`.
    pub name: String,
    /// The JSON field (dotted path) to compare.
    pub field: Option<String>,
    /// `eq`, `ne`, `lt`, `le`, `gt`, `ge`, `exists` or `regex`.
    pub op: Option<Compare>,
    /// The constant to compare with (a pattern for `regex`; none for
    /// `exists`).
    pub value: Option<toml::Value>,
    /// Or a plugin of the `filter` world, relative to the manifest's folder.
    pub plugin: Option<ConfigString>,
    /// `batch` (default) or `record`: how calls cross into `plugin`.
    #[serde(default)]
    pub call: CallMode,
    /// How long one call of `plugin` may run.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance of `plugin` may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel one call of `plugin` may burn; unlimited when absent.
    pub fuel: Option<u64>,
}

impl OperatorConfig for BranchOperatorSpec {
    one_stream_table!("branch");

    fn config_strings(&mut self) -> ConfigStrings<'_> {
        let mut strings: ConfigStrings<'_> = (self.branches.iter_mut())
            .filter_map(|b| b.plugin.as_mut().map(|p| ("plugin", p)))
            .collect();
        strings.extend(self.grants.config_string());
        strings
    }

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        cx.check_parallelism(self.parallelism)?;
        cx.check_policy(self.on_error)?;
        plugin_table::check_sandbox(cx, None, 1, &self.grants)?;
        if self.branches.is_empty() {
            return Err(ConfigProblem::field(
                "branches",
                "a `branch` needs at least one `[[operators.branches]]` (a `name` and a condition or a plugin)",
            ));
        }
        let mut names = HashSet::new();
        for branch in &self.branches {
            check_output_name(&branch.name)?;
            if !names.insert(branch.name.as_str()) {
                return Err(ConfigProblem::field(
                    "name",
                    format!(
                        "the branch name `{}` is used twice: give each branch its own",
                        branch.name
                    ),
                ));
            }
            branch.check(cx)?;
        }
        Ok(())
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let mut branches = Vec::with_capacity(self.branches.len());
        for spec in &self.branches {
            branches.push((spec.name.clone(), spec.predicate(cx)?));
        }
        let mut node = OperatorNode::new(cx.name, NodeKind::Branch(BranchNode { branches }), self.on_error);
        node.grants = self.grants.grants(cx.dir);
        Ok(Step::Branch {
            node,
            parallelism: self.parallelism.unwrap_or(1),
        })
    }

    fn outputs(&self) -> Option<Vec<&str>> {
        Some(self.branches.iter().map(|b| b.name.as_str()).collect())
    }
}

fn check_output_name(name: &str) -> Result<(), ConfigProblem> {
    let well_formed = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !well_formed {
        return Err(ConfigProblem::field(
            "name",
            format!("the branch name `{name}` is invalid: use letters, digits, `-` and `_`"),
        ));
    }
    if name == DEFAULT_OUTPUT {
        return Err(ConfigProblem::field(
            "name",
            "`default` names the output of records no branch takes: choose another name",
        ));
    }
    Ok(())
}

impl BranchSpec {
    /// A branch tests a field (`field` and `op`, as `field_filter`) or
    /// runs a `filter` plugin, not both.
    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        match (&self.field, self.op, &self.plugin) {
            (Some(field), Some(op), None) => Condition::of_table(field, op, self.value.as_ref()).map(|_| ()),
            (None, None, Some(plugin)) => {
                if self.value.is_some() {
                    return Err(ConfigProblem::field(
                        "value",
                        "`value` belongs to a condition (`field` and `op`), not to a plugin",
                    ));
                }
                plugin_table::check_limits(self.timeout, self.memory_limit_mb)?;
                plugin_table::check_sandbox(cx, self.fuel, 1, &GrantsSpec::default())?;
                plugin_table::check_plugin_file(cx, plugin).map(|_| ())
            }
            (Some(_), None, None) => Err(ConfigProblem::field(
                "field",
                "a condition needs `op` too (`eq`, `gt`, `exists`, `regex`, ...)",
            )),
            (None, Some(_), None) => Err(ConfigProblem::field(
                "op",
                "a condition needs `field` too: the JSON field to compare",
            )),
            (None, None, None) => Err(ConfigProblem::field(
                "name",
                format!(
                    "branch `{}` has no predicate: give a condition (`field`, `op`, `value`) or a `filter` `plugin`",
                    self.name
                ),
            )),
            (_, _, Some(_)) => Err(ConfigProblem::field(
                "plugin",
                format!(
                    "branch `{}` has both a condition and a plugin: give one of them",
                    self.name
                ),
            )),
        }
    }

    /// Its predicate: the condition, or the `filter` plugin loaded.
    fn predicate(&self, cx: &BuildContext<'_>) -> Result<PredicateNode, ConfigProblem> {
        Ok(match (&self.plugin, &self.field, self.op) {
            (Some(path), _, _) => PredicateNode::Plugin {
                plugin: plugin_table::load(cx, path, World::Filter, self.fuel)?,
                limits: plugin_table::limits(self.timeout, self.memory_limit_mb, self.fuel, 1),
                mode: self.call,
            },
            (None, Some(field), Some(op)) => {
                PredicateNode::Field(Condition::of_table(field, op, self.value.as_ref())?)
            }
            _ => unreachable!("validated: a condition or a plugin"),
        })
    }
}
