//! A database of its own on the test server, for one test or benchmark.

use std::sync::atomic::{AtomicU32, Ordering};

/// The server (`MAILER_TEST_PG`, default the machine's PostgreSQL with
/// trust authentication).
pub fn server() -> String {
    std::env::var("MAILER_TEST_PG").unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432".into())
}

/// A database created for one test, dropped when dropped.
pub struct TestDb {
    /// Its name.
    pub name: String,
}

impl TestDb {
    /// A fresh database named after `prefix`, the process and a counter.
    pub fn new(prefix: &str) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "mailer_{}_{}_{}",
            prefix.replace('-', "_"),
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        sql(
            &format!("{}/postgres", server()),
            &format!("CREATE DATABASE {name}"),
        );
        Self { name }
    }

    /// Its connection string.
    pub fn dsn(&self) -> String {
        format!("{}/{}", server(), self.name)
    }

    /// Runs `statements` in it.
    pub fn execute(&self, statements: &str) {
        sql(&self.dsn(), statements);
    }

    /// The rows of a query, each value as text (`None` for NULL).
    pub fn rows(&self, query: &str) -> Vec<Vec<Option<String>>> {
        sql(&self.dsn(), query)
    }

    /// The first column of a one-row query.
    pub fn value(&self, query: &str) -> String {
        self.rows(query)[0][0].clone().unwrap_or_default()
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        sql(
            &format!("{}/postgres", server()),
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

/// Runs `statements` (simple query protocol) at `dsn` and returns the rows.
pub fn sql(dsn: &str, statements: &str) -> Vec<Vec<Option<String>>> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL at {dsn} (is it running? `scripts/postgres-ready`): {e}"));
        tokio::spawn(connection);
        let messages = client
            .simple_query(statements)
            .await
            .unwrap_or_else(|e| panic!("{statements}: {e}"));
        messages
            .into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => {
                    Some((0..r.len()).map(|i| r.get(i).map(str::to_owned)).collect())
                }
                _ => None,
            })
            .collect()
    })
}
