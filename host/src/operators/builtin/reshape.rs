//! `project`, `rename` and `set`: reshape each record's JSON value.

use super::json_of;
use crate::batch::Batch;
use crate::json::field;
use crate::operators::NativeFactory;
use crate::operators::{FailureHandler, Operator, OperatorError};
use bytes::Bytes;
use serde_json::{Map, Value};
use std::sync::Arc;

/// What a reshape does to each JSON value (paths are dotted).
#[derive(Debug, Clone, PartialEq)]
pub enum ReshapeKind {
    /// Keeps only these fields.
    Project(Vec<String>),
    /// Moves each field `old` to `new` (absent fields are left alone).
    Rename(Vec<(String, String)>),
    /// Sets each field to a constant.
    Set(Vec<(String, Value)>),
}

/// Reshapes JSON values.
pub struct Reshape {
    name: String,
    kind: ReshapeKind,
    failure: FailureHandler,
}

/// Removes the value at a dotted path.
fn take(doc: &mut Value, path: &str) -> Option<Value> {
    let (parent, last) = match path.rsplit_once('.') {
        Some((p, l)) => (p.split('.').try_fold(doc, |v, part| v.get_mut(part))?, l),
        None => (doc, path),
    };
    parent.as_object_mut()?.remove(last)
}

/// Puts a value at a dotted path, making objects along the way; fails when
/// a non-object is in the way.
fn put(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let mut here = doc;
    let mut parts = path.split('.').peekable();
    while let Some(part) = parts.next() {
        let obj = here.as_object_mut().ok_or_else(|| {
            format!("cannot set `{path}`: `{part}` is inside a value that is not an object")
        })?;
        if parts.peek().is_none() {
            obj.insert(part.to_owned(), value);
            return Ok(());
        }
        here = obj
            .entry(part.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(())
}

/// Makes the reshape of operator `name`.
pub fn reshape_factory(name: &str, kind: ReshapeKind) -> NativeFactory {
    let name = name.to_owned();
    Arc::new(move |_, failure| Ok(Box::new(Reshape::new(&name, kind.clone(), failure))))
}

impl Reshape {
    /// A reshape named `name`; records that are not JSON objects go to
    /// `failure`.
    pub fn new(name: &str, kind: ReshapeKind, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            failure,
        }
    }

    fn apply(&self, mut doc: Value) -> Result<Value, String> {
        if !doc.is_object() {
            return Err("value is not a JSON object".to_owned());
        }
        match &self.kind {
            ReshapeKind::Project(fields) => {
                let mut out = Value::Object(Map::new());
                for f in fields {
                    if let Some(v) = field(&doc, f) {
                        put(&mut out, f, v.clone())?;
                    }
                }
                Ok(out)
            }
            ReshapeKind::Rename(pairs) => {
                for (old, new) in pairs {
                    if let Some(v) = take(&mut doc, old) {
                        put(&mut doc, new, v)?;
                    }
                }
                Ok(doc)
            }
            ReshapeKind::Set(pairs) => {
                for (f, v) in pairs {
                    put(&mut doc, f, v.clone())?;
                }
                Ok(doc)
            }
        }
    }
}

impl Operator for Reshape {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        for mut rec in input.into_records() {
            match json_of(&rec).and_then(|doc| self.apply(doc)) {
                Ok(doc) => {
                    rec.value = Bytes::from(doc.to_string());
                    out.push(rec);
                }
                Err(reason) => self.failure.fail(rec, &reason)?,
            }
        }
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::FailurePolicy;
    use crate::record::Record;
    use serde_json::json;

    fn reshape(kind: ReshapeKind, doc: &str) -> String {
        let failure = FailureHandler::new("r", FailurePolicy::Skip, None, Default::default());
        let mut r = Reshape::new("r", kind, failure);
        let out = r
            .process(Batch::Records(vec![Record::new(None, doc.to_owned(), 0)]))
            .unwrap();
        out.into_records()
            .first()
            .map_or(String::new(), |r| String::from_utf8(r.value.to_vec()).unwrap())
    }

    #[test]
    fn project_rename_and_set_reshape_nested_fields() {
        let doc = r#"{"a":1,"b":{"c":2,"d":3},"e":4}"#;
        let p = reshape(
            ReshapeKind::Project(vec!["a".into(), "b.c".into(), "zz".into()]),
            doc,
        );
        assert_eq!(p, r#"{"a":1,"b":{"c":2}}"#);
        let r = reshape(ReshapeKind::Rename(vec![("b.c".into(), "x.y".into())]), doc);
        assert_eq!(r, r#"{"a":1,"b":{"d":3},"e":4,"x":{"y":2}}"#);
        let s = reshape(
            ReshapeKind::Set(vec![("b.c".into(), json!("new")), ("f".into(), json!(true))]),
            doc,
        );
        assert_eq!(s, r#"{"a":1,"b":{"c":"new","d":3},"e":4,"f":true}"#);
        assert_eq!(
            reshape(ReshapeKind::Set(vec![("a.b".into(), json!(1))]), doc),
            "",
            "a is not an object"
        );
        assert_eq!(
            reshape(ReshapeKind::Project(vec!["a".into()]), "[1]"),
            "",
            "not an object"
        );
    }
}
