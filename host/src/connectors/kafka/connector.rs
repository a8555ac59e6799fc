//! The Kafka source's and sink's manifest tables as connectors: their
//! checks, descriptions and how each is opened.

use super::config::{config_strings, transaction_timeout};
use super::{
    KafkaFormat, KafkaSink, KafkaSinkSpec, KafkaSource, KafkaSourceSpec, TRANSACTION_TIMEOUT,
    TransactionalKafkaSink, committed_checkpoint,
};
use crate::connectors::Sink;
use crate::connectors::config::{
    CommittedCheckpoint, ConfigProblem, ConfigStrings, ConnectorContext, Endpoint, OpenSink, OpenSource,
    ProblemAt, SinkConfig, SourceConfig, fields_need_format,
};
use crate::failure::{FailureHandler, FailurePolicy};

impl SourceConfig for KafkaSourceSpec {
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        config_strings(
            &mut self.bootstrap_servers,
            self.security.as_mut(),
            &mut self.options,
        )
    }

    fn on_error(&self) -> Option<FailurePolicy> {
        Some(self.on_error)
    }

    fn check(&self, _: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        if self.topics.is_empty() {
            return Err(ConfigProblem::field(
                "topics",
                "`topics` is empty: name at least one topic",
            ));
        }
        if self.max_record_bytes == 0 {
            return Err(ConfigProblem::field(
                "max_record_bytes",
                "max_record_bytes must be at least 1",
            ));
        }
        if self.format != KafkaFormat::Json {
            fields_need_format(
                &self.key_field,
                &self.timestamp_field,
                "json",
                "other values have no fields",
            )?;
        }
        Ok(())
    }

    fn endpoint(&self, _: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSource> {
        let description = format!(
            "kafka topics {} (group `{}`)",
            self.topics.join(", "),
            self.group_id
        );
        let (spec, operator) = (self.clone(), name.to_owned());
        Endpoint {
            name: name.to_owned(),
            description,
            open: Box::new(move |dead_letter| {
                let rejects = FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                Ok(Box::new(KafkaSource::open(&spec, rejects)?) as _)
            }),
        }
    }
}

impl SinkConfig for KafkaSinkSpec {
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        config_strings(
            &mut self.bootstrap_servers,
            self.security.as_mut(),
            &mut self.options,
        )
    }

    fn on_error(&self) -> Option<FailurePolicy> {
        Some(self.on_error)
    }

    fn commits_with_checkpoints(&self) -> bool {
        self.exactly_once
    }

    fn check(&self, cx: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        let Some(interval) = cx.checkpoint_interval.filter(|_| self.exactly_once) else {
            return Ok(());
        };
        // A transaction stays open for an interval and the checkpoint
        // after it, and an interval more for each failed checkpoint
        // tolerated in a row; the brokers abort one open past the timeout.
        let timeout = transaction_timeout(self, TRANSACTION_TIMEOUT);
        let intervals = cx.tolerable_failures.saturating_add(2);
        if interval.saturating_mul(intervals) > timeout {
            return Err(ConfigProblem {
                at: ProblemAt::Checkpoint("interval"),
                message: format!(
                    "the checkpoint interval ({interval:?}) times {intervals} must be at most the Kafka sink's transaction timeout ({timeout:?}, `transaction.timeout.ms`): each transaction stays open for an interval, the checkpoint after it, and an interval more for each of the `tolerable_failures` = {} checkpoints that may fail in a row, and the brokers abort one open longer. Lower the interval or `tolerable_failures`, or raise `transaction.timeout.ms`",
                    cx.tolerable_failures
                ),
            });
        }
        Ok(())
    }

    fn endpoint(&self, cx: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSink> {
        // What its dead letters' `mailer.operator` header names.
        let (spec, operator, pipeline) = (self.clone(), name.to_owned(), cx.pipeline.to_owned());
        let mode = if self.exactly_once {
            " (exactly once, transactional)"
        } else {
            ""
        };
        Endpoint {
            name: name.to_owned(),
            description: format!("kafka topic `{}`{mode}", self.topic),
            open: Box::new(move |dead_letter| {
                let rejects = FailureHandler::new(&operator, spec.on_error, dead_letter, Default::default());
                Ok(if spec.exactly_once {
                    Box::new(TransactionalKafkaSink::open(&spec, &pipeline, rejects)?) as Box<dyn Sink>
                } else {
                    Box::new(KafkaSink::open(&spec, rejects)?)
                })
            }),
        }
    }

    fn committed_checkpoint(&self, cx: &ConnectorContext<'_>) -> Option<CommittedCheckpoint> {
        let (spec, pipeline) = (self.clone(), cx.pipeline.to_owned());
        self.exactly_once
            .then(|| Box::new(move || Ok(committed_checkpoint(&spec, &pipeline)?)) as CommittedCheckpoint)
    }
}
