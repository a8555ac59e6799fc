//! Built-in operators that need no plugin (the declarative workflows): keys
//! from a JSON field, filters on a JSON field, reshaping of JSON values, and
//! running aggregates per key. Each kind's manifest table is beside its
//! operator.

mod aggregate;
mod field_filter;
mod key_by;
mod key_from_field;
mod reshape;

pub use aggregate::{AggregateSpec, RunningAggregate, aggregate_factory, check_aggregates};
pub use field_filter::{Compare, Condition, FieldFilter, FieldFilterSpec, field_filter_factory};
pub use key_by::KeyBySpec;
pub use key_from_field::{KeyFromField, key_from_field_factory};
pub use reshape::{ProjectSpec, RenameSpec, Reshape, ReshapeKind, SetSpec, reshape_factory};

use crate::record::Record;

/// A record's value as a JSON document, or why it is not one.
pub fn json_of(rec: &Record) -> Result<serde_json::Value, String> {
    serde_json::from_slice(&rec.value).map_err(|e| format!("value is not a JSON document: {e}"))
}

/// A JSON value as key bytes: strings as they are, anything else as JSON.
pub fn key_text(v: &serde_json::Value) -> Vec<u8> {
    match v {
        serde_json::Value::String(s) => s.as_bytes().to_vec(),
        other => other.to_string().into_bytes(),
    }
}
