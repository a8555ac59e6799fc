//! The `window` table: tumbling, sliding or session windows with built-in
//! aggregates or a plugin of the `window` or `aggregate` world.

use super::{AggregateKind, Assigner, WindowNode, WindowSpec};
use crate::clock::millis;
use crate::config_problem::ConfigProblem;
use crate::config_string::{ConfigString, ConfigStrings};
use crate::operators::builtin::check_aggregates;
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, one_stream_table};
use crate::operators::plugin_table::{self, GrantsSpec, defaults};
use crate::operators::{LateSpec, NodeKind, OperatorNode, Step};
use crate::plugin::World;
use serde::Deserialize;
use std::time::Duration;

/// A built-in window operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowOperatorSpec {
    /// The operator's name; `window` when absent.
    pub name: Option<String>,
    /// `tumbling`, `sliding` or `session`.
    pub window: WindowKind,
    /// Window length (tumbling, sliding).
    #[serde(default, with = "humantime_serde::option")]
    pub size: Option<Duration>,
    /// Distance between window starts (sliding).
    #[serde(default, with = "humantime_serde::option")]
    pub slide: Option<Duration>,
    /// Inactivity that closes a session (session).
    #[serde(default, with = "humantime_serde::option")]
    pub gap: Option<Duration>,
    /// How long after its end a window still takes records (and emits its
    /// result again).
    #[serde(default, with = "humantime_serde")]
    pub allowed_lateness: Duration,
    /// The aggregates of each result: `count` (default), `sum`, `min`,
    /// `max`, `avg`. Not with `plugin`.
    pub aggregates: Option<Vec<AggregateKind>>,
    /// The JSON field (dotted path) of the number to aggregate; the value
    /// itself as decimal text when absent. Not with `plugin`.
    pub field: Option<String>,
    /// A plugin that computes each window's result instead of the built-in
    /// aggregates: of the `window` world (called with all of a window's
    /// records) or of the `aggregate` world (an accumulator grown record by
    /// record). Relative to the manifest's folder.
    pub plugin: Option<ConfigString>,
    /// How long one call of `plugin` may run.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance of `plugin` may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel (about one unit per Wasm instruction) one call may burn;
    /// unlimited when absent. Counting fuel slows the plugin down.
    pub fuel: Option<u64>,
    /// The most records one input record may turn into; more fails that
    /// record.
    #[serde(default = "defaults::max_outputs_per_record")]
    pub max_outputs_per_record: u32,
    /// What the plugin may reach; nothing when absent.
    #[serde(default)]
    pub grants: GrantsSpec,
    /// Records too late for every window: `drop` (default) or `side-output`
    /// (to `[late_output]`); counted either way.
    #[serde(default)]
    pub late: LateSpec,
    /// What to do with a record that has no number to aggregate.
    #[serde(default)]
    pub on_error: crate::failure::FailurePolicy,
    /// `event` (default: the records' event time, fired by watermarks) or
    /// `processing` (the wall clock; tumbling and sliding windows only).
    #[serde(default)]
    pub time: TimeDomain,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// Which time windows follow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeDomain {
    /// The records' event time.
    #[default]
    Event,
    /// The wall clock when a record is handled.
    Processing,
}

/// A window shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WindowKind {
    /// Fixed, non-overlapping.
    Tumbling,
    /// Fixed length, overlapping.
    Sliding,
    /// Per key, closed by inactivity.
    Session,
}

impl OperatorConfig for WindowOperatorSpec {
    one_stream_table!("window");

