//! What the admin API shows of swaps: the plugin operators, their versions,
//! and the history.

use crate::plugin::LoadedPlugin;
use serde::Serialize;

/// A plugin operator as the API shows it.
#[derive(Debug, Clone, Serialize)]
pub struct OperatorView {
    /// Its name in the manifest.
    pub name: String,
    /// The world its plugin implements.
    pub world: String,
    /// The running version.
    pub plugin: PluginView,
    /// Earlier versions, newest first: a rollback returns to the newest
    /// one not rolled back itself.
    pub previous: Vec<PreviousView>,
    /// The canary running on some of its key groups, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<CanaryTrial>,
}

/// A running canary: its version and what each version did meanwhile.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CanaryTrial {
    /// The canary's version.
    pub plugin: PluginView,
    /// Its counts, and the current version's.
    #[serde(flatten)]
    pub stats: super::CanaryView,
}

/// A version an operator ran before.
#[derive(Debug, Clone, Serialize)]
pub struct PreviousView {
    /// The version.
    #[serde(flatten)]
    pub plugin: PluginView,
    /// Whether it left by a rollback (asked for, or automatic after a
    /// failed probation): a rollback never returns to it.
    pub rolled_back: bool,
}

/// One version of a plugin.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct PluginView {
    /// The name it declares, else its file's name (without `.wasm`).
    pub name: String,
    /// The version it declares (`null` when it declares none).
    pub version: Option<String>,
    /// SHA-256 of the component, hex.
    pub digest: String,
    /// Bytes.
    pub size: usize,
}

impl PluginView {
    pub(super) fn of(p: &LoadedPlugin) -> Self {
        let file = || {
            p.path()
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        Self {
            name: p.declared().map_or_else(file, |d| d.name.clone()),
            version: p.declared().map(|d| d.version.clone()),
            digest: p.digest().to_owned(),
            size: p.size(),
        }
    }
}

/// One swap in the history.
#[derive(Debug, Clone, Serialize)]
pub struct SwapRecord {
    /// Increases with each swap of the run.
    pub id: u64,
    /// The operator.
    pub operator: String,
    /// The digest it ran before.
    pub from: String,
    /// The digest it runs after.
    pub to: String,
    /// Whether it was a rollback.
    pub rollback: bool,
    /// Whether the rollback was automatic (the new version failed its
    /// probation).
    pub automatic: bool,
    /// When it was asked for (ms since 1970).
    pub requested_at_ms: u64,
    /// `pending` until every worker of the operator passed the swap point,
    /// then `applied`.
    pub status: SwapStatus,
    /// The workers that switched.
    pub applied_workers: usize,
    /// The operator's workers.
    pub workers: usize,
    /// For a shadow run: what it compared, and where it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<super::ShadowView>,
    /// For a canary: what each version did, and where it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub canary: Option<super::CanaryView>,
}

/// Where a swap is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SwapStatus {
    /// Asked for; not every worker passed the swap point yet.
    Pending,
    /// Every worker runs the new version.
    Applied,
}
