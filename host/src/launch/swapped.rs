//! Resuming with the plugins swapped in before the checkpoint: each
//! swapped operator's version from the plugin store, fetched there from the
//! checkpoint's copy when the store lacks it.

use crate::checkpoint::{CheckpointStore, Restore};
use crate::plan::Plan;
use crate::plugin::{PluginEngine, PluginError};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Resuming from a checkpoint taken after a plugin swap: each swapped
/// operator runs the version the checkpoint recorded (from the plugin
/// store, into which it is fetched from the checkpoint's copy when this
/// machine's store lacks it) — unless the manifest now names another
/// plugin than the one the swap replaced, a deliberate upgrade, which
/// wins. Returns the manifest's plugin each swapped operator replaces.
pub(super) fn use_swapped_plugins(
    plan: &mut Plan,
    restore: Option<&Restore>,
    store: Option<&CheckpointStore>,
    engine: &PluginEngine,
) -> Result<BTreeMap<String, String>, PluginError> {
    let mut swapped_from = BTreeMap::new();
    let Some(restore) = restore else {
        return Ok(swapped_from);
    };
    let location = store.map(CheckpointStore::location);
    for meta in &restore.metadata.operators {
        let (Some(original), Some(digest)) = (&meta.manifest_digest, &meta.plugin_digest) else {
            continue;
        };
        let node = plan
            .stages
            .iter_mut()
            .flat_map(|s| &mut s.operators)
            .find(|op| op.name == meta.name);
        let Some(node) = node else { continue };
        let name = node.name.clone();
        let Some(plugin) = node.plugin_mut() else {
            continue;
        };
        if plugin.digest() != original {
            tracing::info!(operator = %name, "the manifest names a new plugin: it replaces the one swapped in before");
            continue;
        }
        let swapped = |reason: String| PluginError::Swapped {
            operator: name.clone(),
            checkpoint: restore.metadata.id,
            digest: digest.clone(),
            reason,
        };
        let path =
            swapped_plugin(&plan.plugin_store, restore, digest, location.as_deref()).map_err(swapped)?;
        let loaded = engine.load_with(&path, plugin.world(), &name, plugin.fueled())?;
        if loaded.digest() != digest {
            return Err(swapped(format!(
                "the plugin store's `{}` holds other bytes (SHA-256 {}): remove it, and the checkpoint's copy is fetched in its place",
                path.display(),
                loaded.digest()
            )));
        }
        *plugin = loaded;
        swapped_from.insert(name.clone(), original.clone());
        tracing::info!(operator = %name, %digest, "resuming with the plugin swapped in before the checkpoint");
    }
    Ok(swapped_from)
}

/// The file of the plugin `digest` that `restore` resumes with, in the
/// plugin store `store`: copied there from the checkpoint (whose folder
/// holds it, downloaded from `location` with the checkpoint when that is a
/// bucket) when the store lacks it, its digest checked; why not, naming
/// where it was looked for.
fn swapped_plugin(
    store: &Path,
    restore: &Restore,
    digest: &str,
    location: Option<&str>,
) -> Result<PathBuf, String> {
    let path = crate::plugin::store::path_of(store, digest);
    if path.is_file() {
        return Ok(path);
    }
    let from = crate::checkpoint::plugin_in(&restore.dir, digest);
    let bytes = crate::checkpoint::read_plugin(&restore.dir, digest).map_err(|reason| {
        let read = location.map_or_else(String::new, |l| format!(", read from `{l}`"));
        match restore.metadata.plugins.contains_key(digest) {
            true => format!("the plugin store lacks `{}`, and the checkpoint's copy cannot be used: {reason}", path.display()),
            false => format!(
                "neither the plugin store (`{}`) nor the checkpoint (`{}`{read}) holds it: the checkpoint was taken before checkpoints kept swapped-in plugins. Put the component at `{}`, or name the plugin to run in the manifest",
                path.display(),
                from.display(),
                path.display()
            ),
        }
    })?;
    let (stored, _) = crate::plugin::store::put(store, &bytes)
        .map_err(|e| format!("cannot write it into the plugin store `{}`: {e}", store.display()))?;
    tracing::info!(%digest, from = %from.display(), to = %stored.display(),
        "fetched the swapped-in plugin from the checkpoint into the plugin store");
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::Metadata;
    use sha2::Digest;

    /// A checkpoint in `dir` whose folder keeps the plugin `bytes` (when
    /// `kept`), as one taken after swapping it in does; its digest.
    fn restore_of(dir: &Path, bytes: &[u8], kept: bool) -> (Restore, String) {
        let digest = hex::encode(sha2::Sha256::digest(bytes));
        let checkpoint = dir.join("chk-7");
        let mut metadata = Metadata::new(7, "p", "h", 128);
        if kept {
            let path = crate::checkpoint::plugin_in(&checkpoint, &digest);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, bytes).unwrap();
            metadata.plugins.insert(digest.clone(), bytes.len() as u64);
        }
        let restore = Restore {
            dir: checkpoint,
            metadata,
            migrate_every_key: false,
        };
        (restore, digest)
    }

    #[test]
    fn a_swapped_in_plugin_the_store_lacks_is_fetched_from_the_checkpoint_checked() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("plugins");
        let (restore, digest) = restore_of(dir.path(), b"component", true);
        let path = swapped_plugin(&store, &restore, &digest, None).unwrap();
        assert_eq!(path, crate::plugin::store::path_of(&store, &digest));
        assert_eq!(std::fs::read(&path).unwrap(), b"component");
        // Once there, the store's copy is used.
        std::fs::remove_dir_all(&restore.dir).unwrap();
        assert_eq!(swapped_plugin(&store, &restore, &digest, None).unwrap(), path);

        // A corrupt copy in the checkpoint never reaches the store.
        let (restore, digest) = restore_of(&dir.path().join("b"), b"other component", true);
        std::fs::write(
            crate::checkpoint::plugin_in(&restore.dir, &digest),
            b"0ther component",
        )
        .unwrap();
        let e = swapped_plugin(&store, &restore, &digest, None).unwrap_err();
        assert!(e.contains("does not match its digest"), "{e}");
        assert!(!crate::plugin::store::path_of(&store, &digest).exists());
    }

    #[test]
    fn a_swapped_in_plugin_found_nowhere_is_an_error_naming_where_it_was_looked_for() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("plugins");
        let (restore, digest) = restore_of(dir.path(), b"component", false);
        let e = swapped_plugin(&store, &restore, &digest, Some("s3://b/p")).unwrap_err();
        let in_store = crate::plugin::store::path_of(&store, &digest);
        let in_checkpoint = crate::checkpoint::plugin_in(&restore.dir, &digest);
        for looked in [
            in_store.display().to_string(),
            in_checkpoint.display().to_string(),
        ] {
            assert!(e.contains(&looked), "{e}");
        }
        assert!(e.contains("s3://b/p"), "{e}");
        let e = PluginError::Swapped {
            operator: "counts".into(),
            checkpoint: 7,
            digest: digest.clone(),
            reason: e,
        }
        .to_string();
        assert!(
            e.starts_with(&format!(
                "operator `counts` resumes from checkpoint 7 with plugin {digest}"
            )),
            "{e}"
        );
    }
}
