//! The backend seam: the row logic that runs unchanged on SQLite (rusqlite) and, with
//! the `postgres` feature, on PostgreSQL (libpq, see `pg`).
//!
//! A [`Conn`] executes SQL written in the subset both dialects share, with `?N`
//! placeholders (rewritten to `$N` for PostgreSQL) and [`Value`] parameters; rows come
//! back as [`ValueRow`]s. Decoding goes through [`Cells`], implemented both for
//! rusqlite's borrowed rows (the SQLite hot paths keep their cached statements and
//! in-place reads) and for owned [`ValueRow`]s. SQLite functions the shared SQL uses
//! (`json_valid`, `json_type`, `json_set`, `json_insert` on `$.key` paths) exist on
//! PostgreSQL as functions its schema defines (`pg/schema.rs`). README: "Several hosts,
//! one database".

use std::rc::Rc;

use rusqlite::types::ValueRef;

use crate::error::{Result, StoreError};

/// One SQL value, as both backends bind and return it. Booleans are integers 0/1, as
/// SQLite stores them; timestamps are Unix milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
    Blob(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::Text(s.to_string())
    }
}

impl From<&String> for Value {
    fn from(s: &String) -> Value {
        Value::Text(s.clone())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Value {
        Value::Text(s)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Value {
        Value::Int(i)
    }
}

impl From<u32> for Value {
    fn from(i: u32) -> Value {
        Value::Int(i64::from(i))
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Value {
        Value::Int(i64::from(b))
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}

impl From<&Option<String>> for Value {
    fn from(v: &Option<String>) -> Value {
        v.as_ref().map_or(Value::Null, |s| Value::Text(s.clone()))
    }
}

impl From<&Option<i64>> for Value {
    fn from(v: &Option<i64>) -> Value {
        v.map_or(Value::Null, Value::Int)
    }
}

/// `[Value]` from a list of expressions that convert into [`Value`].
macro_rules! values {
    ($($v:expr),* $(,)?) => { [$($crate::sql::Value::from($v)),*] };
}
pub(crate) use values;

/// Which SQL dialect a [`Conn`] speaks, for the few statements that differ (locks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    Postgres,
}

/// A connection the shared row logic runs on (inside a transaction its owner opened).
pub(crate) trait Conn {
    /// The dialect, for the statements that differ.
    fn dialect(&self) -> Dialect;
    /// Runs one statement; returns the number of rows it changed.
    fn exec(&self, sql: &str, params: &[Value]) -> Result<usize>;
    /// Runs one query; returns all its rows.
    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<ValueRow>>;
}

/// The shared row logic bound to one connection inside an open transaction (the
/// backend-neutral counterpart of [`crate::Tx`]).
pub(crate) struct Ops<'c> {
    pub(crate) conn: &'c dyn Conn,
    /// Heartbeat age (ms) after which another lease owner counts as dead.
    pub(crate) lease_stale_ms: i64,
}

/// One owned result row, with its query's column names.
#[derive(Debug, Clone)]
pub(crate) struct ValueRow {
    pub(crate) names: Rc<[String]>,
    pub(crate) cells: Vec<Value>,
}

/// A row whose cells can be read by index: rusqlite's borrowed rows and [`ValueRow`].
pub(crate) trait Cells {
    /// The cell at `idx`; an error text when out of range.
    fn cell(&self, idx: usize) -> std::result::Result<Value, String>;
    /// Name of column `idx` (`?` when unknown).
    fn column_name(&self, idx: usize) -> String;
}

impl Cells for rusqlite::Row<'_> {
    fn cell(&self, idx: usize) -> std::result::Result<Value, String> {
        let v = self.get_ref(idx).map_err(|e| e.to_string())?;
        Ok(match v {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(i) => Value::Int(i),
            ValueRef::Real(f) => Value::Real(f),
            ValueRef::Text(t) => Value::Text(
                std::str::from_utf8(t)
                    .map_err(|e| format!("text is not UTF-8: {e}"))?
                    .to_string(),
            ),
            ValueRef::Blob(b) => Value::Blob(b.to_vec()),
        })
    }

    fn column_name(&self, idx: usize) -> String {
        self.as_ref().column_name(idx).unwrap_or("?").to_string()
    }
}

impl Cells for ValueRow {
    fn cell(&self, idx: usize) -> std::result::Result<Value, String> {
        self.cells
            .get(idx)
            .cloned()
            .ok_or_else(|| format!("no column {idx}"))
    }

    fn column_name(&self, idx: usize) -> String {
        self.names.get(idx).cloned().unwrap_or_else(|| "?".into())
    }
}

/// A Rust type a cell decodes into; a mismatch is an error text (the caller names the
/// row in a [`StoreError::Corrupt`]).
pub(crate) trait FromValue: Sized {
    fn from_value(v: Value) -> std::result::Result<Self, String>;
}

fn mismatch(want: &str, v: &Value) -> String {
    format!("expected {want}, found {}", v.kind())
}

impl FromValue for String {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Text(s) => Ok(s),
            other => Err(mismatch("text", &other)),
        }
    }
}

impl FromValue for i64 {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Int(i) => Ok(i),
            other => Err(mismatch("integer", &other)),
        }
    }
}

impl FromValue for u32 {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        let i = i64::from_value(v)?;
        u32::try_from(i).map_err(|_| format!("integer {i} out of range"))
    }
}

impl FromValue for bool {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        i64::from_value(v).map(|i| i != 0)
    }
}

impl FromValue for f64 {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Real(f) => Ok(f),
            Value::Int(i) => Ok(i as f64),
            other => Err(mismatch("real", &other)),
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(v: Value) -> std::result::Result<Self, String> {
        match v {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// `sql` with SQLite's `?N` placeholders as PostgreSQL's `$N` (outside quoted text).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn dollar_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == '?' && !quoted && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

impl Conn for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn exec(&self, sql: &str, params: &[Value]) -> Result<usize> {
        Ok(self
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params.iter()))?)
    }

    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<ValueRow>> {
        let mut stmt = self.prepare_cached(sql)?;
        let names: Rc<[String]> = stmt.column_names().map(String::from).collect();
        let width = names.len();
        let mut rows = stmt.query(rusqlite::params_from_iter(params.iter()))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let cells = (0..width)
                .map(|i| row.cell(i))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| StoreError::corrupt("row", e))?;
            out.push(ValueRow {
                names: names.clone(),
                cells,
            });
        }
        Ok(out)
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::ToSqlOutput::Borrowed;
        Ok(match self {
            Value::Null => Borrowed(ValueRef::Null),
            Value::Int(i) => Borrowed(ValueRef::Integer(*i)),
            Value::Real(f) => Borrowed(ValueRef::Real(*f)),
            Value::Text(s) => Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Blob(b) => Borrowed(ValueRef::Blob(b)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_rewritten_outside_quotes() {
        assert_eq!(
            dollar_placeholders("SELECT ?1, '?2', x FROM t WHERE a = ?12 AND b = ?"),
            "SELECT $1, '?2', x FROM t WHERE a = $12 AND b = ?"
        );
    }
}
