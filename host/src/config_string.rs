//! `${VAR}` placeholders: configuration strings filled from the environment
//! when the manifest is loaded. A resolved value is never displayed: logs,
//! errors and `describe` show the template.

use serde::{Deserialize, Deserializer};
use std::fmt;
use std::path::Path;

/// The fields of a table that may hold `${VAR}`s, each with its name.
pub type ConfigStrings<'a> = Vec<(&'static str, &'a mut ConfigString)>;

/// A path for an error message: as written, plus where it resolved to
/// unless it holds a `${VAR}` (whose value is never shown).
pub fn shown(value: &ConfigString, resolved: &Path) -> String {
    if value.has_placeholders() {
        format!("`{value}`")
    } else {
        format!("`{value}` (`{}`)", resolved.display())
    }
}

/// A configuration string that may contain `${VAR}` placeholders (`$$` is a
/// literal `$`).
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigString {
    template: String,
    resolved: Option<String>,
}

impl ConfigString {
    /// A string as written in a manifest.
    pub fn new(template: impl Into<String>) -> Self {
        Self {
            template: template.into(),
            resolved: None,
        }
    }

    /// The string as written, placeholders included: safe to show.
    pub fn template(&self) -> &str {
        &self.template
    }

    /// Whether the template names an environment variable.
    pub fn has_placeholders(&self) -> bool {
        self.template.contains("${")
    }

    /// The value as a path, relative to `dir` unless absolute.
    pub fn path_in(&self, dir: &Path) -> std::path::PathBuf {
        dir.join(self.value())
    }

    /// The resolved value; the template until [`ConfigString::resolve`] ran.
    /// Never log or display it.
    pub fn value(&self) -> &str {
        self.resolved.as_deref().unwrap_or(&self.template)
    }

    /// Fills the placeholders from `lookup`. On failure, says which variable
    /// is missing or what is malformed (never a value).
    pub fn resolve(&mut self, lookup: impl Fn(&str) -> Option<String>) -> Result<(), String> {
        let mut out = String::with_capacity(self.template.len());
        let mut rest = self.template.as_str();
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            rest = &rest[i..];
            if let Some(r) = rest.strip_prefix("$$") {
                out.push('$');
                rest = r;
            } else if let Some(r) = rest.strip_prefix("${") {
                let end = r
                    .find('}')
                    .ok_or_else(|| format!("unclosed `${{` in `{}`: write `${{NAME}}`", self.template))?;
                let name = &r[..end];
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!(
                        "`${{{name}}}` is not a valid variable name: use letters, digits and `_`"
                    ));
                }
                let value = lookup(name).ok_or_else(|| {
                    format!("environment variable `{name}` is not set (it is used as `${{{name}}}`)")
                })?;
                out.push_str(&value);
                rest = &r[end + 1..];
            } else {
                out.push('$');
                rest = &rest[1..];
            }
        }
        out.push_str(rest);
        self.resolved = Some(out);
        Ok(())
    }
}

/// Shows the template only.
impl fmt::Debug for ConfigString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.template, f)
    }
}

/// Shows the template only.
impl fmt::Display for ConfigString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.template)
    }
}

impl<'de> Deserialize<'de> for ConfigString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "SECRET").then(|| "hunter2".to_owned())
    }

    #[test]
    fn placeholders_resolve_and_never_display() {
        let mut s = ConfigString::new("postgres://u:${SECRET}@h/$$x");
        s.resolve(env).unwrap();
        assert_eq!(s.value(), "postgres://u:hunter2@h/$x");
        assert_eq!(s.to_string(), "postgres://u:${SECRET}@h/$$x");
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn missing_variable_is_named() {
        let mut s = ConfigString::new("${NOPE}");
        assert_eq!(
            s.resolve(env).unwrap_err(),
            "environment variable `NOPE` is not set (it is used as `${NOPE}`)"
        );
    }

    #[test]
    fn malformed_placeholders_are_explained() {
        assert!(
            ConfigString::new("${A")
                .resolve(env)
                .unwrap_err()
                .contains("unclosed")
        );
        assert!(
            ConfigString::new("${A-B}")
                .resolve(env)
                .unwrap_err()
                .contains("not a valid variable name")
        );
    }
}
