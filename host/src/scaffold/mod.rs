//! `mailer new-plugin`: a plugin project in Rust, Python or JavaScript, of
//! any world a manifest runs a plugin of, that builds to a component and
//! passes its own test out of the box: a small example of its world (a map
//! that upper-cases values, a process that counts with a timer, …) to be
//! replaced by the user's logic, and a pipeline running it with a test case
//! of that pipeline.
//!
//! Templates live beside this file: `<language>/<world>/` holds a world's
//! code and test in a language, `common/<world>/` its operators, input and
//! expected output (the keyed worlds share their input,
//! `common/orders.jsonl`, and the worlds of two inputs read
//! `common/payments.jsonl` besides; `common/*.toml.tmpl` are the pipelines
//! the operators go in), and `<language>/` the rest of a project.

use crate::plugin::World;
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

/// What the example of `world` does, for the README ("A mailer plugin …:
/// it …").
fn summary(world: World) -> &'static str {
    match world {
        World::Map => "it upper-cases each record's value",
        World::Filter => "it keeps the records whose value is not empty and drops the others",
        World::FlatMap => "it splits each record's value into words, one record per word, keyed by the word",
        World::Reduce => {
            "it counts the records of each key; the host keeps the count (decimal text) per key and emits it at each record"
        }
        World::Process => {
            "it counts the records of each key in keyed state and reports the count with an event-time timer, a minute after the key's first record"
        }
        World::CoProcess => {
            "it counts the orders (the left input) and the payments (the right one) of each key in keyed state both inputs share, and reports them, `{\"orders\":…,\"payments\":…}`, with an event-time timer a minute after the key's first record of either input"
        }
        World::Join => {
            "it makes the output of each pair an interval join finds: an order and a payment of its customer made within 30 seconds after it give `{\"amount\":…,\"paid\":…}`, an order no payment joined `{\"amount\":…,\"paid\":null}`"
        }
        World::Window => "it counts the records of each key's one-minute (tumbling) window",
        World::Aggregate => {
            "it keeps the count of the orders of each key's one-minute (tumbling) window and the sum of their `amount`, and gives `{\"count\":…,\"sum\":…}` when the window closes"
        }
    }
}

/// The files the pipeline of `world` reads, beside the manifest, as the
/// README names them.
fn input(world: World) -> &'static str {
    if world.row().two_inputs {
        "`orders.jsonl` and `payments.jsonl`"
    } else if world.row().keyed {
        "`input.jsonl`"
    } else {
        "`input.txt`"
    }
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

/// The template of `file` in `<folder>/<world>/`, for each world.
macro_rules! per_world {
    ($world:expr, $folder:literal, $file:literal) => {
        match $world {
            World::Map => include_str!(concat!($folder, "/map/", $file)),
            World::Filter => include_str!(concat!($folder, "/filter/", $file)),
            World::FlatMap => include_str!(concat!($folder, "/flat-map/", $file)),
            World::Reduce => include_str!(concat!($folder, "/reduce/", $file)),
            World::Process => include_str!(concat!($folder, "/process/", $file)),
            World::CoProcess => include_str!(concat!($folder, "/co-process/", $file)),
            World::Join => include_str!(concat!($folder, "/join/", $file)),
            World::Window => include_str!(concat!($folder, "/window/", $file)),
            World::Aggregate => include_str!(concat!($folder, "/aggregate/", $file)),
        }
    };
}

/// The WIT package Python and JavaScript projects carry (their tools read
/// it); copied as it is.
const WIT: [(&str, &str); 2] = [
    ("wit/plugin.wit", include_str!("../../../wit/plugin.wit")),
    ("wit/aliases.wit", include_str!("../../../wit/aliases.wit")),
];

/// The `world` file of a Python or JavaScript project: the WIT world its
/// build names.
const WORLD_FILE: &str = "{{wit}}\n";

/// The pipeline of a world of lines: `input.txt` -> the plugin -> stdout.
const LINES_PIPELINE: &str = include_str!("common/lines.toml.tmpl");

/// The pipeline of a keyed world: orders keyed by customer -> `key_by` ->
/// the plugin -> stdout.
const KEYED_PIPELINE: &str = include_str!("common/keyed.toml.tmpl");

/// The pipeline of a world of two inputs: orders and payments, each keyed
/// by customer -> the plugin -> stdout.
const TWO_INPUTS_PIPELINE: &str = include_str!("common/two-inputs.toml.tmpl");

