//! Range reads of history for paged clients (seed 003 "分页读取会话历史"): turns one at
//! a time by position, item metadata without bodies, and item bodies streamed in chunks
//! through SQLite's incremental blob I/O, so serving a page never loads the whole
//! history nor a whole large item.

use rusqlite::{params, OptionalExtension, MAIN_DB};
use std::io::Read;

use crate::error::{Result, StoreError};
use crate::rows::TurnRow;
use crate::sql::{values, Dialect, Ops, Value};
use crate::store::{Store, Tx};
use crate::util::{get, get_u64};

/// Bodies up to this many bytes are inspected with SQL (`json_extract`); larger ones
/// are only ever streamed.
pub const SMALL_BODY_BYTES: u64 = 64 * 1024;

/// What paging needs to know of an item without reading its body.
#[derive(Debug, Clone, PartialEq)]
pub struct ItemHead {
    /// Item id.
    pub id: String,
    /// Item type (`user_message`, `tool_call`, …).
    pub item_type: String,
    /// Item status.
    pub status: Option<String>,
    /// Thread-wide sequence number.
    pub seq: u64,
    /// Size of the stored body JSON, in bytes.
    pub len: u64,
    /// `terminal` of the body (false when the body is larger than
    /// [`SMALL_BODY_BYTES`]: read it from the stream).
    pub terminal: bool,
    /// `name` of the body (tool name), for small bodies.
    pub name: Option<String>,
    /// True when the body carries `images` or `files`, for small bodies.
    pub attachments: bool,
    /// True when the body is larger than [`SMALL_BODY_BYTES`] (the fields above were not
    /// read).
    pub large: bool,
}

pub(crate) const TURN_COLS: &str = "thread_id, id, kind, status, provider, model, error, \
    started_at_ms, completed_at_ms, answer_ready_at_ms, input_tokens, output_tokens, \
    cache_read_tokens, cache_creation_tokens, finish_reason, stop_reason, truncated, extra";

/// Paging fields of a small item body (`terminal`, `name`, whether it carries `images`
/// or `files`), as the SQLite statement of [`Tx::item_heads`] reads them with SQL.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn small_body_fields(body: &str) -> (bool, Option<String>, bool) {
    let Ok(serde_json::Value::Object(obj)) = serde_json::from_str::<serde_json::Value>(body) else {
        return (false, None, false);
    };
    let terminal = match obj.get("terminal") {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        _ => false,
    };
    let name = obj.get("name").and_then(|n| n.as_str()).map(String::from);
    let attachments = obj.contains_key("images") || obj.contains_key("files");
    (terminal, name, attachments)
}

/// Bytes from lowercase or uppercase hex text (PostgreSQL's `encode(…, 'hex')`).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
fn unhex(text: &str) -> std::result::Result<Vec<u8>, String> {
    let digits = text.as_bytes();
    if !digits.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(|| "not hex".to_string())
        })
        .collect()
}

