//! What a checkpoint holds: where the source was, which plugins and
//! manifest made the state, and one snapshot per stateful operator worker.

use serde::{Deserialize, Serialize};

/// A checkpoint's description, written last, as `_metadata.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// The checkpoint id (increasing within a pipeline's history).
    pub id: u64,
    /// The pipeline's name.
    pub pipeline: String,
    /// SHA-256 of the manifest text it ran.
    pub manifest_hash: String,
    /// When it completed, ms since the Unix epoch.
    pub created_ms: i64,
    /// The pipeline's key groups (`max_parallelism`).
    pub key_groups: u32,
    /// The position of the pipeline's one source: everything before it is
    /// in the state (`null` for a pipeline of several sources).
    #[serde(default)]
    pub source: serde_json::Value,
    /// The position of each source, by name, for a pipeline of several.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sources: std::collections::BTreeMap<String, serde_json::Value>,
    /// The stateful operators, with the plugin each ran.
    pub operators: Vec<OperatorMeta>,
    /// The swapped-in plugins the operators ran (those with a
    /// `manifest_digest`), by digest, with their sizes: each is kept in the
    /// checkpoint as `plugins/<digest>.wasm` (in a bucket as
    /// `files/<digest>`, the digest being its SHA-256), so that a restart
    /// on any machine finds the version it resumes with.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub plugins: std::collections::BTreeMap<String, u64>,
    /// One snapshot per stateful operator and worker.
    pub snapshots: Vec<SnapshotMeta>,
    /// Where each sink that rewinds on restore (the file sink) had made its
    /// output durable, by sink (`sink`, `dead-letter`, `late-output`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub sinks: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A stateful operator at checkpoint time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OperatorMeta {
    /// Its name in the manifest.
    pub name: String,
    /// The world of its plugin, if it runs one.
    pub world: Option<String>,
    /// SHA-256 of its plugin, if it runs one.
    pub plugin_digest: Option<String>,
    /// When a swap replaced the manifest's plugin: the manifest's plugin's
    /// digest (`plugin_digest` is then the swapped-in version's, kept in
    /// the plugin store and in the checkpoint, see `Metadata::plugins`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manifest_digest: Option<String>,
}

impl OperatorMeta {
    /// Operator `name` switched to the plugin with `digest`.
    pub fn swapped_to(&mut self, digest: &str) {
        let replaced = self.plugin_digest.replace(digest.to_owned());
        if self.manifest_digest.is_none() {
            self.manifest_digest = replaced;
        }
        if self.manifest_digest.as_deref() == Some(digest) {
            // Back to the manifest's own version.
            self.manifest_digest = None;
        }
    }
}

/// One worker's state of one operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// The operator's name.
    pub operator: String,
    /// The worker's index in its stage.
    pub worker: usize,
    /// The stage's parallelism when it was taken.
    pub parallelism: usize,
    /// `memory` or `rocksdb`.
    pub backend: String,
    /// Its path, relative to the checkpoint's folder.
    pub path: String,
    /// Every file of the snapshot (path relative to it) with its size: a
    /// checkpoint is whole only when each is there at that size.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub files: std::collections::BTreeMap<String, u64>,
    /// The SHA-256 (hex) of each file, for a checkpoint in a bucket: its
    /// object's name there, and what a download is checked against.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub digests: std::collections::BTreeMap<String, String>,
    /// The state versions of a process operator's state (absent: 1, as
    /// before plugins declared them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_versions: Option<crate::state::StateVersions>,
}

/// The files under `dir` (paths relative to it, `/`-separated) with their
/// sizes.
pub fn file_sizes(dir: &std::path::Path) -> std::io::Result<std::collections::BTreeMap<String, u64>> {
    fn walk(
        root: &std::path::Path,
        dir: &std::path::Path,
        out: &mut std::collections::BTreeMap<String, u64>,
    ) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                walk(root, &path, out)?;
            } else {
                let relative = path.strip_prefix(root).expect("under the root");
                out.insert(
                    relative.to_string_lossy().replace('\\', "/"),
                    entry.metadata()?.len(),
                );
            }
        }
        Ok(())
    }
    let mut out = std::collections::BTreeMap::new();
    walk(dir, dir, &mut out)?;
    Ok(out)
}

impl Metadata {
    /// Checkpoint `id` of `pipeline`, completed now, holding no state and
    /// no positions yet.
    pub fn new(id: u64, pipeline: &str, manifest_hash: &str, key_groups: u32) -> Self {
        Self {
            id,
            pipeline: pipeline.to_owned(),
            manifest_hash: manifest_hash.to_owned(),
            created_ms: crate::clock::now_ms(),
            key_groups,
            source: serde_json::Value::Null,
            sources: Default::default(),
            operators: Vec::new(),
            plugins: Default::default(),
            snapshots: Vec::new(),
            sinks: Default::default(),
        }
    }

    /// Records the sources' positions: the one source's as `source` (as
    /// linear pipelines always had it), several by name as `sources`.
    pub fn set_positions(&mut self, mut positions: std::collections::BTreeMap<String, serde_json::Value>) {
        if positions.len() == 1 {
            self.source = positions.pop_first().expect("one").1;
        } else {
            self.sources = positions;
        }
    }

    /// Where each of `sources` (the pipeline's, by name, in order) resumes;
    /// `Err` says why the checkpoint does not fit them.
    pub fn positions_of(&self, sources: &[&str]) -> Result<Vec<serde_json::Value>, String> {
        if self.sources.is_empty() {
            return match sources {
                [_] => Ok(vec![self.source.clone()]),
                _ => Err(format!(
                    "it was taken with one source and the pipeline now has {} ({}): every source resumes where the checkpoint left it, so the sources must be the same",
                    sources.len(),
                    sources.join(", ")
                )),
            };
        }
        let mut theirs: Vec<&str> = self.sources.keys().map(String::as_str).collect();
        let mut ours = sources.to_vec();
        theirs.sort_unstable();
        ours.sort_unstable();
        if theirs != ours {
            return Err(format!(
                "it was taken with sources {} and the pipeline now has {}: every source resumes where the checkpoint left it, so the sources must be the same",
                theirs.join(", "),
                ours.join(", ")
            ));
        }
        Ok(sources.iter().map(|s| self.sources[*s].clone()).collect())
    }

    /// The state versions of operator `name`'s state over all its
    /// snapshots: the highest any key is at, and the lowest of the keys
    /// without a mark (1 for a snapshot that records none).
    pub fn state_versions_of(&self, name: &str) -> Option<crate::state::StateVersions> {
        let versions = self
            .of_operator(name)
            .map(|s| s.state_versions.unwrap_or(crate::state::StateVersions::at(1)));
        versions.reduce(|a, b| crate::state::StateVersions {
            current: a.current.max(b.current),
            unmarked: a.unmarked.min(b.unmarked),
        })
    }

    /// The snapshots of operator `name`.
    pub fn of_operator<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a SnapshotMeta> + 'a {
        self.snapshots.iter().filter(move |s| s.operator == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swaps_keep_the_manifests_digest_until_swapped_back_to_it() {
        let mut op = OperatorMeta {
            name: "m".into(),
            world: Some("map".into()),
            plugin_digest: Some("a".into()),
            manifest_digest: None,
        };
        op.swapped_to("b");
        op.swapped_to("c");
        assert_eq!(
            (op.plugin_digest.as_deref(), op.manifest_digest.as_deref()),
            (Some("c"), Some("a"))
        );
        op.swapped_to("a");
        assert_eq!(
            (op.plugin_digest.as_deref(), op.manifest_digest.as_deref()),
            (Some("a"), None)
        );
    }
}
