//! The parts of an operator's table that set up a plugin, shared by every
//! kind that runs one: its limits and grants, their checks, the file it
//! names, and loading it for its world.

use super::config::{BuildContext, CheckContext};
use crate::config_problem::ConfigProblem;
use crate::config_string::{ConfigString, shown};
use crate::plugin::{CallMode, Grants, LoadedPlugin, PluginLimits, World};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Defaults of a plugin's settings.
pub mod defaults {
    use std::time::Duration;

    /// Per-call deadline.
    pub const fn plugin_timeout() -> Duration {
        Duration::from_secs(1)
    }
    /// Instance memory limit.
    pub const fn memory_limit_mb() -> u64 {
        64
    }
    /// Records one input record may turn into.
    pub const fn max_outputs_per_record() -> u32 {
        10_000
    }
}

/// What an operator's plugin may reach beyond nothing (WASI capabilities).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrantsSpec {
    /// A directory (relative to the manifest) the plugin reads, not writes,
    /// as `/data`.
    pub dir: Option<ConfigString>,
    /// Environment variables the plugin sees, with the values they have when
    /// the pipeline starts.
    #[serde(default)]
    pub env: Vec<String>,
    /// The real wall and monotonic clocks (else frozen at 0).
    #[serde(default)]
    pub clocks: bool,
    /// Real randomness (else zeros).
    #[serde(default)]
    pub random: bool,
}

impl GrantsSpec {
    /// Its field that may hold a `${VAR}` (the folder), if given.
    pub fn config_string(&mut self) -> Option<(&'static str, &mut ConfigString)> {
        self.dir.as_mut().map(|d| ("grants", d))
    }

    /// The grants, with the folder resolved against `dir` and the
    /// variables' values now.
    pub fn grants(&self, dir: &Path) -> Arc<Grants> {
        Arc::new(Grants {
            dir: self.dir.as_ref().map(|d| dir.join(d.value())),
            env: self
                .env
                .iter()
                .filter_map(|n| Some((n.clone(), std::env::var(n).ok()?)))
                .collect(),
            clocks: self.clocks,
            random: self.random,
        })
    }
}

/// The plugin of a join: a `join`-world component that makes each pair's
/// output records instead of the JSON document of both sides. Written as
/// the file (`plugin = "x.wasm"`) or as a table with its limits
/// (`plugin = { path = "x.wasm", timeout = "2s" }`).
#[derive(Debug)]
pub struct JoinPluginSpec {
    /// The component file, relative to the manifest's folder.
    pub path: ConfigString,
    /// Its call mode and limits.
    pub settings: JoinPluginSettings,
}

/// The settings of a join's plugin besides its file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JoinPluginSettings {
    /// `batch` (default: one call per batch of pairs) or `record`.
    #[serde(default)]
    pub call: CallMode,
    /// How long one call may run.
    #[serde(default = "defaults::plugin_timeout", with = "humantime_serde")]
    pub timeout: Duration,
    /// The most linear memory one instance may use, in MiB.
    #[serde(default = "defaults::memory_limit_mb")]
    pub memory_limit_mb: u64,
    /// Fuel one call may burn; unlimited when absent.
    pub fuel: Option<u64>,
    /// The most records one pair may turn into; more fails that pair.
    #[serde(default = "defaults::max_outputs_per_record")]
    pub max_outputs_per_record: u32,
}

impl<'de> Deserialize<'de> for JoinPluginSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Table {
            path: ConfigString,
            #[serde(flatten)]
            settings: toml::Table,
        }
        #[derive(Deserialize)]
        #[serde(
            untagged,
            expecting = "a plugin file, or a table with `path` and the plugin's limits"
        )]
        enum Written {
            File(ConfigString),
            Table(Table),
        }
        let (path, settings) = match Written::deserialize(d)? {
            Written::File(path) => (path, toml::Table::new()),
            Written::Table(t) => (t.path, t.settings),
        };
        let settings = toml::Value::Table(settings)
            .try_into()
            .map_err(|e: toml::de::Error| serde::de::Error::custom(e.message()))?;
        Ok(Self { path, settings })
    }
}