// The PostgreSQL paths; SQLite's `Tx` keeps its cached statements and blob reads.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Ops<'_> {
    /// See [`Tx::turn_ordinal`].
    pub(crate) fn turn_ordinal(&self, thread_id: &str, turn_id: &str) -> Result<Option<i64>> {
        let rows = self.conn.rows(
            "SELECT ordinal FROM turns WHERE thread_id = ?1 AND id = ?2",
            &values![thread_id, turn_id],
        )?;
        rows.first()
            .map(|r| get(r, 0, "turns", turn_id))
            .transpose()
    }

    /// See [`Tx::turn_before`].
    pub(crate) fn turn_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
    ) -> Result<Option<(i64, TurnRow)>> {
        let rows = self.conn.rows(
            &format!(
                "SELECT {TURN_COLS}, ordinal FROM turns WHERE thread_id = ?1 AND ordinal < ?2 \
                 ORDER BY ordinal DESC LIMIT 1"
            ),
            &values![thread_id, before.unwrap_or(i64::MAX)],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let turn = crate::history::turn_from_cells(row)?;
        let ordinal: i64 = get(row, 18, "turns", &turn.id)?;
        Ok(Some((ordinal, turn)))
    }

    /// See [`Tx::item_heads`]: small bodies are read and their paging fields decoded
    /// here, large ones are not read.
    pub(crate) fn item_heads(&self, thread_id: &str, turn_id: &str) -> Result<Vec<ItemHead>> {
        let rows = self.conn.rows(
            "SELECT id, item_type, status, seq, octet_length(body), \
             CASE WHEN octet_length(body) <= ?3 THEN body END \
             FROM items WHERE thread_id = ?1 AND turn_id = ?2 ORDER BY seq",
            &values![thread_id, turn_id, SMALL_BODY_BYTES as i64],
        )?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: String = get(row, 0, "items", turn_id)?;
            let k = format!("{thread_id}/{id}");
            let len = get_u64(row, 4, "items", &k)?;
            let body: Option<String> = get(row, 5, "items", &k)?;
            let (terminal, name, attachments) = body
                .as_deref()
                .map(small_body_fields)
                .unwrap_or((false, None, false));
            out.push(ItemHead {
                item_type: get(row, 1, "items", &k)?,
                status: get(row, 2, "items", &k)?,
                seq: get_u64(row, 3, "items", &k)?,
                len,
                terminal,
                name,
                attachments,
                large: len > SMALL_BODY_BYTES,
                id,
            });
        }
        Ok(out)
    }

    /// See [`Tx::item_locator`].
    pub(crate) fn item_locator(
        &self,
        thread_id: &str,
        item_id: &str,
    ) -> Result<Option<(String, u64)>> {
        let rows = self.conn.rows(
            "SELECT turn_id, octet_length(body) FROM items WHERE thread_id = ?1 AND id = ?2",
            &values![thread_id, item_id],
        )?;
        let k = format!("{thread_id}/{item_id}");
        rows.first()
            .map(|r| Ok((get(r, 0, "items", &k)?, get_u64(r, 1, "items", &k)?)))
            .transpose()
    }

    /// See [`Tx::item_body_range`]: the slice is cut by the database, the body is not
    /// sent whole.
    pub(crate) fn item_body_range(
        &self,
        thread_id: &str,
        item_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        let sql = match self.conn.dialect() {
            Dialect::Sqlite => {
                "SELECT CAST(substr(CAST(body AS BLOB), ?3, ?4) AS BLOB), octet_length(body) \
                 FROM items WHERE thread_id = ?1 AND id = ?2"
            }
            Dialect::Postgres => {
                "SELECT encode(substring(textsend(body) FROM CAST(?3 AS INTEGER) \
                 FOR CAST(?4 AS INTEGER)), 'hex'), octet_length(body) \
                 FROM items WHERE thread_id = ?1 AND id = ?2"
            }
        };
        // Stored values are far below 2 GiB on both backends: positions past that are
        // past the end.
        let start = offset.saturating_add(1).min(i32::MAX as u64) as i64;
        let count = len.min(i32::MAX as usize) as i64;
        let rows = self.conn.rows(
            sql,
            &[
                Value::from(thread_id),
                Value::from(item_id),
                Value::Int(start),
                Value::Int(count),
            ],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let k = format!("items[{thread_id}/{item_id}].body");
        let total = get_u64(row, 1, "items", &k)?;
        let bytes = match crate::sql::Cells::cell(row, 0).map_err(|e| StoreError::corrupt(&k, e))? {
            Value::Blob(b) => b,
            Value::Text(t) if self.conn.dialect() == Dialect::Postgres => {
                unhex(&t).map_err(|e| StoreError::corrupt(&k, e))?
            }
            Value::Text(t) => t.into_bytes(),
            Value::Null => Vec::new(),
            other => return Err(StoreError::corrupt(&k, format!("unexpected {other:?}"))),
        };
        Ok(Some((bytes, total)))
    }

    /// See [`Tx::stream_item_body`]: the body is read in `chunk`-byte ranges.
    pub(crate) fn stream_item_body(
        &self,
        thread_id: &str,
        item_id: &str,
        chunk: usize,
        mut f: impl FnMut(&[u8]),
    ) -> Result<bool> {
        let chunk = chunk.max(1);
        let mut offset = 0u64;
        loop {
            let Some((bytes, total)) = self.item_body_range(thread_id, item_id, offset, chunk)?
            else {
                return Ok(offset > 0);
            };
            if bytes.is_empty() {
                return Ok(true);
            }
            f(&bytes);
            offset += bytes.len() as u64;
            if offset >= total {
                return Ok(true);
            }
        }
    }
}

