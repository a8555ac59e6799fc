//! `mailer new-plugin`: a plugin project in Rust, Python or JavaScript that
//! builds to a component and passes its own test out of the box (a map
//! that upper-cases values, to be replaced by the user's logic).

use std::path::{Path, PathBuf};

/// A plugin's language.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// Rust with `mailer-sdk`.
    Rust,
    /// Python with componentize-py.
    Python,
    /// JavaScript with componentize-js.
    Js,
}

/// Why a project could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ScaffoldError {
    /// The name cannot be a package name.
    #[error("`{0}` is not a plugin name: use lower-case letters, digits and `-`, starting with a letter")]
    BadName(String),
    /// The folder exists.
    #[error("{0} already exists: choose another name or folder")]
    Exists(PathBuf),
    /// Writing failed.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// The WIT package every project carries (Python and JavaScript tools
/// read it).
const WIT: [(&str, &str); 2] = [
    ("wit/plugin.wit", include_str!("../../../wit/plugin.wit")),
    ("wit/aliases.wit", include_str!("../../../wit/aliases.wit")),
];

/// The files of a project in `language`: (path, template).
fn templates(language: Language) -> Vec<(&'static str, &'static str)> {
    match language {
        Language::Rust => vec![
            ("Cargo.toml", include_str!("rust/Cargo.toml.tmpl")),
            ("src/lib.rs", include_str!("rust/lib.rs.tmpl")),
            ("README.md", include_str!("rust/README.md.tmpl")),
        ],
        Language::Python => {
            let mut files = vec![
                ("app.py", include_str!("python/app.py.tmpl")),
                ("test_app.py", include_str!("python/test_app.py.tmpl")),
                ("build.sh", include_str!("python/build.sh.tmpl")),
                ("README.md", include_str!("python/README.md.tmpl")),
                (
                    "mailer_plugin.py",
                    include_str!("../../../guest-sdk/python/mailer_plugin.py"),
                ),
                ("world", "map-plugin\n"),
            ];
            files.extend(WIT);
            files
        }
        Language::Js => {
            let mut files = vec![
                ("app.js", include_str!("js/app.js.tmpl")),
                ("test.mjs", include_str!("js/test.mjs.tmpl")),
                ("package.json", include_str!("js/package.json.tmpl")),
                ("README.md", include_str!("js/README.md.tmpl")),
                (
                    "mailer-plugin.js",
                    include_str!("../../../guest-sdk/js/mailer-plugin.js"),
                ),
                ("world", "map-plugin\n"),
            ];
            files.extend(WIT);
            files
        }
    }
}

/// Whether `name` can name a crate, a Python module's folder and an npm
/// package alike.
fn valid(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.ends_with('-')
}

/// Writes the project `name` in `language` into `parent/name`; `sdk` is
/// the `guest-sdk` folder a Rust project depends on. Returns the folder.
pub fn scaffold(language: Language, name: &str, parent: &Path, sdk: &Path) -> Result<PathBuf, ScaffoldError> {
    if !valid(name) {
        return Err(ScaffoldError::BadName(name.to_owned()));
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir));
    }
    for (path, template) in templates(language) {
        let text = template
            .replace("{{name}}", name)
            .replace("{{crate}}", &name.replace('-', "_"))
            .replace("{{sdk}}", &sdk.display().to_string());
        let path = dir.join(path);
        let write = |source| ScaffoldError::Write {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(path.parent().expect("inside the project")).map_err(write)?;
        std::fs::write(&path, text).map_err(write)?;
        #[cfg(unix)]
        if path.extension().is_some_and(|e| e == "sh") {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).map_err(write)?;
        }
    }
    Ok(dir)
}

/// The `guest-sdk` folder of the source tree this binary was built from.
pub fn built_in_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_each_language_with_the_name_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        for (lang, file) in [
            (Language::Rust, "Cargo.toml"),
            (Language::Python, "app.py"),
            (Language::Js, "package.json"),
        ] {
            let name = format!("my-{file}").replace('.', "-").to_lowercase();
            let project = scaffold(lang, &name, dir.path(), Path::new("/sdk")).unwrap();
            let text = std::fs::read_to_string(project.join(file)).unwrap();
            assert!(!text.contains("{{"), "{file}: {text}");
        }
        let cargo = std::fs::read_to_string(dir.path().join("my-cargo-toml/Cargo.toml")).unwrap();
        assert!(cargo.contains(r#"mailer-sdk = { path = "/sdk" }"#), "{cargo}");
    }

    #[test]
    fn refuses_bad_names_and_existing_folders() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "Upper", "9lives", "a_b", "x-"] {
            assert!(matches!(
                scaffold(Language::Rust, bad, dir.path(), Path::new("/sdk")),
                Err(ScaffoldError::BadName(_))
            ));
        }
        scaffold(Language::Js, "twice", dir.path(), Path::new("/sdk")).unwrap();
        assert!(matches!(
            scaffold(Language::Js, "twice", dir.path(), Path::new("/sdk")),
            Err(ScaffoldError::Exists(_))
        ));
    }
}
