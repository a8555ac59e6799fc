//! The manifest tables of the `file` source and sink.

use super::{FileFormat, FileSink, FileSource};
use crate::config_string::ConfigString;
use crate::connectors::SinkFormat;
use crate::connectors::config::{
    ConfigProblem, ConfigStrings, ConnectorContext, Endpoint, OpenSink, OpenSource, SinkConfig, SourceConfig,
    default_max_record_bytes, fields_need_format, serde_plain, shown,
};
use crate::failure::FailurePolicy;
use serde::Deserialize;

/// The `file` source.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceSpec {
    /// The file, relative to the manifest's folder.
    pub path: ConfigString,
    /// `lines` (default) or `json_lines`.
    #[serde(default)]
    pub format: FileFormat,
    /// JSON lines only: the dotted path of the field that is the key.
    pub key_field: Option<String>,
    /// JSON lines only: the dotted path of the field holding the event time
    /// in ms; the time of reading when absent.
    pub timestamp_field: Option<String>,
    /// At most this many records per second (replays a file as a stream);
    /// as fast as it reads when absent.
    pub rate: Option<u64>,
    /// The longest line read as a record; a longer one follows `on_error`.
    #[serde(default = "default_max_record_bytes")]
    pub max_record_bytes: usize,
    /// What happens to a line that cannot be a record (longer than
    /// `max_record_bytes`): `fail`, `skip` or `dead-letter`.
    #[serde(default)]
    pub on_error: FailurePolicy,
}

impl SourceConfig for FileSourceSpec {
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        vec![("path", &mut self.path)]
    }

    fn on_error(&self) -> Option<FailurePolicy> {
        Some(self.on_error)
    }

    fn check(&self, cx: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        if self.max_record_bytes == 0 {
            return Err(ConfigProblem::field(
                "max_record_bytes",
                "max_record_bytes must be at least 1",
            ));
        }
        let path = cx.path(&self.path);
        if !path.is_file() {
            return Err(ConfigProblem::field(
                "path",
                format!("source file {} does not exist", shown(&self.path, &path)),
            ));
        }
        if self.format == FileFormat::Lines {
            fields_need_format(
                &self.key_field,
                &self.timestamp_field,
                "json_lines",
                "plain lines have no fields",
            )?;
        }
        Ok(())
    }

    fn endpoint(&self, cx: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSource> {
        let path = cx.path(&self.path);
        let (format, key, ts, rate) = (
            self.format,
            self.key_field.clone(),
            self.timestamp_field.clone(),
            self.rate,
        );
        Endpoint {
            name: name.to_owned(),
            description: format!("file `{}` ({})", self.path, serde_plain(&format)),
            open: Box::new(move |_| {
                Ok(Box::new(FileSource::open(&path, format, key, ts)?.with_rate(rate)) as _)
            }),
        }
    }
}

/// The `file` sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSinkSpec {
    /// The file, relative to the manifest's folder.
    pub path: ConfigString,
    /// `text` (`key<TAB>value`, default), `value` or `json`.
    #[serde(default)]
    pub format: SinkFormat,
    /// Append to the file instead of truncating it at start.
    #[serde(default)]
    pub append: bool,
}

impl SinkConfig for FileSinkSpec {
    fn config_strings(&mut self) -> ConfigStrings<'_> {
        vec![("path", &mut self.path)]
    }

    fn check(&self, cx: &ConnectorContext<'_>) -> Result<(), ConfigProblem> {
        let path = cx.path(&self.path);
        let parent = path.parent().filter(|p| !p.as_os_str().is_empty());
        match parent.filter(|d| !d.is_dir()) {
            Some(dir) => Err(ConfigProblem::field(
                "path",
                format!(
                    "the folder of sink file {} does not exist",
                    shown(&self.path, dir)
                ),
            )),
            None => Ok(()),
        }
    }

    fn endpoint(&self, cx: &ConnectorContext<'_>, name: &str) -> Endpoint<OpenSink> {
        let (path, format, append) = (cx.path(&self.path), self.format, self.append);
        Endpoint {
            name: name.to_owned(),
            description: format!("file `{}` ({})", self.path, serde_plain(&format)),
            open: Box::new(move |_| Ok(Box::new(FileSink::create(&path, format, append)?) as _)),
        }
    }
}
