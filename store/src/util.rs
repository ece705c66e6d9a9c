//! Small helpers shared by the row modules.

use rusqlite::types::ToSqlOutput;
use rusqlite::{Row, ToSql};
use serde_json::Value;

use crate::error::{Result, StoreError};
use crate::sql::{Cells, FromValue, Value as SqlValue};

/// Now as Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// JSON text of a value (serializing a `Value` cannot fail).
pub(crate) fn json_text(v: &Value) -> String {
    filtered(v.to_string())
}

/// A text filter every JSON column, title and preview passes through before it is
/// written (the host's secret redactor). Returns `Some(new)` to replace the text.
pub type TextFilter = fn(&str) -> Option<String>;

static TEXT_FILTER: std::sync::OnceLock<TextFilter> = std::sync::OnceLock::new();

/// Installs the [`TextFilter`] (once per process; later calls are ignored and return
/// false). Rows written before it was installed are not rewritten.
pub fn set_text_filter(f: TextFilter) -> bool {
    TEXT_FILTER.set(f).is_ok()
}

/// `text` through the installed [`TextFilter`].
pub(crate) fn filtered(text: String) -> String {
    match TEXT_FILTER.get().and_then(|f| f(&text)) {
        Some(t) => t,
        None => text,
    }
}

/// Reads column `idx`; a type/NULL mismatch becomes [`StoreError::Corrupt`] naming
/// `table[key].column`.
pub(crate) fn get<T: FromValue>(
    row: &(impl Cells + ?Sized),
    idx: usize,
    table: &str,
    key: &str,
) -> Result<T> {
    row.cell(idx).and_then(T::from_value).map_err(|e| {
        let col = row.column_name(idx);
        StoreError::corrupt(format!("{table}[{key}].{col}"), e)
    })
}

/// A `u64` as SQLite's signed 64-bit integer: values above `i64::MAX` fail to bind,
/// negative stored values fail to read (both as errors, never wrapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct U64(pub u64);

impl ToSql for U64 {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        i64::try_from(self.0)
            .map(ToSqlOutput::from)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
    }
}

impl rusqlite::types::FromSql for U64 {
    fn column_result(value: rusqlite::types::ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        let i = i64::column_result(value)?;
        u64::try_from(i)
            .map(U64)
            .map_err(|_| rusqlite::types::FromSqlError::OutOfRange(i))
    }
}

impl FromValue for U64 {
    fn from_value(v: SqlValue) -> std::result::Result<Self, String> {
        let i = i64::from_value(v)?;
        u64::try_from(i)
            .map(U64)
            .map_err(|_| format!("integer {i} out of range"))
    }
}

impl U64 {
    /// As a [`crate::sql::Value`]; an error when above `i64::MAX`.
    pub(crate) fn value(self) -> Result<SqlValue> {
        i64::try_from(self.0).map(SqlValue::Int).map_err(|_| {
            StoreError::Invalid(format!("{} does not fit a signed 64-bit integer", self.0))
        })
    }
}

/// Reads a non-negative integer column as `u64`.
pub(crate) fn get_u64(
    row: &(impl Cells + ?Sized),
    idx: usize,
    table: &str,
    key: &str,
) -> Result<u64> {
    get::<U64>(row, idx, table, key).map(|v| v.0)
}

/// Reads a JSON text column.
pub(crate) fn get_json(
    row: &(impl Cells + ?Sized),
    idx: usize,
    table: &str,
    key: &str,
) -> Result<Value> {
    let text: String = get(row, idx, table, key)?;
    parse_json(&text, row, idx, table, key)
}

/// Reads a nullable JSON text column.
pub(crate) fn get_json_opt(
    row: &(impl Cells + ?Sized),
    idx: usize,
    table: &str,
    key: &str,
) -> Result<Option<Value>> {
    let text: Option<String> = get(row, idx, table, key)?;
    text.map(|t| parse_json(&t, row, idx, table, key))
        .transpose()
}

fn parse_json(
    text: &str,
    row: &(impl Cells + ?Sized),
    idx: usize,
    table: &str,
    key: &str,
) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| {
        let col = row.column_name(idx);
        StoreError::corrupt(format!("{table}[{key}].{col}"), format!("bad JSON: {e}"))
    })
}

/// Case-insensitive (Unicode lower-case) substring search. `needle_lower` must already be
/// lower-cased and non-empty. Returns the hit as a character range of `haystack`.
pub(crate) fn find_ci(haystack: &str, needle_lower: &str) -> Option<(usize, usize)> {
    if needle_lower.is_empty() {
        return None;
    }
    let mut lowered = String::with_capacity(haystack.len());
    // byte offset in `lowered` -> char index in `haystack`
    let mut origin: Vec<usize> = Vec::with_capacity(haystack.len());
    for (ci, ch) in haystack.chars().enumerate() {
        for lc in ch.to_lowercase() {
            lowered.push(lc);
            origin.extend(std::iter::repeat_n(ci, lc.len_utf8()));
        }
    }
    let start = lowered.find(needle_lower)?;
    let end = start + needle_lower.len();
    Some((origin[start], origin[end - 1] + 1))
}

/// At most `max` characters of `text` around the character range `[start, end)`, with
/// line breaks and tabs folded to spaces.
pub(crate) fn snippet(text: &str, start: usize, end: usize, max: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let len = chars.len();
    let hit = end.saturating_sub(start);
    let (from, to) = if hit >= max {
        (start, start + max)
    } else {
        let before = (max - hit) / 2;
        let from = start.saturating_sub(before);
        let to = (from + max).min(len);
        (to.saturating_sub(max).min(from), to)
    };
    chars[from.min(len)..to.min(len)]
        .iter()
        .map(|&c| {
            if matches!(c, '\n' | '\r' | '\t') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// `conn.query_row(sql, params, f)` through the connection's prepared-statement cache:
/// the statement is compiled once per connection, not on every call.
pub(crate) fn query_row<T, P, F>(
    conn: &rusqlite::Connection,
    sql: &str,
    params: P,
    f: F,
) -> rusqlite::Result<T>
where
    P: rusqlite::Params,
    F: FnOnce(&Row<'_>) -> rusqlite::Result<T>,
{
    conn.prepare_cached(sql)?.query_row(params, f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_ci_maps_back_to_original_chars() {
        assert_eq!(find_ci("Hello WORLD", "world"), Some((6, 11)));
        assert_eq!(find_ci("Straße ÄPFEL", "äpfel"), Some((7, 12)));
        assert_eq!(find_ci("你好世界", "世界"), Some((2, 4)));
        assert_eq!(find_ci("abc", "x"), None);
    }

    #[test]
    fn snippet_is_bounded_and_centered() {
        let text = format!("{}needle{}", "a".repeat(500), "b".repeat(500));
        let (s, e) = find_ci(&text, "needle").unwrap();
        let snip = snippet(&text, s, e, 160);
        assert_eq!(snip.chars().count(), 160);
        assert!(snip.contains("needle"));
        assert_eq!(snippet("short\ntext", 0, 5, 160), "short text");
        // hit at the very end keeps the full budget before it
        let text = format!("{}end", "x".repeat(300));
        let (s, e) = find_ci(&text, "end").unwrap();
        let snip = snippet(&text, s, e, 160);
        assert_eq!(snip.chars().count(), 160);
        assert!(snip.ends_with("end"));
    }
}
