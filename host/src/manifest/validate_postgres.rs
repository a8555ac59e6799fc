//! Checks of a `postgres` sink that need no database: a source for every
//! column, and conflict columns that fit the mode.

use super::{Manifest, ManifestError};
use crate::connectors::postgres::{PostgresSinkSpec, WriteMode};
use std::ops::Range;

pub(super) fn check(m: &Manifest, p: &PostgresSinkSpec, span: &Range<usize>) -> Result<(), ManifestError> {
    let fail = |key: &str, message: String| Err(m.error_at(span, key, message));
    if p.table.is_empty() {
        return fail("table", "`table` is empty: name the table to write to".into());
    }
    if p.columns.is_empty() {
        return fail(
            "columns",
            "`columns` is empty: map at least one column, e.g. `columns.id = { field = \"id\", type = \"text\" }`"
                .into(),
        );
    }
    for (name, c) in &p.columns {
        if c.field.is_some() == c.from.is_some() {
            return fail(
                "columns",
                format!(
                    "column `{name}` needs exactly one of `field = \"<dotted path>\"` or `from = \"key\" | \"timestamp\" | \"value\"`"
                ),
            );
        }
    }
    match p.mode {
        WriteMode::Insert if !p.conflict_columns.is_empty() => fail(
            "conflict_columns",
            "`conflict_columns` is for `mode = \"upsert\"`; inserts have no conflicts to resolve".into(),
        ),
        WriteMode::Upsert if p.conflict_columns.is_empty() => fail(
            "conflict_columns",
            "`mode = \"upsert\"` needs `conflict_columns`: the columns of the table's unique key".into(),
        ),
        WriteMode::Upsert => match p.conflict_columns.iter().find(|c| !p.columns.contains_key(*c)) {
            Some(c) => fail(
                "conflict_columns",
                format!("conflict column `{c}` is not among `columns`: map it, so each row has its key"),
            ),
            None => Ok(()),
        },
        WriteMode::Insert => Ok(()),
    }
}