/// The orders a keyed world's pipeline reads (and its test case too).
const ORDERS: &str = include_str!("common/orders.jsonl");

/// The payments a world of two inputs reads besides the orders (and its
/// test case too).
const PAYMENTS: &str = include_str!("common/payments.jsonl");

/// The pipeline of `world` and its test case (`mailer test
/// pipeline.toml`): (path, template).
fn pipeline(world: World) -> Vec<(&'static str, &'static str)> {
    match world {
        World::Map => lines_pipeline(
            include_str!("common/map/input.txt"),
            include_str!("common/map/case-input.txt"),
            include_str!("common/map/case-expected.txt"),
        ),
        World::Filter => lines_pipeline(
            include_str!("common/filter/input.txt"),
            include_str!("common/filter/case-input.txt"),
            include_str!("common/filter/case-expected.txt"),
        ),
        World::FlatMap => lines_pipeline(
            include_str!("common/flat-map/input.txt"),
            include_str!("common/flat-map/case-input.txt"),
            include_str!("common/flat-map/case-expected.txt"),
        ),
        World::Reduce => keyed_pipeline(include_str!("common/reduce/case-expected.jsonl")),
        World::Process => keyed_pipeline(include_str!("common/process/case-expected.jsonl")),
        World::CoProcess => two_inputs_pipeline(include_str!("common/co-process/case-expected.jsonl")),
        World::Join => two_inputs_pipeline(include_str!("common/join/case-expected.jsonl")),
        World::Window => keyed_pipeline(include_str!("common/window/case-expected.jsonl")),
        World::Aggregate => keyed_pipeline(include_str!("common/aggregate/case-expected.jsonl")),
    }
}

/// A pipeline of lines of text, reading `input`; its case gives the lines
/// `case_input` and expects the values `case_expected` (in any order).
fn lines_pipeline(
    input: &'static str,
    case_input: &'static str,
    case_expected: &'static str,
) -> Vec<(&'static str, &'static str)> {
    vec![
        ("pipeline.toml", LINES_PIPELINE),
        ("input.txt", input),
        ("tests/pipeline/sample/input/source.txt", case_input),
        ("tests/pipeline/sample/expected/sink.txt", case_expected),
    ]
}

/// A pipeline of orders keyed by customer; its case gives the same orders
/// and expects the records `case_expected` (key and value, in order
/// within each key).
fn keyed_pipeline(case_expected: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("pipeline.toml", KEYED_PIPELINE),
        ("input.jsonl", ORDERS),
        ("tests/pipeline/sample/input/source.jsonl", ORDERS),
        ("tests/pipeline/sample/expected/sink.jsonl", case_expected),
    ]
}

/// A pipeline of orders and payments, each keyed by customer; its case
/// gives the same orders and payments and expects the records
/// `case_expected` (key and value, in order within each key).
fn two_inputs_pipeline(case_expected: &'static str) -> Vec<(&'static str, &'static str)> {
    vec![
        ("pipeline.toml", TWO_INPUTS_PIPELINE),
        ("orders.jsonl", ORDERS),
        ("payments.jsonl", PAYMENTS),
        ("tests/pipeline/sample/input/orders.jsonl", ORDERS),
        ("tests/pipeline/sample/input/payments.jsonl", PAYMENTS),
        ("tests/pipeline/sample/expected/sink.jsonl", case_expected),
    ]
}

/// The `[[operators]]` running `world` in a pipeline (its own, after a
/// `key_by` for a keyed world, or one per input), shown in the README too.
fn operators(world: World) -> &'static str {
    per_world!(world, "common", "operators.toml.tmpl")
}

/// Where a project in `language` builds its component.
fn component(language: Language) -> &'static str {
    match language {
        Language::Rust => "target/wasm32-wasip2/release/{{crate}}.wasm",
        Language::Python | Language::Js => "{{name}}.wasm",
    }
}

/// What follows the `plugin` line of an operator of a component in
/// `language`: an interpreter's component needs more memory than the
/// default.
fn memory(language: Language) -> &'static str {
    match language {
        Language::Rust => "",
        Language::Python | Language::Js => "\nmemory_limit_mb = 256",
    }
}

