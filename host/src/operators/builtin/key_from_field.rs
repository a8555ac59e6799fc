//! `key_by` with `field`: the record's key becomes the value of a JSON field.

use super::{json_of, key_text};
use crate::batch::Batch;
use crate::failure::{FailureHandler, OperatorError};
use crate::json::field;
use crate::operators::NativeFactory;
use crate::operators::Operator;
use bytes::Bytes;
use std::sync::Arc;

/// Sets each record's key from a JSON field of its value.
pub struct KeyFromField {
    name: String,
    field: String,
    failure: FailureHandler,
}

/// Makes the `key_by` of operator `name` keying by `field`.
pub fn key_from_field_factory(name: &str, field: &str) -> NativeFactory {
    let (name, field) = (name.to_owned(), field.to_owned());
    Arc::new(move |_, failure| Ok(Box::new(KeyFromField::new(&name, &field, failure))))
}

impl KeyFromField {
    /// Keys by `field` (a dotted path); records without it go to `failure`.
    pub fn new(name: &str, field: &str, failure: FailureHandler) -> Self {
        Self {
            name: name.to_owned(),
            field: field.to_owned(),
            failure,
        }
    }
}

impl Operator for KeyFromField {
    fn name(&self) -> &str {
        &self.name
    }

    fn process(&mut self, input: Batch) -> Result<Batch, OperatorError> {
        let mut out = Vec::with_capacity(input.len());
        for mut rec in input.into_records() {
            let key = json_of(&rec).and_then(|doc| {
                field(&doc, &self.field)
                    .map(key_text)
                    .ok_or_else(|| format!("no field `{}` to key by", self.field))
            });
            match key {
                Ok(k) => {
                    rec.key = Some(Bytes::from(k));
                    out.push(rec);
                }
                Err(reason) => self.failure.fail(rec, &reason)?,
            }
        }
        Ok(Batch::Records(out))
    }
}
