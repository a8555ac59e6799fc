//! Manifest errors, located by file, line and column.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

/// A problem in a manifest: where it is, what is wrong, what was expected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// The manifest file.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in characters).
    pub column: usize,
    /// What is wrong and what was expected.
    pub message: String,
}

impl ManifestError {
    /// An error at byte `offset` of `text`, the content of `file`.
    pub fn at(file: &Path, text: &str, offset: usize, message: impl Into<String>) -> Self {
        let (line, column) = line_column(text, offset);
        Self {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: {}",
            self.file.display(),
            self.line,
            self.column,
            self.message
        )
    }
}

impl std::error::Error for ManifestError {}

/// 1-based line and column of byte `offset` in `text`.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

/// The offset of `key = …` inside the table spanning `table`, or the table's
/// start when the key is not written there (a default).
pub fn key_offset(text: &str, table: &Range<usize>, key: &str) -> usize {
    let end = table.end.min(text.len());
    let body = &text[table.start..end];
    let mut offset = table.start;
    for line in body.split_inclusive('\n') {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return offset + (line.len() - trimmed.len());
        }
        offset += line.len();
    }
    table.start
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\n  bé = 2\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 8), (2, 3));
        assert_eq!(line_column(text, text.len()), (3, 1));
    }

    #[test]
    fn keys_are_found_inside_their_table() {
        let text = "[a]\nx = 1\n[b]\n  x = 2\n";
        let b = text.find("[b]").unwrap()..text.len();
        assert_eq!(line_column(text, key_offset(text, &b, "x")), (4, 3));
        assert_eq!(key_offset(text, &b, "missing"), b.start);
    }
}
