//! Checks the target table against the sink's mapping before anything is
//! written: every mapped column exists with a type that takes the mapped
//! values, every required column is filled, and an upsert's conflict
//! columns are a unique key.

use super::config::{ColumnType, PostgresSinkSpec, WriteMode};
use super::connection::quote_table;
use std::collections::{BTreeMap, BTreeSet};
use tokio_postgres::Client;

/// A column of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Its type's name in `pg_type` (`int4`, `text`, `timestamptz`, …).
    pub type_name: String,
    /// NOT NULL without a default (or identity, or generation).
    pub required: bool,
}

/// What the database says about the table.
#[derive(Debug, Clone, Default)]
pub struct TableInfo {
    /// Its columns by name.
    pub columns: BTreeMap<String, Column>,
    /// The column sets of its unique indexes (and primary key).
    pub unique_keys: Vec<BTreeSet<String>>,
}

/// Reads the table's columns and unique keys; `None` when there is no
/// such table.
pub async fn table_info(client: &Client, table: &str) -> Result<Option<TableInfo>, tokio_postgres::Error> {
    let name = quote_table(table);
    let exists = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
        .await?
        .get::<_, bool>(0);
    if !exists {
        return Ok(None);
    }
    let mut info = TableInfo::default();
    let rows = client
        .query(
            "SELECT a.attname::text, t.typname::text, \
                    a.attnotnull AND NOT (a.atthasdef OR a.attidentity <> '' OR a.attgenerated <> '') \
             FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped",
            &[&name],
        )
        .await?;
    for row in rows {
        info.columns.insert(
            row.get(0),
            Column {
                type_name: row.get(1),
                required: row.get(2),
            },
        );
    }
    let keys = client
        .query(
            "SELECT array_agg(a.attname::text) FROM pg_index i \
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) \
             WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL \
             GROUP BY i.indexrelid",
            &[&name],
        )
        .await?;
    info.unique_keys = keys
        .iter()
        .map(|r| r.get::<_, Vec<String>>(0).into_iter().collect())
        .collect();
    Ok(Some(info))
}

/// Reads the table and checks it against the mapping: every problem, one
/// per line.
pub fn check_table(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    spec: &PostgresSinkSpec,
) -> Result<(), String> {
    let info = runtime
        .block_on(table_info(client, &spec.table))
        .map_err(|e| format!("reading the table's columns: {}", super::connection::describe(&e)))?
        .ok_or("the table does not exist: create it before the pipeline starts")?;
    check(spec, &info)
}

/// Every way the table does not fit the mapping, one per line; `Ok` when it
/// fits.
pub fn check(spec: &PostgresSinkSpec, info: &TableInfo) -> Result<(), String> {
    let mut problems = Vec::new();
    for (name, column) in &spec.columns {
        match info.columns.get(name) {
            None => problems.push(format!(
                "column `{name}` is not in table `{}` (its columns: {})",
                spec.table,
                info.columns.keys().cloned().collect::<Vec<_>>().join(", ")
            )),
            Some(c) if !column.kind.fits(&c.type_name) => {
                let hint = ALL_TYPES
                    .iter()
                    .find(|t| t.fits(&c.type_name))
                    .map_or(String::from("no mapping type fits it"), |t| {
                        format!("use type = \"{}\"", t.name())
                    });
                problems.push(format!(
                    "column `{name}` is `{}` in the table, which does not take {}: {hint}",
                    c.type_name,
                    column.kind.described()
                ));
            }
            Some(_) => {}
        }
    }
    for (name, c) in &info.columns {
        if c.required && !spec.columns.contains_key(name) {
            problems.push(format!(
                "column `{name}` is NOT NULL without a default, and no mapping fills it"
            ));
        }
    }
    if spec.mode == WriteMode::Upsert {
        let wanted: BTreeSet<String> = spec.conflict_columns.iter().cloned().collect();
        if !info.unique_keys.contains(&wanted) {
            problems.push(format!(
                "table `{}` has no primary key or unique index on exactly ({}), which an upsert needs: \
                 CREATE UNIQUE INDEX ON {} ({})",
                spec.table,
                spec.conflict_columns.join(", "),
                spec.table,
                spec.conflict_columns.join(", ")
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

const ALL_TYPES: [ColumnType; 6] = [
    ColumnType::Text,
    ColumnType::Integer,
    ColumnType::Float,
    ColumnType::Boolean,
    ColumnType::Timestamp,
    ColumnType::Jsonb,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(extra: &str) -> PostgresSinkSpec {
        toml::from_str(&format!(
            r#"
            dsn = "postgres://x@localhost/db"
            table = "totals"
            {extra}
            [columns]
            customer = {{ field = "customer", type = "text" }}
            total = {{ field = "sum", type = "float" }}
            "#
        ))
        .unwrap()
    }

    fn table(columns: &[(&str, &str, bool)], keys: &[&[&str]]) -> TableInfo {
        TableInfo {
            columns: columns
                .iter()
                .map(|(n, t, r)| {
                    (
                        n.to_string(),
                        Column {
                            type_name: t.to_string(),
                            required: *r,
                        },
                    )
                })
                .collect(),
            unique_keys: keys
                .iter()
                .map(|k| k.iter().map(|s| s.to_string()).collect())
                .collect(),
        }
    }

    #[test]
    fn a_fitting_table_passes() {
        let t = table(
            &[
                ("customer", "text", true),
                ("total", "numeric", false),
                ("id", "int8", false),
            ],
            &[&["customer"]],
        );
        check(&spec(""), &t).unwrap();
        check(&spec("mode = \"upsert\"\nconflict_columns = [\"customer\"]"), &t).unwrap();
    }

    #[test]
    fn every_mismatch_is_named() {
        let t = table(
            &[("customer", "int4", false), ("created", "timestamptz", true)],
            &[&["customer", "created"]],
        );
        let err = check(&spec("mode = \"upsert\"\nconflict_columns = [\"customer\"]"), &t).unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(
            lines,
            [
                "column `customer` is `int4` in the table, which does not take text: use type = \"integer\"",
                "column `total` is not in table `totals` (its columns: created, customer)",
                "column `created` is NOT NULL without a default, and no mapping fills it",
                "table `totals` has no primary key or unique index on exactly (customer), which an upsert needs: \
                 CREATE UNIQUE INDEX ON totals (customer)",
            ]
        );
    }
}
