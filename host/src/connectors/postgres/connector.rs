//! The PostgreSQL sink's manifest table as a connector: the checks that
//! need no database, its description, how it is opened, and the checks a
//! run makes of the database first.

use super::{PostgresSink, PostgresSinkSpec, WriteMode, check_table, committed_checkpoint};
use crate::connectors::config::{
    CommittedCheckpoint, ConfigProblem, ConfigStrings, ConnectorContext, Endpoint, OpenSink, SinkCheck,
    SinkConfig,
};
use crate::failure::{FailureHandler, FailurePolicy};

impl SinkConfig for PostgresSinkSpec {
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        let mut fields = vec![("dsn", &mut self.dsn)];
        if let Some(ca) = self.ca_file.as_mut() {
            fields.push(("ca_file", ca));
        }
        fields
    }

    fn on_error(&self) -> Option<FailurePolicy> {
        Some(self.on_error)
    }

    fn commits_with_checkpoints(&self) -> bool {
        self.exactly_once
    }

    /// A source for every column, and conflict columns that fit the mode.
    fn check(&self, _: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        let fail = |key, message: String| Err(ConfigProblem::field(key, message));
        if self.table.is_empty() {
            return fail("table", "`table` is empty: name the table to write to".into());
        }
        if self.columns.is_empty() {
            return fail(
                "columns",
                "`columns` is empty: map at least one column, e.g. `columns.id = { field = \"id\", type = \"text\" }`"
                    .into(),
            );
        }
        if let Some(name) = self
            .columns
            .iter()
            .find_map(|(n, c)| (c.field.is_some() == c.from.is_some()).then_some(n))
        {
            return fail(
                "columns",
                format!(
                    "column `{name}` needs exactly one of `field = \"<dotted path>\"` or `from = \"key\" | \"timestamp\" | \"value\"`"
                ),
            );
        }
        match self.mode {
            WriteMode::Insert if !self.conflict_columns.is_empty() => fail(
                "conflict_columns",
                "`conflict_columns` is for `mode = \"upsert\"`; inserts have no conflicts to resolve".into(),
            ),
            WriteMode::Upsert if self.conflict_columns.is_empty() => fail(
                "conflict_columns",
                "`mode = \"upsert\"` needs `conflict_columns`: the columns of the table's unique key".into(),
            ),
            WriteMode::Upsert => match self
                .conflict_columns
                .iter()
                .find(|c| !self.columns.contains_key(*c))
            {
                Some(c) => fail(
                    "conflict_columns",
                    format!("conflict column `{c}` is not among `columns`: map it, so each row has its key"),
                ),
                None => Ok(()),
            },
            WriteMode::Insert => Ok(()),
        }
    }

    fn endpoint(&self, cx: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSink> {
        let (spec, operator, pipeline) = (self.clone(), name.to_owned(), cx.pipeline.to_owned());
        let mode = match (self.mode, self.exactly_once) {
            (WriteMode::Insert, false) => "insert",
            (WriteMode::Upsert, false) => "upsert",
            (WriteMode::Insert, true) => "insert, exactly once",
            (WriteMode::Upsert, true) => "upsert, exactly once",
        };
        Endpoint {
            name: name.to_owned(),
            description: format!("postgres table `{}` ({mode})", self.table),
            open: Box::new(move |dead_letter| {
                let rejects = FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                Ok(Box::new(PostgresSink::open(&spec, &pipeline, rejects)?) as _)
            }),
        }
    }

    fn committed_checkpoint(&self, cx: &ConnectorContext<'_>) -> Option<CommittedCheckpoint> {
        let (spec, pipeline) = (self.clone(), cx.pipeline.to_owned());
        self.exactly_once
            .then(|| Box::new(move || Ok(committed_checkpoint(&spec, &pipeline)?)) as CommittedCheckpoint)
    }

    fn table_check(&self) -> Option<SinkCheck> {
        let spec = self.clone();
        Some(Box::new(move || check_table(&spec)))
    }
}
