//! Small JSON helpers shared by sources and operators.

/// The value at a dotted path (`a.b.c`) of a JSON document.
pub fn field<'a>(doc: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(doc, |v, part| v.get(part))
}

/// A TOML value as JSON.
pub fn from_toml(v: &toml::Value) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}
