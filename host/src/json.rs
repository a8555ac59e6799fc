//! Small JSON helpers shared by sources and operators.

/// The value at a dotted path (`a.b.c`) of a JSON document.
pub fn field<'a>(doc: &'a serde_json::Value, path: &str) -> Option<&'a serde_json::Value> {
    path.split('.').try_fold(doc, |v, part| v.get(part))
}
