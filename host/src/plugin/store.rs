//! The plugin store: the components swapped into a pipeline, kept by
//! digest (their SHA-256) as `<digest>.wasm` in a folder of the pipeline
//! (`.mailer/<pipeline>/plugins/` beside its manifest). A swap writes the
//! uploaded component here; a restart from a checkpoint taken after a swap
//! loads the version it recorded from here, fetched first from the
//! checkpoint (which keeps a copy) when this machine's store lacks it.

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Where the store `store` keeps the component whose digest is `digest`.
pub fn path_of(store: &Path, digest: &str) -> PathBuf {
    store.join(format!("{digest}.wasm"))
}

/// Writes `bytes` to the store `store` as `<digest>.wasm`, unless it holds
/// them already, durably (a checkpoint naming the plugin must find it);
/// its path, and whether it was written now.
pub fn put(store: &Path, bytes: &[u8]) -> std::io::Result<(PathBuf, bool)> {
    let digest = hex::encode(Sha256::digest(bytes));
    let path = path_of(store, &digest);
    if path.is_file() {
        return Ok((path, false));
    }
    std::fs::create_dir_all(store)?;
    let tmp = store.join(format!("{digest}.tmp"));
    std::fs::write(&tmp, bytes)?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    // The rename itself survives a power loss only once the folder is
    // synced.
    std::fs::File::open(store)?.sync_all()?;
    Ok((path, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_component_is_stored_once_under_its_digest() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("plugins");
        let (path, new) = put(&store, b"component").unwrap();
        let digest = hex::encode(Sha256::digest(b"component"));
        assert_eq!((path.clone(), new), (path_of(&store, &digest), true));
        assert_eq!(std::fs::read(&path).unwrap(), b"component");
        assert_eq!(put(&store, b"component").unwrap(), (path, false));
        assert_eq!(
            std::fs::read_dir(&store).unwrap().count(),
            1,
            "no temporary file left"
        );
    }
}