    fn config_strings(&mut self) -> ConfigStrings<'_> {
        let mut strings: ConfigStrings<'_> = self.plugin.iter_mut().map(|p| ("plugin", p)).collect();
        strings.extend(self.grants.config_string());
        strings
    }

    fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        cx.needs_keyed()?;
        self.check_lengths()?;
        if let Some(aggregates) = &self.aggregates {
            check_aggregates(aggregates)?;
        }
        if self.plugin.is_some() {
            plugin_table::check_sandbox(cx, self.fuel, self.max_outputs_per_record, &self.grants)?;
            for (key, given) in [
                ("aggregates", self.aggregates.is_some()),
                ("field", self.field.is_some()),
            ] {
                if given {
                    return Err(ConfigProblem::field(
                        key,
                        format!("a window with a `plugin` computes its result in the plugin: remove `{key}`"),
                    ));
                }
            }
        }
        if self.window == WindowKind::Session && self.time == TimeDomain::Processing {
            return Err(ConfigProblem::field(
                "time",
                "session windows are on event time only: remove `time = \"processing\"`",
            ));
        }
        cx.check_late(self.late == LateSpec::SideOutput)?;
        cx.check_policy(self.on_error)
    }

    fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
        let plugin = match &self.plugin {
            None => None,
            Some(path) => {
                let plugin = plugin_table::load(cx, path, World::Window, self.fuel)?;
                let limits = plugin_table::limits(
                    self.timeout,
                    self.memory_limit_mb,
                    self.fuel,
                    self.max_outputs_per_record,
                );
                Some((plugin, limits))
            }
        };
        let window = WindowNode {
            spec: self.window_spec(),
            plugin,
            side_output: self.late == LateSpec::SideOutput,
            late_records: Default::default(),
        };
        let mut node = OperatorNode::new(cx.name, NodeKind::Window(window), self.on_error);
        node.grants = self.grants.grants(cx.dir);
        Ok(Step::Operator { node, parallelism: 1 })
    }

    fn keeps_state(&self) -> bool {
        true
    }
}

impl WindowOperatorSpec {
    /// The lengths its shape needs are given, at least 1 ms, and only those.
    fn check_lengths(&self) -> Result<(), ConfigProblem> {
        let (needed, unused): (&[&'static str], &[&'static str]) = match self.window {
            WindowKind::Tumbling => (&["size"], &["slide", "gap"]),
            WindowKind::Sliding => (&["size", "slide"], &["gap"]),
            WindowKind::Session => (&["gap"], &["size", "slide"]),
        };
        let value = |key: &str| match key {
            "size" => self.size,
            "slide" => self.slide,
            _ => self.gap,
        };
        let kind = format!("{:?}", self.window).to_lowercase();
        for &key in needed {
            match value(key) {
                None => {
                    return Err(ConfigProblem::field(
                        "window",
                        format!("a {kind} window needs `{key}` (e.g. \"1m\")"),
                    ));
                }
                Some(d) if d.as_millis() == 0 => {
                    return Err(ConfigProblem::field(key, format!("`{key}` must be at least 1ms")));
                }
                Some(_) => {}
            }
        }
        if let Some(&key) = unused.iter().find(|k| value(k).is_some()) {
            return Err(ConfigProblem::field(
                key,
                format!("`{key}` does not apply to a {kind} window"),
            ));
        }
        if let (Some(size), Some(slide)) = (self.size, self.slide)
            && slide > size
        {
            return Err(ConfigProblem::field(
                "slide",
                "`slide` must not be longer than `size`",
            ));
        }
        Ok(())
    }

    /// What the windows compute.
    fn window_spec(&self) -> WindowSpec {
        let ms = |d: Option<Duration>| d.map_or(1, millis);
        let assigner = match self.window {
            WindowKind::Tumbling => Assigner::Tumbling { size: ms(self.size) },
            WindowKind::Sliding => Assigner::Sliding {
                size: ms(self.size),
                slide: ms(self.slide),
            },
            WindowKind::Session => Assigner::Session { gap: ms(self.gap) },
        };
        WindowSpec {
            assigner,
            allowed_lateness: i64::try_from(self.allowed_lateness.as_millis()).unwrap_or(i64::MAX),
            aggregates: self
                .aggregates
                .clone()
                .unwrap_or_else(|| vec![AggregateKind::Count]),
            field: self.field.clone(),
            processing_time: self.time == TimeDomain::Processing,
        }
    }
}