impl Tx<'_> {
    /// Position (`ordinal`, 1-based insertion order) of a turn; `None` when missing.
    pub fn turn_ordinal(&self, thread_id: &str, turn_id: &str) -> Result<Option<i64>> {
        let Some(conn) = self.lite else {
            return self.ops().turn_ordinal(thread_id, turn_id);
        };
        Ok(conn
            .query_row(
                "SELECT ordinal FROM turns WHERE thread_id = ?1 AND id = ?2",
                [thread_id, turn_id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The newest turn whose ordinal is below `before` (the newest turn when `None`),
    /// with its ordinal.
    pub fn turn_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
    ) -> Result<Option<(i64, TurnRow)>> {
        let Some(conn) = self.lite else {
            return self.ops().turn_before(thread_id, before);
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {TURN_COLS}, ordinal FROM turns WHERE thread_id = ?1 AND ordinal < ?2 \
             ORDER BY ordinal DESC LIMIT 1"
        ))?;
        let mut rows = stmt.query(params![thread_id, before.unwrap_or(i64::MAX)])?;
        match rows.next()? {
            Some(row) => {
                let turn = crate::history::turn_from_cells(row)?;
                let ordinal: i64 = get(row, 18, "turns", &turn.id)?;
                Ok(Some((ordinal, turn)))
            }
            None => Ok(None),
        }
    }

    /// Metadata of the items of one turn, in `seq` order, without their bodies.
    pub fn item_heads(&self, thread_id: &str, turn_id: &str) -> Result<Vec<ItemHead>> {
        let Some(conn) = self.lite else {
            return self.ops().item_heads(thread_id, turn_id);
        };
        let mut stmt = conn.prepare_cached(
            "SELECT id, item_type, status, seq, octet_length(body) AS n, \
             CASE WHEN octet_length(body) <= ?3 AND json_valid(body) THEN coalesce(json_extract(body, '$.terminal'), 0) ELSE 0 END, \
             CASE WHEN octet_length(body) <= ?3 AND json_valid(body) THEN json_extract(body, '$.name') END, \
             CASE WHEN octet_length(body) <= ?3 AND json_valid(body) THEN \
               json_type(body, '$.images') IS NOT NULL OR json_type(body, '$.files') IS NOT NULL \
             ELSE 0 END \
             FROM items WHERE thread_id = ?1 AND turn_id = ?2 ORDER BY seq",
        )?;
        let mut rows = stmt.query(params![thread_id, turn_id, SMALL_BODY_BYTES as i64])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let id: String = get(row, 0, "items", turn_id)?;
            let k = format!("{thread_id}/{id}");
            let len = get_u64(row, 4, "items", &k)?;
            let name: Option<String> = row.get(6).ok().flatten();
            out.push(ItemHead {
                item_type: get(row, 1, "items", &k)?,
                status: get(row, 2, "items", &k)?,
                seq: get_u64(row, 3, "items", &k)?,
                len,
                terminal: row.get::<_, i64>(5).unwrap_or(0) != 0,
                name,
                attachments: row.get::<_, i64>(7).unwrap_or(0) != 0,
                large: len > SMALL_BODY_BYTES,
                id,
            });
        }
        Ok(out)
    }

    /// Streams the stored body of an item in chunks of at most `chunk` bytes to `f`,
    /// without loading it whole. `Ok(false)` when the item does not exist.
    pub fn stream_item_body(
        &self,
        thread_id: &str,
        item_id: &str,
        chunk: usize,
        mut f: impl FnMut(&[u8]),
    ) -> Result<bool> {
        let Some(conn) = self.lite else {
            return self.ops().stream_item_body(thread_id, item_id, chunk, f);
        };
        let Some(rowid) = self.item_rowid(thread_id, item_id)? else {
            return Ok(false);
        };
        let mut blob = conn.blob_open(MAIN_DB, "items", "body", rowid, true)?;
        let mut buf = vec![0u8; chunk.max(1)];
        loop {
            let n = blob.read(&mut buf).map_err(|e| {
                StoreError::corrupt(format!("items[{thread_id}/{item_id}].body"), e)
            })?;
            if n == 0 {
                return Ok(true);
            }
            f(&buf[..n]);
        }
    }

    /// Bytes `[offset, offset + len)` of an item's stored body (shorter at the end) and
    /// the body's total size. `None` when the item does not exist.
    pub fn item_body_range(
        &self,
        thread_id: &str,
        item_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        let Some(conn) = self.lite else {
            return self.ops().item_body_range(thread_id, item_id, offset, len);
        };
        let Some(rowid) = self.item_rowid(thread_id, item_id)? else {
            return Ok(None);
        };
        let blob = conn.blob_open(MAIN_DB, "items", "body", rowid, true)?;
        let total = blob.len() as u64;
        if offset >= total {
            return Ok(Some((vec![], total)));
        }
        let n = len.min((total - offset) as usize);
        let mut buf = vec![0u8; n];
        blob.read_at_exact(&mut buf, offset as usize)?;
        Ok(Some((buf, total)))
    }

    /// Turn and size of an item. `None` when missing.
    pub fn item_locator(&self, thread_id: &str, item_id: &str) -> Result<Option<(String, u64)>> {
        let Some(conn) = self.lite else {
            return self.ops().item_locator(thread_id, item_id);
        };
        let found: Option<(String, i64)> = conn
            .query_row(
                "SELECT turn_id, rowid FROM items WHERE thread_id = ?1 AND id = ?2",
                [thread_id, item_id],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        let Some((turn, rowid)) = found else {
            return Ok(None);
        };
        // The blob handle knows the size from the record header: the body is not read.
        let blob = conn.blob_open(MAIN_DB, "items", "body", rowid, true)?;
        Ok(Some((turn, blob.len() as u64)))
    }

    fn item_rowid(&self, thread_id: &str, item_id: &str) -> Result<Option<i64>> {
        let conn = self.lite_conn()?;
        Ok(conn
            .query_row(
                "SELECT rowid FROM items WHERE thread_id = ?1 AND id = ?2",
                [thread_id, item_id],
                |r| r.get(0),
            )
            .optional()?)
    }
}

impl Store {
    /// See [`Tx::turn_ordinal`].
    pub fn turn_ordinal(&self, thread_id: &str, turn_id: &str) -> Result<Option<i64>> {
        self.read(|tx| tx.turn_ordinal(thread_id, turn_id))
    }

    /// See [`Tx::turn_before`].
    pub fn turn_before(
        &self,
        thread_id: &str,
        before: Option<i64>,
    ) -> Result<Option<(i64, TurnRow)>> {
        self.read(|tx| tx.turn_before(thread_id, before))
    }

    /// See [`Tx::item_heads`].
    pub fn item_heads(&self, thread_id: &str, turn_id: &str) -> Result<Vec<ItemHead>> {
        self.read(|tx| tx.item_heads(thread_id, turn_id))
    }

    /// See [`Tx::stream_item_body`].
    pub fn stream_item_body(
        &self,
        thread_id: &str,
        item_id: &str,
        chunk: usize,
        f: impl FnMut(&[u8]),
    ) -> Result<bool> {
        self.read(|tx| tx.stream_item_body(thread_id, item_id, chunk, f))
    }

    /// See [`Tx::item_body_range`].
    pub fn item_body_range(
        &self,
        thread_id: &str,
        item_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        self.read(|tx| tx.item_body_range(thread_id, item_id, offset, len))
    }

    /// See [`Tx::item_locator`].
    pub fn item_locator(&self, thread_id: &str, item_id: &str) -> Result<Option<(String, u64)>> {
        self.read(|tx| tx.item_locator(thread_id, item_id))
    }

    /// Sets an automatic title: only when the thread has no title and its revision is
    /// still `expected_revision` (a manual rename in between wins). The new revision is
    /// `expected_revision + 1`; `updated_at_ms` is not touched. Returns the row after the
    /// attempt and whether the title was written.
    pub fn set_title_if_empty(
        &mut self,
        id: &str,
        title: &str,
        expected_revision: u64,
    ) -> Result<(Option<crate::ThreadRow>, bool)> {
        self.transaction(|tx| tx.ops().set_title_if_empty(id, title, expected_revision))
    }
}