/// What follows `mailer-sdk` in the `[dependencies]` of a Rust project of
/// `world`: an aggregate's accumulator is (de)serialised, and its records
/// (and a join's) are JSON.
fn rust_dependencies(world: World) -> &'static str {
    match world {
        World::Aggregate | World::Join => {
            "\nserde = { version = \"1\", features = [\"derive\"] }\nserde_json = \"1\""
        }
        _ => "",
    }
}

/// The files of a project of `world` in `language` that are filled in:
/// (path, template).
fn templates(language: Language, world: World) -> Vec<(&'static str, &'static str)> {
    let mut files = match language {
        Language::Rust => vec![
            ("Cargo.toml", include_str!("rust/Cargo.toml.tmpl")),
            ("src/lib.rs", per_world!(world, "rust", "lib.rs.tmpl")),
            ("README.md", include_str!("rust/README.md.tmpl")),
        ],
        Language::Python => vec![
            ("app.py", per_world!(world, "python", "app.py.tmpl")),
            ("test_app.py", per_world!(world, "python", "test_app.py.tmpl")),
            ("build.sh", include_str!("python/build.sh.tmpl")),
            ("README.md", include_str!("python/README.md.tmpl")),
            ("world", WORLD_FILE),
        ],
        Language::Js => vec![
            ("app.js", per_world!(world, "js", "app.js.tmpl")),
            ("test.mjs", per_world!(world, "js", "test.mjs.tmpl")),
            ("package.json", include_str!("js/package.json.tmpl")),
            ("README.md", include_str!("js/README.md.tmpl")),
            ("world", WORLD_FILE),
        ],
    };
    files.extend(pipeline(world));
    files
}

/// The files of a project in `language` that are copied as they are: the
/// SDK (and the loader of its tests) and the WIT package.
fn copies(language: Language) -> Vec<(&'static str, &'static str)> {
    let mut files = match language {
        Language::Rust => return Vec::new(),
        Language::Python => vec![(
            "mailer_plugin.py",
            include_str!("../../../guest-sdk/python/mailer_plugin.py"),
        )],
        Language::Js => vec![
            (
                "mailer-plugin.js",
                include_str!("../../../guest-sdk/js/mailer-plugin.js"),
            ),
            (
                "load-plugin.mjs",
                include_str!("../../../guest-sdk/js/load-plugin.mjs"),
            ),
        ],
    };
    files.extend(WIT);
    files
}

/// `template` with its placeholders filled in, in order: the world's parts
/// first (they hold the language's placeholders), then the language's
/// (they hold the names), then the names.
fn fill(template: &str, language: Language, world: World, name: &str, sdk: &Path) -> String {
    let crate_name = name.replace('-', "_");
    let sdk = sdk.display().to_string();
    let placeholders = [
        ("{{operators}}", operators(world).trim_end()),
        ("{{summary}}", summary(world)),
        ("{{world}}", world.wit_name()),
        ("{{wit}}", world.row().build_world),
        ("{{input}}", input(world)),
        ("{{dependencies}}", rust_dependencies(world)),
        ("{{memory}}", memory(language)),
        ("{{component}}", component(language)),
        ("{{name}}", name),
        ("{{crate}}", crate_name.as_str()),
        ("{{sdk}}", sdk.as_str()),
    ];
    placeholders
        .iter()
        .fold(template.to_owned(), |text, (placeholder, value)| {
            text.replace(placeholder, value)
        })
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

/// Writes `text` to `path`, its folders first; a shell script is made
/// executable.
fn write(path: &Path, text: &str) -> Result<(), ScaffoldError> {
    let write = |source| ScaffoldError::Write {
        path: path.to_owned(),
        source,
    };
    std::fs::create_dir_all(path.parent().expect("inside the project")).map_err(write)?;
    std::fs::write(path, text).map_err(write)?;
    #[cfg(unix)]
    if path.extension().is_some_and(|e| e == "sh") {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(write)?;
    }
    Ok(())
}

/// Writes the project `name` of `world` in `language` into `parent/name`;
/// `sdk` is the `guest-sdk` folder a Rust project depends on. Returns the
/// folder.
pub fn scaffold(
    language: Language,
    world: World,
    name: &str,
    parent: &Path,
    sdk: &Path,
) -> Result<PathBuf, ScaffoldError> {
    if !valid(name) {
        return Err(ScaffoldError::BadName(name.to_owned()));
    }
    let dir = parent.join(name);
    if dir.exists() {
        return Err(ScaffoldError::Exists(dir));
    }
    let sdk = sdk_dependency(parent, name, sdk);
    for (path, template) in templates(language, world) {
        write(&dir.join(path), &fill(template, language, world, name, &sdk))?;
    }
    for (path, text) in copies(language) {
        write(&dir.join(path), text)?;
    }
    Ok(dir)
}

/// The path a Rust project `name` made in `parent` depends on the SDK
/// `sdk` by: relative when the project is inside the SDK's source tree (so
/// the tree can move, or be cloned elsewhere), else as given (absolute).
fn sdk_dependency(parent: &Path, name: &str, sdk: &Path) -> PathBuf {
    let (Ok(parent), Ok(sdk_dir)) = (parent.canonicalize(), sdk.canonicalize()) else {
        return sdk.to_owned();
    };
    let project = parent.join(name);
    let Some(tree) = sdk_dir.parent() else {
        return sdk.to_owned();
    };
    let (Ok(inside), Ok(from_tree)) = (project.strip_prefix(tree), sdk_dir.strip_prefix(tree)) else {
        return sdk.to_owned();
    };
    let mut relative: PathBuf = inside.components().map(|_| "..").collect();
    relative.push(from_tree);
    relative
}

/// The `guest-sdk` folder of the source tree this binary was built from.
pub fn built_in_sdk() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../guest-sdk")
}

