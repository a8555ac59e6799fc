//! Swapped-in plugins kept beside the checkpoints. A checkpoint taken after
//! a plugin swap resumes with the swapped-in version, which the manifest
//! does not name: the component's bytes travel with the checkpoint, so that
//! any machine that can read the checkpoint can run it.
//!
//! ```text
//! chk-<id>/plugins/<digest>.wasm      each swapped-in plugin its operators ran
//! ```
//!
//! The file is linked (or copied, across file systems) from where the plugin
//! was loaded into the checkpoint's folder before the folder is synced, and
//! `Metadata::plugins` lists it with its size: from there on it is one of the
//! checkpoint's files like any snapshot file. It is fsynced with them,
//! uploaded with them to a bucket (as `files/<digest>`, its digest being its
//! SHA-256: once, however many checkpoints list it), checked and downloaded
//! with them, copied into savepoints, and pruned with the last checkpoint
//! that lists it. A checkpoint is never complete without its plugins.

use super::metadata::{Metadata, OperatorMeta};
use super::store::StoreError;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

/// The folder of a checkpoint holding its swapped-in plugins.
const DIR: &str = "plugins";

/// A plugin swap the source sent before a barrier: from there on, operator
/// `operator` runs the component in `file`, whose SHA-256 is `digest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSwap {
    /// The operator.
    pub operator: String,
    /// The new version's digest.
    pub digest: String,
    /// Where it was loaded from (the plugin store).
    pub file: PathBuf,
}

/// The path of the plugin `digest` in a checkpoint's folder, relative to it.
pub(super) fn relative(digest: &str) -> String {
    format!("{DIR}/{digest}.wasm")
}

/// The plugin `digest` in the checkpoint folder `checkpoint`.
pub fn file_in(checkpoint: &Path, digest: &str) -> PathBuf {
    checkpoint.join(relative(digest))
}

/// Each plugin file `metadata` lists, relative to the checkpoint's folder,
/// with its size.
pub(super) fn files(metadata: &Metadata) -> BTreeMap<String, u64> {
    metadata
        .plugins
        .iter()
        .map(|(d, size)| (relative(d), *size))
        .collect()
}

/// Puts into the checkpoint folder `tmp` the plugin of each of `operators`
/// that runs a swapped-in version (not the manifest's), from the file
/// `files` names for its digest; each one's digest and size, for
/// `Metadata::plugins`.
pub(super) fn include(
    tmp: &Path,
    operators: &[OperatorMeta],
    files: &HashMap<String, PathBuf>,
) -> Result<BTreeMap<String, u64>, StoreError> {
    let mut included = BTreeMap::new();
    for op in operators {
        let (Some(digest), Some(_)) = (&op.plugin_digest, &op.manifest_digest) else {
            continue;
        };
        if included.contains_key(digest) {
            continue;
        }
        let target = file_in(tmp, digest);
        let failed = |what: &'static str, e: std::io::Error| StoreError::Io {
            path: target.display().to_string(),
            what,
            source: e,
        };
        let source = files.get(digest).ok_or_else(|| {
            let e = std::io::Error::other(format!("no file is known for it (operator `{}`)", op.name));
            failed("keeping a swapped-in plugin", e)
        })?;
        std::fs::create_dir_all(target.parent().expect("in a folder"))
            .map_err(|e| failed("creating the plugins folder", e))?;
        // The store's files never change: a link is as good as a copy.
        if std::fs::hard_link(source, &target).is_err() {
            std::fs::copy(source, &target).map_err(|e| {
                let e = std::io::Error::new(e.kind(), format!("`{}`: {e}", source.display()));
                failed("copying a swapped-in plugin into it", e)
            })?;
        }
        let size = std::fs::metadata(&target)
            .map_err(|e| failed("reading a swapped-in plugin's size", e))?
            .len();
        included.insert(digest.clone(), size);
    }
    Ok(included)
}

/// The bytes of plugin `digest` from the checkpoint in `checkpoint`,
/// checked against the digest; why not, naming the file looked for.
pub fn read_checked(checkpoint: &Path, digest: &str) -> Result<Vec<u8>, String> {
    let path = file_in(checkpoint, digest);
    let bytes = std::fs::read(&path).map_err(|e| format!("`{}`: {e}", path.display()))?;
    match hex::encode(Sha256::digest(&bytes)) {
        actual if actual == digest => Ok(bytes),
        actual => Err(format!(
            "`{}` does not match its digest (its SHA-256 is {actual}): it is corrupt",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str, digest: &str, manifest: Option<&str>) -> OperatorMeta {
        OperatorMeta {
            name: name.into(),
            world: Some("map".into()),
            plugin_digest: Some(digest.into()),
            manifest_digest: manifest.map(str::to_owned),
        }
    }

    #[test]
    fn only_swapped_in_plugins_go_into_the_checkpoint_once_each_and_read_back_checked() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = b"the swapped-in component";
        let digest = hex::encode(Sha256::digest(bytes));
        let store = dir.path().join(format!("{digest}.wasm"));
        std::fs::write(&store, bytes).unwrap();
        let files = [(digest.clone(), store)].into();
        let tmp = dir.path().join("chk-1.tmp");
        std::fs::create_dir(&tmp).unwrap();
        // Two operators swapped to the same version, one on its manifest's.
        let operators = [
            op("a", &digest, Some("m1")),
            op("b", &digest, Some("m2")),
            op("c", "m3", None),
        ];
        let included = include(&tmp, &operators, &files).unwrap();
        assert_eq!(included, [(digest.clone(), bytes.len() as u64)].into());
        assert_eq!(std::fs::read_dir(tmp.join(DIR)).unwrap().count(), 1);
        assert_eq!(read_checked(&tmp, &digest).unwrap(), bytes);

        std::fs::write(file_in(&tmp, "0123"), bytes).unwrap();
        let e = read_checked(&tmp, "0123").unwrap_err();
        assert!(
            e.contains("does not match its digest") && e.contains(&digest),
            "{e}"
        );
        let e = read_checked(&tmp, "4567").unwrap_err();
        assert!(e.contains(&file_in(&tmp, "4567").display().to_string()), "{e}");
    }

    #[test]
    fn a_swapped_in_plugin_without_a_known_file_fails_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let e = include(dir.path(), &[op("a", "d1", Some("m1"))], &HashMap::new())
            .unwrap_err()
            .to_string();
        assert!(e.contains("no file is known for it (operator `a`)"), "{e}");
    }
}