impl JoinPluginSpec {
    /// Its limits, its file, and its output limit.
    pub fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
        let s = &self.settings;
        check_limits(s.timeout, s.memory_limit_mb)?;
        check_sandbox(cx, s.fuel, s.max_outputs_per_record, &GrantsSpec::default())?;
        check_plugin_file(cx, &self.path).map(|_| ())
    }

    /// The plugin loaded and checked, with its limits and call mode.
    pub fn load(
        &self,
        cx: &BuildContext<'_>,
    ) -> Result<(Arc<LoadedPlugin>, PluginLimits, CallMode), ConfigProblem> {
        let s = &self.settings;
        let plugin = load(cx, &self.path, World::Join, s.fuel)?;
        let limits = limits(s.timeout, s.memory_limit_mb, s.fuel, s.max_outputs_per_record);
        Ok((plugin, limits, s.call))
    }
}

/// The plugin file `path` loaded for `world` (fuel counted when `fuel` is
/// set); a file that cannot be loaded, or of another world, is a problem
/// at `plugin`.
pub fn load(
    cx: &BuildContext<'_>,
    path: &ConfigString,
    world: World,
    fuel: Option<u64>,
) -> Result<Arc<LoadedPlugin>, ConfigProblem> {
    cx.engine
        .load_with(&cx.path(path), world, cx.name, fuel.is_some())
        .map_err(|e| ConfigProblem::field("plugin", e.to_string()))
}

/// The limits of one instance.
pub fn limits(timeout: Duration, memory_limit_mb: u64, fuel: Option<u64>, max_outputs: u32) -> PluginLimits {
    PluginLimits {
        timeout,
        memory_bytes: (memory_limit_mb as usize) << 20,
        fuel,
        max_outputs_per_record: max_outputs,
    }
}

/// A plugin's call deadline and memory limit.
pub fn check_limits(timeout: Duration, memory_limit_mb: u64) -> Result<(), ConfigProblem> {
    if timeout.is_zero() {
        return Err(ConfigProblem::field(
            "timeout",
            "timeout must be longer than 0 (e.g. \"500ms\")",
        ));
    }
    if memory_limit_mb == 0 || memory_limit_mb > 4096 {
        return Err(ConfigProblem::field(
            "memory_limit_mb",
            format!("memory_limit_mb {memory_limit_mb} is out of range: expected 1 to 4096"),
        ));
    }
    Ok(())
}

/// Fuel, the output limit and the grants of a plugin.
pub fn check_sandbox(
    cx: &CheckContext<'_>,
    fuel: Option<u64>,
    max_outputs: u32,
    grants: &GrantsSpec,
) -> Result<(), ConfigProblem> {
    if fuel == Some(0) {
        return Err(ConfigProblem::field(
            "fuel",
            "fuel must be more than 0 (e.g. 10000000), or absent for no limit",
        ));
    }
    if max_outputs == 0 {
        return Err(ConfigProblem::field(
            "max_outputs_per_record",
            "max_outputs_per_record must be at least 1",
        ));
    }
    if let Some(dir) = &grants.dir {
        let path = cx.path(dir);
        if !path.is_dir() {
            return Err(ConfigProblem::field(
                "grants",
                format!("`grants.dir` {} is not a directory", shown(dir, &path)),
            ));
        }
    }
    if let Some(name) = grants.env.iter().find(|n| std::env::var_os(n).is_none()) {
        return Err(ConfigProblem::field(
            "grants",
            format!("`grants.env` names `{name}`, which is not set in mailer's environment"),
        ));
    }
    Ok(())
}

/// The plugin file `plugin` names, which must exist.
pub fn check_plugin_file(cx: &CheckContext<'_>, plugin: &ConfigString) -> Result<PathBuf, ConfigProblem> {
    let path = cx.path(plugin);
    if !path.is_file() {
        return Err(ConfigProblem::field(
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

/// An operator's name from its plugin file: the file's stem, `_` as `-`.
pub fn name_of_plugin(plugin: &ConfigString) -> String {
    Path::new(plugin.value())
        .file_stem()
        .map_or_else(|| "plugin".to_owned(), |s| s.to_string_lossy().replace('_', "-"))
}

/// What to do about the missing plugin file `path`: for one of the
/// project's own plugins (in `plugins/dist/`), build them; for the user's,
/// build it, or fix a path that is relative to the manifest's folder.
fn missing_plugin_hint(path: &Path) -> String {
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
