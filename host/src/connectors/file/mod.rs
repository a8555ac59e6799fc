//! The `file` source and sink: lines or JSON lines in, text lines out.

mod config;
mod sink;
mod source;

pub use config::{FileSinkSpec, FileSourceSpec};
pub use sink::FileSink;
pub use source::{FileFormat, FileSource};
