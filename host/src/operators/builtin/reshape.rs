//! `project`, `rename` and `set`: reshape each record's JSON value.

use super::json_of;
use crate::batch::Batch;
use crate::config_problem::ConfigProblem;
use crate::failure::FailurePolicy;
use crate::failure::{FailureHandler, OperatorError};
use crate::json::field;
use crate::operators::config::{BuildContext, CheckContext, OperatorConfig, one_stream_table};
use crate::operators::{NativeFactory, NodeKind, Operator, OperatorNode, Step};
use crate::record::Record;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

/// The `project` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProjectSpec {
    /// The operator's name; `project` when absent.
    pub name: Option<String>,
    /// The fields (dotted paths) to keep.
    pub fields: Vec<String>,
    /// What to do with a record whose value is not a JSON object.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The `rename` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameSpec {
    /// The operator's name; `rename` when absent.
    pub name: Option<String>,
    /// `old = "new"` for each field (dotted paths).
    pub fields: BTreeMap<String, String>,
    /// What to do with a record whose value is not a JSON object.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The `set` operator.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetSpec {
    /// The operator's name; `set` when absent.
    pub name: Option<String>,
    /// `field = value` for each field (dotted paths; any TOML value).
    pub fields: BTreeMap<String, toml::Value>,
    /// What to do with a record whose value is not a JSON object.
    #[serde(default)]
    pub on_error: FailurePolicy,
    /// The stream it reads: a source's or an earlier operator's name; the
    /// operator before it (or the one source) when absent.
    pub input: Option<String>,
    /// The streams it reads as one, their union (instead of `input`).
    pub inputs: Option<Vec<String>>,
}

/// The [`OperatorConfig`] of a reshape table: `$kind` made of its table.
macro_rules! reshape_table {
    ($spec:ident, $default:literal, |$t:ident| $kind:expr, expects: |$e:ident| $expected:expr) => {
        impl OperatorConfig for $spec {
            one_stream_table!($default);

            fn check(&self, cx: &CheckContext<'_>) -> Result<(), ConfigProblem> {
                cx.check_policy(self.on_error)
            }

            fn step(&self, cx: &BuildContext<'_>) -> Result<Step, ConfigProblem> {
                let $t = self;
                let factory = reshape_factory(cx.name, $kind);
                Ok(Step::Operator {
                    node: OperatorNode::new(cx.name, NodeKind::Native(factory), self.on_error),
                    parallelism: 1,
                })
            }

            fn expected_fields(&self) -> Vec<&str> {
                let $e = self;
                $expected
            }
        }
    };
}

reshape_table!(ProjectSpec, "project", |p| ReshapeKind::Project(p.fields.clone()),
    expects: |p| p.fields.iter().map(String::as_str).collect());
reshape_table!(RenameSpec, "rename",
    |r| ReshapeKind::Rename(r.fields.iter().map(|(a, b)| (a.clone(), b.clone())).collect()),
    expects: |r| r.fields.keys().map(String::as_str).collect());
reshape_table!(SetSpec, "set",
    |s| ReshapeKind::Set(s.fields.iter().map(|(a, v)| (a.clone(), crate::json::from_toml(v))).collect()),
    expects: |_s| Vec::new());

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

/// Records a `project` or `rename` reads before it warns of the fields
/// none of them had.
const WARN_AFTER_RECORDS: u64 = 1000;