#[cfg(test)]
mod tests {
    use super::*;

    const LANGUAGES: [Language; 3] = [Language::Rust, Language::Python, Language::Js];

    /// The first `{{placeholder}}` left in `text`, if any.
    fn unfilled(text: &str) -> Option<&str> {
        text.match_indices("{{").find_map(|(at, _)| {
            let rest = &text[at + 2..];
            let end = rest.find("}}")?;
            let word = &rest[..end];
            (!word.is_empty() && word.chars().all(|c| c.is_ascii_lowercase()))
                .then_some(&text[at..at + end + 4])
        })
    }

    /// The files a project of `world` in `language` must hold.
    fn expected_files(language: Language, world: World) -> Vec<&'static str> {
        let mut files = match language {
            Language::Rust => vec!["Cargo.toml", "src/lib.rs"],
            Language::Python => vec![
                "app.py",
                "test_app.py",
                "build.sh",
                "mailer_plugin.py",
                "world",
                "wit/plugin.wit",
            ],
            Language::Js => vec![
                "app.js",
                "test.mjs",
                "package.json",
                "mailer-plugin.js",
                "load-plugin.mjs",
                "world",
                "wit/aliases.wit",
            ],
        };
        files.extend(["README.md", "pipeline.toml"]);
        let pipeline: &[&str] = match (world.row().two_inputs, world.row().keyed) {
            (true, _) => &[
                "orders.jsonl",
                "payments.jsonl",
                "tests/pipeline/sample/input/orders.jsonl",
                "tests/pipeline/sample/input/payments.jsonl",
                "tests/pipeline/sample/expected/sink.jsonl",
            ],
            (false, true) => &[
                "input.jsonl",
                "tests/pipeline/sample/input/source.jsonl",
                "tests/pipeline/sample/expected/sink.jsonl",
            ],
            (false, false) => &[
                "input.txt",
                "tests/pipeline/sample/input/source.txt",
                "tests/pipeline/sample/expected/sink.txt",
            ],
        };
        files.extend_from_slice(pipeline);
        files
    }

    /// Every file under `dir`, recursively.
    fn all_files(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => files.extend(all_files(&path)),
                false => files.push(path),
            }
        }
        files
    }

    #[test]
    fn writes_every_language_and_world_with_the_names_filled_in() {
        let dir = tempfile::tempdir().unwrap();
        for language in LANGUAGES {
            for world in World::ALL {
                let name = format!("my-{language:?}-{}", world.wit_name()).to_lowercase();
                let project = scaffold(language, world, &name, dir.path(), Path::new("/sdk")).unwrap();
                for file in expected_files(language, world) {
                    assert!(project.join(file).is_file(), "{name}: no {file}");
                }
                for path in all_files(&project) {
                    let text = std::fs::read_to_string(&path).unwrap();
                    assert_eq!(unfilled(&text), None, "{}", path.display());
                }
                let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
                assert!(
                    readme.contains(&format!("`{}` world", world.wit_name())),
                    "{readme}"
                );
                if language != Language::Rust {
                    let world_file = std::fs::read_to_string(project.join("world")).unwrap();
                    assert_eq!(world_file, format!("{}\n", world.row().build_world));
                }
            }
        }
        let cargo = std::fs::read_to_string(dir.path().join("my-rust-map/Cargo.toml")).unwrap();
        assert!(cargo.contains(r#"mailer-sdk = { path = "/sdk" }"#), "{cargo}");
        assert!(!cargo.contains("serde"), "{cargo}");
        for world in ["aggregate", "join"] {
            let cargo = dir.path().join(format!("my-rust-{world}/Cargo.toml"));
            let cargo = std::fs::read_to_string(cargo).unwrap();
            assert!(cargo.contains("serde_json = \"1\""), "{cargo}");
        }
        let lib = std::fs::read_to_string(dir.path().join("my-rust-process/src/lib.rs")).unwrap();
        assert!(lib.contains("#[operator(process, on_timer = report)]"), "{lib}");
        let lib = std::fs::read_to_string(dir.path().join("my-rust-co-process/src/lib.rs")).unwrap();
        assert!(
            lib.contains("#[operator(co_process, right = count_payment, on_timer = report)]"),
            "{lib}"
        );
        let lib = std::fs::read_to_string(dir.path().join("my-rust-join/src/lib.rs")).unwrap();
        assert!(lib.contains("#[operator(join)]"), "{lib}");
        let readme = std::fs::read_to_string(dir.path().join("my-python-join/README.md")).unwrap();
        assert!(readme.contains("`orders.jsonl` and `payments.jsonl`"), "{readme}");
    }

    #[test]
    fn every_pipeline_is_a_valid_manifest_for_its_component() {
        let dir = tempfile::tempdir().unwrap();
        for language in LANGUAGES {
            for world in World::ALL {
                let name = format!("p-{language:?}-{}", world.wit_name()).to_lowercase();
                let project = scaffold(language, world, &name, dir.path(), Path::new("/sdk")).unwrap();
                // The manifest only needs the component to exist.
                let component = component(language)
                    .replace("{{crate}}", &name.replace('-', "_"))
                    .replace("{{name}}", &name);
                write(&project.join(component), "").unwrap();
                let manifest = project.join("pipeline.toml");
                let text = std::fs::read_to_string(&manifest).unwrap();
                let parsed = crate::manifest::Manifest::parse(&manifest, text.clone(), |_| None);
                assert!(parsed.is_ok(), "{name}: {:?}\n{text}", parsed.err());
                let memory = text.contains("memory_limit_mb = 256");
                assert_eq!(memory, language != Language::Rust, "{name}:\n{text}");
            }
        }
    }

    #[test]
    fn a_project_inside_the_sdks_tree_depends_on_it_by_a_relative_path() {
        let tree = tempfile::tempdir().unwrap();
        let sdk = tree.path().join("guest-sdk");
        std::fs::create_dir_all(&sdk).unwrap();
        std::fs::create_dir_all(tree.path().join("plugins/mine")).unwrap();
        let inside = scaffold(
            Language::Rust,
            World::Map,
            "near",
            &tree.path().join("plugins/mine"),
            &sdk,
        )
        .unwrap();
        let cargo = std::fs::read_to_string(inside.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains(r#"mailer-sdk = { path = "../../../guest-sdk" }"#),
            "{cargo}"
        );
        let elsewhere = tempfile::tempdir().unwrap();
        let outside = scaffold(Language::Rust, World::Map, "far", elsewhere.path(), &sdk).unwrap();
        let cargo = std::fs::read_to_string(outside.join("Cargo.toml")).unwrap();
        assert!(
            cargo.contains(&format!("mailer-sdk = {{ path = \"{}\" }}", sdk.display())),
            "{cargo}"
        );
    }

    #[test]
    fn refuses_bad_names_and_existing_folders() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["", "Upper", "9lives", "a_b", "x-"] {
            assert!(matches!(
                scaffold(Language::Rust, World::Map, bad, dir.path(), Path::new("/sdk")),
                Err(ScaffoldError::BadName(_))
            ));
        }
        scaffold(
            Language::Js,
            World::Process,
            "twice",
            dir.path(),
            Path::new("/sdk"),
        )
        .unwrap();
        assert!(matches!(
            scaffold(Language::Js, World::Map, "twice", dir.path(), Path::new("/sdk")),
            Err(ScaffoldError::Exists(_))
        ));
    }
}
