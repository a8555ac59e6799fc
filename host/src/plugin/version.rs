//! What a plugin declares of itself: the custom section `mailer-plugin`
//! holding `name@version` (and, on a second line, `state_version=<n>`),
//! which the Rust SDK's `#[operator]` writes from the plugin crate's
//! `Cargo.toml` and its `state_version`, and `mailer-states`, the names of
//! the keyed states its functions take. Components from other toolchains
//! may have neither.

/// The section's name.
const SECTION: &str = "mailer-plugin";

/// The section naming the keyed states a plugin uses, one per line (the
/// Rust SDK writes one per keyed function; the linker joins them).
const STATES_SECTION: &str = "mailer-states";

/// A plugin's declared identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// Its package name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The version of the shape of the keyed state it writes, when it
    /// declares one (1 otherwise).
    pub state_version: Option<u32>,
}

/// What `component` declares, searching nested modules too; `None` when it
/// declares nothing readable.
pub fn declared(component: &[u8]) -> Option<Declared> {
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        if let Ok(wasmparser::Payload::CustomSection(section)) = payload
            && section.name() == SECTION
        {
            let text = std::str::from_utf8(section.data()).ok()?;
            let mut lines = text.lines();
            let (name, version) = lines.next()?.split_once('@')?;
            let state_version = lines
                .filter_map(|l| l.strip_prefix("state_version="))
                .find_map(|v| v.trim().parse().ok())
                .filter(|v| *v >= 1);
            return Some(Declared {
                name: name.to_owned(),
                version: version.to_owned(),
                state_version,
            });
        }
    }
    None
}

/// The keyed states `component` declares it uses; `None` when it declares
/// none (a plugin of another toolchain, or one without keyed state).
pub fn declared_states(component: &[u8]) -> Option<std::collections::BTreeSet<String>> {
    let mut states = None;
    for payload in wasmparser::Parser::new(0).parse_all(component) {
        if let Ok(wasmparser::Payload::CustomSection(section)) = payload
            && section.name() == STATES_SECTION
        {
            let names = String::from_utf8_lossy(section.data());
            let found = states.get_or_insert_with(std::collections::BTreeSet::new);
            found.extend(names.lines().filter(|n| !n.is_empty()).map(str::to_owned));
        }
    }
    states
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A core module with one custom section.
    fn module_with(name: &str, data: &[u8]) -> Vec<u8> {
        let mut m = b"\0asm\x01\0\0\0".to_vec();
        let mut body = vec![name.len() as u8];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(data);
        m.push(0);
        m.push(body.len() as u8);
        m.extend(body);
        m
    }

    #[test]
    fn reads_name_and_version() {
        let m = module_with(SECTION, b"uppercase@1.2.3");
        assert_eq!(
            declared(&m),
            Some(Declared {
                name: "uppercase".into(),
                version: "1.2.3".into(),
                state_version: None,
            })
        );
        let m = module_with(SECTION, b"counter@2.0.0\nstate_version=2");
        let d = declared(&m).unwrap();
        assert_eq!((d.version.as_str(), d.state_version), ("2.0.0", Some(2)));
    }

    #[test]
    fn reads_the_declared_states_of_every_section() {
        let mut m = module_with(STATES_SECTION, b"seen\n");
        m.extend(&module_with(STATES_SECTION, b"orders\nlimits\n")[8..]);
        let states = declared_states(&m).unwrap();
        assert_eq!(
            states.into_iter().collect::<Vec<_>>(),
            ["limits", "orders", "seen"]
        );
        assert_eq!(declared_states(&module_with(SECTION, b"x@1")), None);
    }

    #[test]
    fn none_without_the_section_or_with_garbage() {
        assert_eq!(declared(&module_with("other", b"x@1")), None);
        assert_eq!(declared(&module_with(SECTION, b"no-version")), None);
        assert_eq!(declared(b"not wasm"), None);
    }

    #[test]
    fn the_sdk_writes_it_into_every_plugin() {
        let dist = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins/dist/uppercase.wasm");
        let Ok(bytes) = std::fs::read(&dist) else {
            panic!("{} is missing: run `just plugins`", dist.display());
        };
        let d = declared(&bytes).expect("uppercase declares its version");
        assert_eq!(d.name, "uppercase");
        assert!(!d.version.is_empty());
        assert_eq!(declared_states(&bytes), None, "a map has no keyed state");
        let dist = dist.with_file_name("spend-limits.wasm");
        let bytes = std::fs::read(&dist).unwrap();
        let states = declared_states(&bytes).expect("a co-process declares its states");
        assert_eq!(states.into_iter().collect::<Vec<_>>(), ["limits", "orders"]);
        assert_eq!(d.state_version, None, "a plugin that declares none");
        let migrating = std::fs::read(dist.with_file_name("counter-v2.wasm")).unwrap();
        assert_eq!(declared(&migrating).unwrap().state_version, Some(2));
    }
}