/// Reshapes JSON values.
pub struct Reshape {
    name: String,
    kind: ReshapeKind,
    failure: FailureHandler,
    /// For each field a `project` or `rename` names: whether a record had
    /// it.
    matched: Vec<bool>,
    /// Records read.
    seen: u64,
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
        let named = match &kind {
            ReshapeKind::Project(fields) => fields.len(),
            ReshapeKind::Rename(pairs) => pairs.len(),
            ReshapeKind::Set(_) => 0,
        };
        Self {
            name: name.to_owned(),
            kind,
            failure,
            matched: vec![false; named],
            seen: 0,
        }
    }

    fn apply(&mut self, mut doc: Value) -> Result<Value, String> {
        if !doc.is_object() {
            return Err("value is not a JSON object".to_owned());
        }
        match &self.kind {
            ReshapeKind::Project(fields) => {
                let mut out = Value::Object(Map::new());
                for (f, matched) in fields.iter().zip(&mut self.matched) {
                    match field(&doc, f) {
                        Some(v) => {
                            *matched = true;
                            put(&mut out, f, v.clone())?;
                        }
                        None => {
                            self.failure.stats().unmatched_fields.fetch_add(1, Relaxed);
                        }
                    }
                }
                Ok(out)
            }
            ReshapeKind::Rename(pairs) => {
                for ((old, new), matched) in pairs.iter().zip(&mut self.matched) {
                    match take(&mut doc, old) {
                        Some(v) => {
                            *matched = true;
                            put(&mut doc, new, v)?;
                        }
                        None => {
                            self.failure.stats().unmatched_fields.fetch_add(1, Relaxed);
                        }
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

impl Reshape {
    /// The fields named that no record had so far.
    fn unmatched(&self) -> Vec<&str> {
        let names: Vec<&str> = match &self.kind {
            ReshapeKind::Project(fields) => fields.iter().map(String::as_str).collect(),
            ReshapeKind::Rename(pairs) => pairs.iter().map(|(old, _)| old.as_str()).collect(),
            ReshapeKind::Set(_) => Vec::new(),
        };
        names
            .into_iter()
            .zip(&self.matched)
            .filter(|(_, matched)| !**matched)
            .map(|(name, _)| name)
            .collect()
    }

    /// Once `WARN_AFTER_RECORDS` records were read (or, at `end`, any),
    /// warns once per operator of the fields none of them had: most often
    /// a typo, which the operator would otherwise drop silently.
    fn warn_unmatched(&self, end: bool) {
        if self.seen == 0 || (!end && self.seen < WARN_AFTER_RECORDS) {
            return;
        }
        let unmatched = self.unmatched();
        if unmatched.is_empty() || self.failure.stats().warned_unmatched.swap(true, Relaxed) {
            return;
        }
        let fields = unmatched
            .iter()
            .map(|f| format!("`{f}`"))
            .collect::<Vec<_>>()
            .join(", ");
        tracing::warn!(
            operator = %self.name,
            records = self.seen,
            fields = %fields,
            "no record read so far has these fields (a typo?): the operator skips a field it cannot find; mailer_operator_unmatched_fields_total counts them"
        );
    }
}

impl Operator for Reshape {
    fn name(&self) -> &str {
        &self.name
    }

    fn on_end(&mut self, _out: &mut Vec<Record>) -> Result<(), OperatorError> {
        self.warn_unmatched(true);
        Ok(())
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        self.seen += input.len() as u64;
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
        self.warn_unmatched(false);
        Ok(Batch::Records(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::failure::FailurePolicy;
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
    fn fields_no_record_has_are_counted_and_warned_of_once() {
        let failure = FailureHandler::new("r", FailurePolicy::Skip, None, Default::default());
        let stats = failure.stats().clone();
        let mut r = Reshape::new(
            "r",
            ReshapeKind::Project(vec!["a".into(), "typo".into()]),
            failure,
        );
        let batch = |n: usize| Batch::Records((0..n).map(|_| Record::new(None, r#"{"a":1}"#, 0)).collect());
        r.process(batch(10)).unwrap();
        assert_eq!(
            stats.unmatched_fields.load(Relaxed),
            10,
            "one per record lacking `typo`"
        );
        assert_eq!(r.unmatched(), ["typo"]);
        assert!(!stats.warned_unmatched.load(Relaxed), "not before 1000 records");
        r.on_end(&mut Vec::new()).unwrap();
        assert!(stats.warned_unmatched.load(Relaxed), "at the end of the input");
        let mut renamed = Reshape::new(
            "n",
            ReshapeKind::Rename(vec![("a".into(), "b".into())]),
            FailureHandler::new("n", FailurePolicy::Skip, None, Default::default()),
        );
        renamed.process(batch(1)).unwrap();
        assert!(renamed.unmatched().is_empty());
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
