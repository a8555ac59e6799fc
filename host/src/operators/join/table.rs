//! The join tables: `interval_join` (two keyed streams, records within an
//! interval of each other) and `lookup_join` (a stream and a table, keyed
//! or global).

use super::{AsOf, GlobalJoinSpec, IntervalJoinSpec, JoinKind, JoinNode, JoinSpec, LookupJoinSpec};
use crate::config_problem::ConfigProblem;
use crate::config_string::ConfigStrings;
use crate::failure::FailurePolicy;
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, Shape};
use crate::operators::plugin_table::JoinPluginSpec;
use crate::operators::{LateSpec, NodeKind, OperatorNode, Step};
use serde::Deserialize;

/// The `lookup_join` operator: each record of `input` with the row of its
/// key in `table`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupJoinOperatorSpec {
    /// The operator's name; `lookup_join` when absent.
    pub name: Option<String>,
    /// The stream (keyed by the join key).
    pub input: String,
    /// The table: a keyed stream read as a changelog, the latest value per
    /// key (an empty value deletes the key).
    pub table: String,
    /// `latest` (default: the row when the record is processed) or
    /// `event_time` (the row valid at the record's event time).
    #[serde(default)]
    pub as_of: AsOf,
    /// `inner` (default: records without a row are dropped) or `left`
    /// (they leave with `"table": null`).
    #[serde(default)]
    pub join: JoinKind,
    /// Stream records at or before the watermark when they arrive (as of
    /// `event_time`): `drop` (default) or `side-output`; counted either way.
    #[serde(default)]
    pub late: LateSpec,
    /// A global table: every worker reads the whole table, so `input`
    /// needs no `key_by` (joined as of `latest` only).
    #[serde(default)]
    pub global: bool,
    /// With `global`: the JSON field (dotted path) of a stream record
    /// holding its join key; the record's key when absent.
    pub key_field: Option<String>,
    /// With `global`: the most rows the table may hold (1,000,000 when
    /// absent); a change adding one more stops the pipeline.
    pub max_rows: Option<u64>,
    /// What to do with a stream record without `key_field` (with
    /// `global`) and with a pair the plugin fails on (its JSON document
    /// goes to the policy): `fail` (default), `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// With `global` and an `input` that is not keyed: its workers
    /// (default 1).
    pub parallelism: Option<usize>,
    /// A `join`-world plugin computing each output; the JSON document of
    /// both sides when absent.
    pub plugin: Option<JoinPluginSpec>,
}

/// The `interval_join` operator: a `left` record at time `t` joins each
/// `right` record of its key at a time in `[t + lower, t + upper]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntervalJoinOperatorSpec {
    /// The operator's name; `interval_join` when absent.
    pub name: Option<String>,
    /// The left stream (keyed): a source's or an earlier operator's name.
    pub left: String,
    /// The right stream (keyed, by the same parallelism).
    pub right: String,
    /// The earliest right record a left one joins, relative to it: a
    /// duration, negative for before it (`"-5s"`).
    #[serde(with = "signed_ms")]
    pub lower: i64,
    /// The latest right record a left one joins, relative to it (`"10s"`).
    #[serde(with = "signed_ms")]
    pub upper: i64,
    /// `inner` (default: joined pairs only), `left`, `right` or `full`
    /// (also the records of that side that joined nothing, once the
    /// watermark passed their interval).
    #[serde(default)]
    pub join: JoinKind,
    /// Records at or before the watermark when they arrive: `drop`
    /// (default) or `side-output` (to `[late_output]`); counted either way.
    #[serde(default)]
    pub late: LateSpec,
    /// A `join`-world plugin computing each output; the JSON document of
    /// both sides when absent.
    pub plugin: Option<JoinPluginSpec>,
    /// What to do with a pair the plugin fails on (its JSON document goes
    /// to the policy): `fail` (default), `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
}

/// A duration with an optional leading `-` (`"-5s"`, `"1m 30s"`), in ms.
mod signed_ms {
    use serde::{Deserialize, Deserializer, de::Error};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = String::deserialize(d)?;
        let (sign, magnitude) = match text.trim().strip_prefix('-') {
            Some(rest) => (-1, rest.trim()),
            None => (1, text.trim()),
        };
        let duration = humantime_serde::re::humantime::parse_duration(magnitude).map_err(|e| {
            D::Error::custom(format!(
                "`{text}` is not a duration such as \"-5s\" or \"10s\": {e}"
            ))
        })?;
        let ms = i64::try_from(duration.as_millis())
            .map_err(|_| D::Error::custom(format!("`{text}` is too long a duration")))?;
        Ok(sign * ms)
    }
}

/// The rows a global table may hold unless `max_rows` says otherwise.
const MAX_GLOBAL_ROWS: u64 = 1_000_000;

/// The policy and the plugin of a join.
fn check_plugin(
    cx: &CheckContext<'_>,
    plugin: Option<&JoinPluginSpec>,
    on_error: FailurePolicy,
) -> Result<(), ConfigProblem> {
    cx.check_policy(on_error)?;
    plugin.map_or(Ok(()), |p| p.check(cx))
}

