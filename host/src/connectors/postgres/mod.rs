//! PostgreSQL: a sink writing records as rows of a table (insert or
//! upsert, at least once or exactly once), through `tokio-postgres`.

mod config;
mod connection;
mod connector;
mod rows;
mod run_lock;
mod schema;
mod sink;

pub use config::{ColumnSpec, ColumnType, PostgresSinkSpec, RecordPart, TlsMode, WriteMode};
pub use sink::{PostgresSink, committed_checkpoint};

use super::ConnectorError;

/// What checking the table before a run found.
#[derive(Debug)]
pub enum TableCheck {
    /// The table fits the mapping.
    Fits,
    /// The database could not be reached; the table is checked at start.
    Unreachable(ConnectorError),
}

/// Connects and checks the table against the mapping: `Err` names every
/// mismatch; an unreachable database is not an error here.
pub fn check_table(spec: &PostgresSinkSpec) -> Result<TableCheck, ConnectorError> {
    let runtime = sink::runtime()?;
    let target = sink::target(spec)?;
    let err = |message: String| ConnectorError::Postgres {
        target: target.shown().to_owned(),
        table: spec.table.clone(),
        message,
    };
    let client = match target.connect(&runtime) {
        Ok(c) => c,
        Err(e) if e.as_db_error().is_none() => {
            return Ok(TableCheck::Unreachable(err(format!(
                "cannot connect: {}",
                connection::describe(&e)
            ))));
        }
        Err(e) => return Err(err(format!("cannot connect: {}", connection::describe(&e)))),
    };
    schema::check_table(&runtime, &client, spec).map_err(err)?;
    Ok(TableCheck::Fits)
}
