//! The sink's progress: the table recording the last checkpoint whose rows
//! each pipeline's sink committed, how to read it, and what a restart asks of
//! it.

use super::*;

/// The id of the newest checkpoint whose rows the sink committed, as the
/// database recorded it: `Some(0)` when the sink started but committed
/// nothing yet, `None` when the database has no record of the sink.
pub fn committed_checkpoint(spec: &PostgresSinkSpec, pipeline: &str) -> Result<Option<u64>, ConnectorError> {
    let runtime = runtime()?;
    let target = target(spec)?;
    let err = |e: tokio_postgres::Error| ConnectorError::Postgres {
        target: target.shown().to_owned(),
        table: spec.table.clone(),
        message: format!("reading the committed checkpoint: {}", describe(&e)),
    };
    let mut client = target.connect(&runtime).map_err(err)?;
    let progress = progress(spec, pipeline);
    let table = sibling(&spec.table, &spec.progress_table);
    let exists = |client: &Client, table: String| {
        runtime.block_on(async move {
            let row = client
                .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
                .await?;
            Ok::<bool, tokio_postgres::Error>(row.get(0))
        })
    };
    if !exists(&client, table).map_err(err)? {
        return Ok(None);
    }
    // The lock first (an earlier run's session may still hold it), then
    // its sessions on the stage ended and the stage locked: a commit the
    // server was still finishing is in, or not, before progress is read.
    let _lock = take_lock(&runtime, &target, &progress).map_err(|message| ConnectorError::Postgres {
        target: target.shown().to_owned(),
        table: spec.table.clone(),
        message,
    })?;
    let stage = sibling(&spec.table, &stage_name(spec, pipeline));
    let staged = exists(&client, stage.clone()).map_err(err)?;
    runtime
        .block_on(async {
            name_session(&client, &progress.session).await?;
            let tx = client.transaction().await?;
            tx.batch_execute(&progress.end_sessions).await?;
            if staged {
                tx.batch_execute(&format!("LOCK TABLE {stage} IN SHARE ROW EXCLUSIVE MODE"))
                    .await?;
            }
            let seen = committed(&tx, &progress).await?;
            tx.commit().await?;
            Ok(seen)
        })
        .map_err(err)
}

pub(super) fn progress(spec: &PostgresSinkSpec, pipeline: &str) -> Progress {
    let table = sibling(&spec.table, &spec.progress_table);
    let stage = stage_name(spec, pipeline);
    Progress {
        record: format!(
            "UPDATE {table} SET checkpoint = $3, committed_at = now() \
             WHERE pipeline = $1 AND sink = $2 AND checkpoint = $4"
        ),
        read: format!("SELECT checkpoint FROM {table} WHERE pipeline = $1 AND sink = $2"),
        start: format!(
            "INSERT INTO {table} (pipeline, sink, checkpoint) VALUES ($1, $2, 0) ON CONFLICT (pipeline, sink) DO NOTHING"
        ),
        pipeline: pipeline.to_owned(),
        sink: spec.table.clone(),
        lock_key: lock_key(pipeline, &spec.table),
        session: session_name(&stage, &run_token()),
        end_sessions: end_sessions(&sibling(&spec.table, &stage), &stage),
    }
}

pub(super) fn progress_table_ddl(spec: &PostgresSinkSpec) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, sink text NOT NULL, \
         checkpoint bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), \
         PRIMARY KEY (pipeline, sink))",
        sibling(&spec.table, &spec.progress_table)
    )
}

/// The last checkpoint whose rows are committed, as the progress table says.
pub(super) async fn committed(
    client: &impl GenericClient,
    progress: &Progress,
) -> Result<Option<u64>, tokio_postgres::Error> {
    Ok(client
        .query_opt(&progress.read, &[&progress.pipeline, &progress.sink])
        .await?
        .map(|row| row.get::<_, i64>(0) as u64))
}
