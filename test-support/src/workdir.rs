//! A temp folder holding manifests and whatever a test or benchmark puts
//! beside them.

use std::path::PathBuf;

/// A temp folder, removed when dropped, unless the test failed: then it is
/// kept and its path printed, with the logs in it.
pub struct Workdir {
    /// The folder.
    pub dir: tempfile::TempDir,
}

impl Default for Workdir {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dir.disable_cleanup(true);
            eprintln!(
                "the failed test's work folder is kept: {}",
                self.dir.path().display()
            );
        }
    }
}

impl Workdir {
    /// A fresh folder.
    pub fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("a temp folder"),
        }
    }

    /// The path of `name` in the folder.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Writes a file and returns its path.
    pub fn write(&self, name: &str, content: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::write(&p, content).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
        p
    }

    /// Writes `pipeline.toml`, with `{plugin:NAME}` replaced by plugin paths.
    pub fn manifest(&self, toml: &str) -> PathBuf {
        self.manifest_as("pipeline.toml", toml)
    }

    /// Writes the manifest `name`, with `{plugin:NAME}` replaced by plugin
    /// paths.
    pub fn manifest_as(&self, name: &str, toml: &str) -> PathBuf {
        let mut text = toml.to_owned();
        while let Some(start) = text.find("{plugin:") {
            let end = start + text[start..].find('}').expect("`{plugin:NAME}` is closed");
            let path = crate::plugin(&text[start + 8..end]).display().to_string();
            text.replace_range(start..=end, &path);
        }
        self.write(name, &text)
    }

    /// The text of file `name`.
    pub fn read(&self, name: &str) -> String {
        let p = self.path(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
    }
}
