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

/// The offset of `key = …` in the table that starts at `table.start` (the
/// table runs to the next table header), or the table's start when the key
/// is not written there (a default).
pub fn key_offset(text: &str, table: &Range<usize>, key: &str) -> usize {
    let start = text.floor_char_boundary(table.start.min(text.len()));
    let mut offset = start;
    for (i, line) in text[start..].split_inclusive('\n').enumerate() {
        let trimmed = line.trim_start();
        if i > 0 && trimmed.starts_with('[') {
            break;
        }
        if let Some(rest) = trimmed.strip_prefix(key)
            && rest.trim_start().starts_with('=')
        {
            return offset + (line.len() - trimmed.len());
        }
        offset += line.len();
    }
    start
}

/// Where a serde error inside the table spanning `table` really is: serde
/// reports errors inside a tagged table at the table's start, but the
/// message names the unknown field or quotes the bad value, which can be
/// found inside the table.
pub fn refine_offset(text: &str, table: &Range<usize>, message: &str) -> usize {
    if let Some(field) = message
        .strip_prefix("unknown field `")
        .and_then(|r| r.split('`').next())
    {
        return key_offset(text, table, field);
    }
    let variant = message
        .strip_prefix("unknown variant `")
        .and_then(|r| r.split('`').next())
        .map(|v| format!("\"{v}\""));
    let quoted = ["invalid value: string ", "invalid type: string "]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|r| r.get(..r.find("\", ")? + 1))
        .map(str::to_owned)
        .or(variant);
    if let Some(value) = quoted {
        let start = text.floor_char_boundary(table.start.min(text.len()));
        let region_end = text[start..]
            .match_indices("\n[")
            .next()
            .map_or(text.len(), |(i, _)| start + i);
        if let Some(i) = text[start..region_end].find(&value) {
            return start + i;
        }
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
    fn serde_errors_inside_a_table_point_at_the_field_or_value() {
        let text = "[[op]]\ntype = \"map\"\nplugn = 1\ntimeout = \"soon\"\n[sink]\nx = \"soon\"\n";
        let table = 0..6;
        let at = |m: &str| line_column(text, refine_offset(text, &table, m));
        assert_eq!(at("unknown field `plugn`, expected one of"), (3, 1));
        assert_eq!(at("invalid value: string \"soon\", expected a duration"), (4, 11));
        assert_eq!(at("missing field `plugin`"), (1, 1));
        assert_eq!(at("unknown variant `map`, expected `filter`"), (2, 8));
    }

    #[test]
    fn keys_are_found_inside_their_table() {
        let text = "[a]\nx = 1\n[b]\n  x = 2\n";
        let b = text.find("[b]").unwrap()..text.find("[b]").unwrap() + 3;
        assert_eq!(line_column(text, key_offset(text, &b, "x")), (4, 3));
        assert_eq!(key_offset(text, &b, "missing"), b.start);
        let a = 0..3;
        assert_eq!(key_offset(text, &a, "x"), 4, "the first table's own key");
    }
}