/// The step of the join `cx.name` computing `spec`: its left (or stream)
/// side input 0, its right (or table) side input 1; on `parallelism`
/// workers when its stream is not keyed (a global table's join).
fn join_step(
    cx: &BuildContext<'_>,
    spec: JoinSpec,
    late: LateSpec,
    plugin: Option<&JoinPluginSpec>,
    policy: FailurePolicy,
    parallelism: usize,
) -> Result<Step, ConfigProblem> {
    let broadcast = spec.broadcast_input();
    let join = JoinNode {
        spec,
        side_output: late == LateSpec::SideOutput,
        late_records: Default::default(),
        plugin: plugin.map(|p| p.load(cx)).transpose()?,
    };
    Ok(Step::Apart {
        node: OperatorNode::new(cx.name, NodeKind::Join(join), policy),
        input_numbers: vec![0, 1],
        parallelism,
        broadcast,
    })
}

/// The `${VAR}`s of a join's plugin.
fn plugin_strings(plugin: &mut Option<JoinPluginSpec>) -> ConfigStrings<'_> {
    plugin.iter_mut().map(|p| ("plugin", &mut p.path)).collect()
}

impl OperatorConfig for IntervalJoinOperatorSpec {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn default_name(&self) -> String {
        "interval_join".into()
    }

    fn shape(&self) -> Shape<'_> {
        Shape::Sides {
            sides: [("left", Some(&self.left)), ("right", Some(&self.right))],
        }
    }

    fn config_strings(&mut self) -> ConfigStrings<'_> {
        plugin_strings(&mut self.plugin)
    }

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        cx.check_sides()?;
        cx.check_late(self.late == LateSpec::SideOutput)?;
        if self.lower > self.upper {
            return Err(ConfigProblem::field(
                "lower",
                format!(
                    "`lower` ({} ms) is after `upper` ({} ms): the interval is empty",
                    self.lower, self.upper
                ),
            ));
        }
        check_plugin(cx, self.plugin.as_ref(), self.on_error)
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let spec = JoinSpec::Interval(IntervalJoinSpec {
            lower: self.lower,
            upper: self.upper,
            kind: self.join,
        });
        join_step(cx, spec, self.late, self.plugin.as_ref(), self.on_error, 1)
    }

    fn keeps_state(&self) -> bool {
        true
    }
}

impl OperatorConfig for LookupJoinOperatorSpec {
    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn default_name(&self) -> String {
        "lookup_join".into()
    }

    fn shape(&self) -> Shape<'_> {
        Shape::Sides {
            sides: [("input", Some(&self.input)), ("table", Some(&self.table))],
        }
    }

    fn config_strings(&mut self) -> ConfigStrings<'_> {
        plugin_strings(&mut self.plugin)
    }

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        match self.global {
            true => {
                self.check_global(cx)?;
                check_plugin(cx, self.plugin.as_ref(), self.on_error)
            }
            false => self.check_keyed(cx),
        }
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let keep_unmatched = self.join == JoinKind::Left;
        let spec = match self.global {
            true => JoinSpec::Global(GlobalJoinSpec {
                key_field: self.key_field.clone(),
                keep_unmatched,
                max_rows: self.max_rows.unwrap_or(MAX_GLOBAL_ROWS),
            }),
            false => JoinSpec::Lookup(LookupJoinSpec {
                as_of: self.as_of,
                keep_unmatched,
            }),
        };
        let parallelism = self.parallelism.unwrap_or(1);
        join_step(
            cx,
            spec,
            self.late,
            self.plugin.as_ref(),
            self.on_error,
            parallelism,
        )
    }

    fn keeps_state(&self) -> bool {
        true
    }
}

impl LookupJoinOperatorSpec {
    /// A join with a global table: as of `latest`, its stream keyed or on
    /// its own `parallelism`, `max_rows` at least 1.
    fn check_global(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        if self.as_of != AsOf::Latest {
            return Err(ConfigProblem::field(
                "as_of",
                "a global table is joined as of `latest`: every worker reads it whole and no stream record waits for it; key both sides by the join key and drop `global` to join as of `event_time`",
            ));
        }
        self.check_join_kind()?;
        if self.max_rows == Some(0) {
            return Err(ConfigProblem::field("max_rows", "max_rows must be at least 1"));
        }
        cx.check_parallelism(self.parallelism)
    }

    /// A keyed table: the settings only a global table takes are absent,
    /// its plugin, both sides keyed alike.
    fn check_keyed(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        let given = [
            ("key_field", self.key_field.is_some()),
            ("max_rows", self.max_rows.is_some()),
            ("parallelism", self.parallelism.is_some()),
            (
                "on_error",
                self.on_error != FailurePolicy::Fail && self.plugin.is_none(),
            ),
        ];
        if let Some((key, _)) = given.iter().find(|(_, set)| *set) {
            return Err(ConfigProblem::field(
                key,
                format!(
                    "`{key}` is for a global table (`global = true`); a keyed table joins each record by its key"
                ),
            ));
        }
        check_plugin(cx, self.plugin.as_ref(), self.on_error)?;
        cx.check_sides()?;
        cx.check_late(self.late == LateSpec::SideOutput)?;
        self.check_join_kind()
    }

    fn check_join_kind(&self) -> Result<(), ConfigProblem> {
        if matches!(self.join, JoinKind::Right | JoinKind::Full) {
            return Err(ConfigProblem::field(
                "join",
                "a `lookup_join` is `inner` or `left`: a table row is not an event to emit alone",
            ));
        }
        Ok(())
    }
}
