//! Threads (conversations): CRUD, titles, archive, delete, listing, search.

use rusqlite::types::ValueRef;
use rusqlite::{params, Row};

use crate::error::{Result, StoreError};
use crate::rows::{DeleteOutcome, SearchHit, ThreadFilter, ThreadRow, ThreadView};
use crate::sql::{values, Cells, Ops, Value};
use crate::store::Tx;
use crate::util::{filtered, find_ci, get, get_json, get_u64, json_text, snippet, U64};

/// Conversations (newest first) whose messages a search reads directly before it asks
/// the text index for candidates.
const DIRECT_SEARCH_THREADS: usize = 32;

/// Maximum snippet length of a search hit, in characters.
pub const SNIPPET_CHARS: usize = 160;

pub(crate) const THREAD_COLS: &str = "id, cwd, title, title_revision, preview, provider, \
    model, variant, effort, permission_mode, engine_id, archived, archive_reason, \
    forked_from_id, forked_from_turn_id, forked_from_item_id, created_at_ms, \
    updated_at_ms, extra";

pub(crate) fn thread_from_row(row: &(impl Cells + ?Sized)) -> Result<ThreadRow> {
    let id: String = get(row, 0, "threads", "?")?;
    let k = id.as_str();
    let t = "threads";
    // Damaged metadata must not hide the conversation: it reads as `{}`, flagged.
    let (extra, damage) = match get_json(row, 18, t, k) {
        Ok(v) => (v, None),
        Err(e) => {
            log::warn!("thread {k}: {e}");
            (
                serde_json::Value::Object(Default::default()),
                Some(format!(
                    "stored metadata (threads.extra) is not valid JSON: {e}"
                )),
            )
        }
    };
    Ok(ThreadRow {
        cwd: get(row, 1, t, k)?,
        title: get(row, 2, t, k)?,
        title_revision: get_u64(row, 3, t, k)?,
        preview: get(row, 4, t, k)?,
        provider: get(row, 5, t, k)?,
        model: get(row, 6, t, k)?,
        variant: get(row, 7, t, k)?,
        effort: get(row, 8, t, k)?,
        permission_mode: get(row, 9, t, k)?,
        engine_id: get(row, 10, t, k)?,
        archived: get(row, 11, t, k)?,
        archive_reason: get(row, 12, t, k)?,
        forked_from_id: get(row, 13, t, k)?,
        forked_from_turn_id: get(row, 14, t, k)?,
        forked_from_item_id: get(row, 15, t, k)?,
        created_at_ms: get(row, 16, t, k)?,
        updated_at_ms: get(row, 17, t, k)?,
        extra,
        damage,
        id,
    })
}

/// Column `idx` as text, when it is TEXT holding valid UTF-8 (what `String`'s `FromSql`
/// accepts).
fn text_ref<'r>(row: &'r Row<'_>, idx: usize) -> Option<&'r str> {
    match row.get_ref(idx).ok()? {
        ValueRef::Text(b) => std::str::from_utf8(b).ok(),
        _ => None,
    }
}

/// Column `idx` as optional text (what `Option<String>`'s `FromSql` accepts).
fn opt_text_ref<'r>(row: &'r Row<'_>, idx: usize) -> Option<Option<&'r str>> {
    match row.get_ref(idx).ok()? {
        ValueRef::Null => Some(None),
        ValueRef::Text(b) => std::str::from_utf8(b).ok().map(Some),
        _ => None,
    }
}

/// Column `idx` as an integer (what `i64`'s `FromSql` accepts).
fn int_ref(row: &Row<'_>, idx: usize) -> Option<i64> {
    match row.get_ref(idx).ok()? {
        ValueRef::Integer(v) => Some(v),
        _ => None,
    }
}

/// A row of [`THREAD_COLS`] as a view borrowing its text from the row, when every column
/// has exactly what [`thread_from_row`] accepts and `extra` is valid JSON (parsed into
/// `extra`); `None` otherwise, and the caller decodes the row with [`thread_from_row`],
/// which says what is wrong. So both decodings agree on every row they both accept.
fn view_from_row<'r>(row: &'r Row<'_>, extra: &'r mut serde_json::Value) -> Option<ThreadView<'r>> {
    *extra = serde_json::from_str(text_ref(row, 18)?).ok()?;
    Some(ThreadView {
        id: text_ref(row, 0)?,
        cwd: text_ref(row, 1)?,
        title: opt_text_ref(row, 2)?,
        title_revision: u64::try_from(int_ref(row, 3)?).ok()?,
        preview: text_ref(row, 4)?,
        provider: text_ref(row, 5)?,
        model: text_ref(row, 6)?,
        variant: text_ref(row, 7)?,
        effort: text_ref(row, 8)?,
        permission_mode: text_ref(row, 9)?,
        engine_id: text_ref(row, 10)?,
        archived: int_ref(row, 11)? != 0,
        archive_reason: opt_text_ref(row, 12)?,
        forked_from_id: opt_text_ref(row, 13)?,
        forked_from_turn_id: opt_text_ref(row, 14)?,
        forked_from_item_id: opt_text_ref(row, 15)?,
        created_at_ms: int_ref(row, 16)?,
        updated_at_ms: int_ref(row, 17)?,
        extra,
        damage: None,
    })
}

/// The listing query: threads matching `(cwd, archived)` (NULL = any), newest activity
/// first, ties by id.
fn listing_sql() -> String {
    format!(
        "SELECT {THREAD_COLS} FROM threads \
         WHERE (CAST(?1 AS TEXT) IS NULL OR cwd = ?1) \
         AND (CAST(?2 AS INTEGER) IS NULL OR archived = ?2) \
         ORDER BY updated_at_ms DESC, id"
    )
}

#[cfg(test)]
pub(crate) fn workspace_listing_sql_for_tests() -> String {
    workspace_listing_sql()
}

/// [`listing_sql`] for a given cwd and archived flag: the same rows in the same order,
/// read in the order of the `threads_listing` index (no sort).
fn workspace_listing_sql() -> String {
    format!(
        "SELECT {THREAD_COLS} FROM threads \
         WHERE cwd = ?1 AND archived = ?2 \
         ORDER BY updated_at_ms DESC, id"
    )
}

impl Tx<'_> {
    /// See [`crate::Store::visit_threads`].
    pub fn visit_threads(
        &self,
        filter: &ThreadFilter,
        mut visit: impl FnMut(&ThreadView<'_>) -> Result<()>,
    ) -> Result<usize> {
        let Some(conn) = self.lite else {
            return self.ops().visit_threads(filter, visit);
        };
        let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
        let mut visited = 0;
        if limit == 0 {
            return Ok(0);
        }
        let sql = match (&filter.cwd, filter.archived) {
            (Some(_), Some(_)) => workspace_listing_sql(),
            _ => listing_sql(),
        };
        let mut stmt = conn.prepare_cached(&sql)?;
        let mut rows = stmt.query(params![filter.cwd.as_deref(), filter.archived])?;
        let mut extra = serde_json::Value::Null;
        while let Some(row) = rows.next()? {
            match view_from_row(row, &mut extra) {
                Some(view) => visit(&view)?,
                None => match thread_from_row(row) {
                    Ok(t) => visit(&t.view())?,
                    Err(e) => {
                        log::warn!("skipping damaged thread row: {e}");
                        continue;
                    }
                },
            }
            visited += 1;
            if visited >= limit {
                break;
            }
        }
        Ok(visited)
    }

    /// See [`crate::Store::insert_thread`].
    pub fn insert_thread(&self, t: &ThreadRow) -> Result<()> {
        self.ops().insert_thread(t)
    }

    /// See [`crate::Store::get_thread`].
    pub fn get_thread(&self, id: &str) -> Result<Option<ThreadRow>> {
        self.ops().get_thread(id)
    }

    /// See [`crate::Store::update_thread`].
    pub fn update_thread(&self, t: &ThreadRow) -> Result<()> {
        self.ops().update_thread(t)
    }

    /// See [`crate::Store::touch_thread`].
    pub fn touch_thread(&self, id: &str, updated_at_ms: i64) -> Result<()> {
        self.ops().touch_thread(id, updated_at_ms)
    }

    /// See [`crate::Store::set_title`].
    pub fn set_title(
        &self,
        id: &str,
        title: Option<&str>,
        revision: u64,
    ) -> Result<Option<ThreadRow>> {
        self.ops().set_title(id, title, revision)
    }

    /// See [`crate::Store::set_archived`].
    pub fn set_archived(
        &self,
        id: &str,
        archived: bool,
        reason: Option<&str>,
    ) -> Result<Option<ThreadRow>> {
        self.ops().set_archived(id, archived, reason)
    }

    /// See [`crate::Store::delete_thread`].
    pub fn delete_thread(&self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome> {
        self.ops().delete_thread(id, only_if_archived)
    }

    /// Visits threads newest activity first (`updated_at_ms` desc, then id), skipping
    /// damaged rows with a warning, until `visit` returns `false`.
    fn each_thread(
        &self,
        cwd: Option<&str>,
        archived: Option<bool>,
        mut visit: impl FnMut(ThreadRow) -> Result<bool>,
    ) -> Result<()> {
        let conn = self.lite_conn()?;
        let mut stmt = conn.prepare_cached(&listing_sql())?;
        let mut rows = stmt.query(params![cwd, archived])?;
        while let Some(row) = rows.next()? {
            match thread_from_row(row) {
                Ok(t) => {
                    if !visit(t)? {
                        break;
                    }
                }
                Err(e) => log::warn!("skipping damaged thread row: {e}"),
            }
        }
        Ok(())
    }

    /// See [`crate::Store::list_threads`].
    pub fn list_threads(&self, filter: &ThreadFilter) -> Result<Vec<ThreadRow>> {
        if self.lite.is_none() {
            return self.ops().list_threads(filter);
        }
        let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        self.each_thread(filter.cwd.as_deref(), filter.archived, |t| {
            out.push(t);
            Ok(out.len() < limit)
        })?;
        Ok(out)
    }

    /// See [`crate::Store::latest_thread`].
    pub fn latest_thread(&self, cwd: &str) -> Result<Option<ThreadRow>> {
        if self.lite.is_none() {
            return self.ops().latest_thread(cwd);
        }
        let mut found = None;
        self.each_thread(Some(cwd), Some(false), |t| {
            found = Some(t);
            Ok(false)
        })?;
        Ok(found)
    }

    /// See [`crate::Store::search_threads`].
    pub fn search_threads(&self, query: &str, limit: u32) -> Result<Vec<SearchHit>> {
        let Some(conn) = self.lite else {
            return self.ops().search_threads(query, limit);
        };
        let limit = limit as usize;
        let mut hits = Vec::new();
        if limit == 0 {
            return Ok(hits);
        }
        let query = query.trim();
        if query.is_empty() {
            self.each_thread(None, Some(false), |t| {
                let text = t.title.as_deref().unwrap_or(&t.preview);
                let snippet = snippet(text, 0, 0, SNIPPET_CHARS);
                hits.push(SearchHit {
                    thread: t,
                    snippet,
                    item_seq: None,
                    item_id: None,
                });
                Ok(hits.len() < limit)
            })?;
            return Ok(hits);
        }
        let needle = query.to_lowercase();
        // SQLite's lower() folds ASCII only, so it can pre-filter only ASCII queries;
        // the Rust check below is the real (Unicode) test.
        let prefilter = needle.is_ascii().then_some(needle.as_str());
        // The newest conversations' messages are read directly (a common query fills
        // the page there); past them, only the conversations the text index names as
        // candidates are (a rare query costs its matches, not the whole history). The
        // index is asked once, when first needed; `None` inside: it cannot narrow this
        // query, and every conversation's messages are read.
        let mut visited = 0usize;
        let mut candidates: Option<Option<std::collections::HashSet<String>>> = None;
        let mut items = conn.prepare_cached(
            "SELECT id, seq, text FROM ( \
                 SELECT id, seq, CASE WHEN json_valid(body) \
                     AND json_type(body, '$.text') = 'text' \
                     THEN json_extract(body, '$.text') END AS text \
                 FROM items WHERE thread_id = ?1 \
                 AND item_type IN ('user_message', 'agent_message')) \
             WHERE text IS NOT NULL AND (?2 IS NULL OR instr(lower(text), ?2) > 0) \
             ORDER BY seq DESC",
        )?;
        self.each_thread(None, None, |t| {
            if let Some(snippet) = title_hit(&t, &needle) {
                hits.push(SearchHit {
                    thread: t,
                    snippet,
                    item_seq: None,
                    item_id: None,
                });
                return Ok(hits.len() < limit);
            }
            visited += 1;
            if visited > DIRECT_SEARCH_THREADS {
                if candidates.is_none() {
                    candidates = Some(self.indexed_candidates(&needle)?);
                }
                if let Some(Some(c)) = &candidates {
                    if !c.contains(&t.id) {
                        return Ok(true);
                    }
                }
            }
            let mut rows = items.query(params![t.id, prefilter])?;
            while let Some(row) = rows.next()? {
                let (id, seq, text) = match (|| -> Result<(String, u64, String)> {
                    Ok((
                        get(row, 0, "items", &t.id)?,
                        get_u64(row, 1, "items", &t.id)?,
                        get(row, 2, "items", &t.id)?,
                    ))
                })() {
                    Ok(v) => v,
                    Err(e) => {
                        log::warn!("search: skipping damaged item row: {e}");
                        continue;
                    }
                };
                if let Some((s, e)) = find_ci(&text, &needle) {
                    hits.push(SearchHit {
                        snippet: snippet(&text, s, e, SNIPPET_CHARS),
                        thread: t,
                        item_seq: Some(seq),
                        item_id: Some(id),
                    });
                    return Ok(hits.len() < limit);
                }
            }
            Ok(true)
        })?;
        Ok(hits)
    }

    /// Ids of the conversations with a user or agent message whose text the trigram
    /// index (`item_text`) matches for `needle_lower`: a superset of those whose text
    /// holds it (case-folded), so only they need reading. `None` when the index cannot
    /// narrow the search: a query under 3 characters (a trigram index finds no shorter
    /// substrings), or one with a control character or a cased letter outside ASCII
    /// (the index folds case with SQLite's Unicode tables, the search with Rust's, and
    /// those may disagree beyond ASCII); such queries read every conversation.
    fn indexed_candidates(
        &self,
        needle_lower: &str,
    ) -> Result<Option<std::collections::HashSet<String>>> {
        let conn = self.lite_conn()?;
        let indexable = needle_lower.chars().count() >= 3
            && needle_lower.chars().all(|c| {
                !c.is_control() && (c.is_ascii() || (!c.is_lowercase() && !c.is_uppercase()))
            });
        if !indexable {
            return Ok(None);
        }
        // One FTS5 phrase: the whole query as a substring, quotes doubled.
        let phrase = format!("\"{}\"", needle_lower.replace('"', "\"\""));
        let mut stmt = conn.prepare_cached(
            "SELECT DISTINCT items.thread_id FROM item_text \
             JOIN items ON items.rowid = item_text.rowid \
             WHERE item_text MATCH ?1",
        )?;
        let mut rows = stmt.query([phrase])?;
        let mut out = std::collections::HashSet::new();
        while let Some(row) = rows.next()? {
            if let Ok(id) = row.get::<_, String>(0) {
                out.insert(id);
            }
        }
        // Messages past the watermark are not in the index yet: their conversations
        // are candidates too (read directly, the real test decides).
        let mut stmt = conn.prepare_cached(
            "SELECT DISTINCT thread_id FROM items \
             WHERE rowid > (SELECT indexed FROM item_text_state) \
             AND item_type IN ('user_message', 'agent_message')",
        )?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            if let Ok(id) = row.get::<_, String>(0) {
                out.insert(id);
            }
        }
        Ok(Some(out))
    }

    /// See [`crate::Store::index_text`] (SQLite only).
    pub(crate) fn index_text(&self, max_rows: usize) -> Result<usize> {
        let conn = self.lite_conn()?;
        let from: i64 = conn
            .prepare_cached("SELECT indexed FROM item_text_state")?
            .query_row([], |r| r.get(0))?;
        let limit = i64::try_from(max_rows).unwrap_or(i64::MAX);
        let (to, count): (Option<i64>, i64) = conn
            .prepare_cached(
                "SELECT max(rowid), count(*) FROM \
                 (SELECT rowid FROM items WHERE rowid > ?1 ORDER BY rowid LIMIT ?2)",
            )?
            .query_row(params![from, limit], |r| Ok((r.get(0)?, r.get(1)?)))?;
        let Some(to) = to else {
            return Ok(0);
        };
        // A plain insert: no row past the watermark is in the index (the triggers index
        // only rows at or below it), and `OR REPLACE` makes the index look each rowid
        // up in every segment first.
        conn.prepare_cached(
            "INSERT INTO item_text (rowid, text) \
             SELECT rowid, json_extract(body, '$.text') FROM items \
             WHERE rowid > ?1 AND rowid <= ?2 \
             AND item_type IN ('user_message', 'agent_message') \
             AND json_valid(body) AND json_type(body, '$.text') = 'text'",
        )?
        .execute(params![from, to])?;
        conn.prepare_cached("UPDATE item_text_state SET indexed = ?1")?
            .execute([to])?;
        Ok(usize::try_from(count).unwrap_or(0))
    }
}

impl Ops<'_> {
    /// See [`crate::Store::update_thread`].
    pub(crate) fn update_thread(&self, t: &ThreadRow) -> Result<()> {
        let n = self.conn.exec(
            "UPDATE threads SET cwd = ?2, preview = ?3, provider = ?4, model = ?5, \
             variant = ?6, effort = ?7, permission_mode = ?8, engine_id = ?9, \
             forked_from_id = ?10, forked_from_turn_id = ?11, forked_from_item_id = ?12, \
             updated_at_ms = ?13, extra = CASE WHEN ?15 = 1 THEN extra ELSE ?14 END \
             WHERE id = ?1",
            &values![
                &t.id,
                &t.cwd,
                filtered(t.preview.clone()),
                &t.provider,
                &t.model,
                &t.variant,
                &t.effort,
                &t.permission_mode,
                &t.engine_id,
                &t.forked_from_id,
                &t.forked_from_turn_id,
                &t.forked_from_item_id,
                t.updated_at_ms,
                json_text(&t.extra),
                t.damage.is_some(),
            ],
        )?;
        if n == 0 {
            return Err(StoreError::not_found("thread", &t.id));
        }
        Ok(())
    }

    /// See [`crate::Store::set_title`].
    pub(crate) fn set_title(
        &self,
        id: &str,
        title: Option<&str>,
        revision: u64,
    ) -> Result<Option<ThreadRow>> {
        self.conn.exec(
            "UPDATE threads SET title = ?2, title_revision = ?3 \
             WHERE id = ?1 AND title_revision <= ?3",
            &[
                Value::from(id),
                Value::from(title.map(|t| filtered(t.to_string()))),
                U64(revision).value()?,
            ],
        )?;
        self.get_thread(id)
    }

    /// See [`crate::Store::set_title_if_empty`].
    pub(crate) fn set_title_if_empty(
        &self,
        id: &str,
        title: &str,
        expected_revision: u64,
    ) -> Result<(Option<ThreadRow>, bool)> {
        let n = self.conn.exec(
            "UPDATE threads SET title = ?2, title_revision = ?3 + 1 \
             WHERE id = ?1 AND (title IS NULL OR title = '') AND title_revision = ?3",
            &[
                Value::from(id),
                Value::from(filtered(title.to_string())),
                U64(expected_revision).value()?,
            ],
        )?;
        Ok((self.get_thread(id)?, n > 0))
    }

    /// See [`crate::Store::set_archived`].
    pub(crate) fn set_archived(
        &self,
        id: &str,
        archived: bool,
        reason: Option<&str>,
    ) -> Result<Option<ThreadRow>> {
        let reason = if archived { reason } else { None };
        self.conn.exec(
            "UPDATE threads SET archived = ?2, archive_reason = ?3 WHERE id = ?1",
            &values![id, archived, reason],
        )?;
        self.get_thread(id)
    }

    /// See [`crate::Store::thread_exists`].
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn thread_exists(&self, id: &str) -> Result<bool> {
        Ok(!self
            .conn
            .rows("SELECT 1 FROM threads WHERE id = ?1", &values![id])?
            .is_empty())
    }

    /// See [`crate::Store::latest_thread`].
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn latest_thread(&self, cwd: &str) -> Result<Option<ThreadRow>> {
        let newest = self.list_threads(&ThreadFilter {
            cwd: Some(cwd.to_string()),
            archived: Some(false),
            limit: Some(1),
        })?;
        Ok(newest.into_iter().next())
    }

    /// See [`crate::Store::delete_thread`].
    pub(crate) fn delete_thread(&self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome> {
        let rows = self
            .conn
            .rows("SELECT archived FROM threads WHERE id = ?1", &values![id])?;
        let archived: bool = match rows.first() {
            None => return Ok(DeleteOutcome::NotFound),
            Some(r) => get(r, 0, "threads", id)?,
        };
        if only_if_archived && !archived {
            return Ok(DeleteOutcome::NotArchived);
        }
        // Items and turns first (items reference turns), then the rest; the foreign keys
        // would cascade anyway, explicit deletes keep this independent of the pragma.
        for sql in [
            "DELETE FROM items WHERE thread_id = ?1",
            "DELETE FROM turns WHERE thread_id = ?1",
            "DELETE FROM usage WHERE thread_id = ?1",
            "DELETE FROM inputs WHERE thread_id = ?1",
            "DELETE FROM runs WHERE thread_id = ?1",
            "DELETE FROM continue_sources WHERE thread_id = ?1",
            "DELETE FROM leases WHERE thread_id = ?1",
            "DELETE FROM threads WHERE id = ?1",
        ] {
            self.conn.exec(sql, &values![id])?;
        }
        Ok(DeleteOutcome::Deleted)
    }

    /// See [`crate::Store::insert_thread`].
    pub(crate) fn insert_thread(&self, t: &ThreadRow) -> Result<()> {
        self.conn.exec(
            &format!(
                "INSERT INTO threads ({THREAD_COLS}) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, \
                 ?16, ?17, ?18, ?19)"
            ),
            &[
                Value::from(&t.id),
                Value::from(&t.cwd),
                Value::from(t.title.clone().map(filtered)),
                U64(t.title_revision).value()?,
                Value::from(filtered(t.preview.clone())),
                Value::from(&t.provider),
                Value::from(&t.model),
                Value::from(&t.variant),
                Value::from(&t.effort),
                Value::from(&t.permission_mode),
                Value::from(&t.engine_id),
                Value::from(t.archived),
                Value::from(&t.archive_reason),
                Value::from(&t.forked_from_id),
                Value::from(&t.forked_from_turn_id),
                Value::from(&t.forked_from_item_id),
                Value::from(t.created_at_ms),
                Value::from(t.updated_at_ms),
                Value::from(json_text(&t.extra)),
            ],
        )?;
        Ok(())
    }

    /// See [`crate::Store::get_thread`].
    pub(crate) fn get_thread(&self, id: &str) -> Result<Option<ThreadRow>> {
        let rows = self.conn.rows(
            &format!("SELECT {THREAD_COLS} FROM threads WHERE id = ?1"),
            &values![id],
        )?;
        rows.first().map(thread_from_row).transpose()
    }

    /// See [`crate::Store::touch_thread`].
    pub(crate) fn touch_thread(&self, id: &str, updated_at_ms: i64) -> Result<()> {
        let n = self.conn.exec(
            "UPDATE threads SET updated_at_ms = \
             CASE WHEN updated_at_ms > ?2 THEN updated_at_ms ELSE ?2 END WHERE id = ?1",
            &values![id, updated_at_ms],
        )?;
        if n == 0 {
            return Err(StoreError::not_found("thread", id));
        }
        Ok(())
    }

    /// See [`crate::Store::list_threads`] (all matching rows are read, then decoded).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn list_threads(&self, filter: &ThreadFilter) -> Result<Vec<ThreadRow>> {
        let limit = filter.limit.map_or(usize::MAX, |l| l as usize);
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        for row in self.conn.rows(
            &listing_sql(),
            &values![filter.cwd.as_deref(), filter.archived],
        )? {
            match thread_from_row(&row) {
                Ok(t) => out.push(t),
                Err(e) => log::warn!("skipping damaged thread row: {e}"),
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}

/// The snippet of a search hit in a conversation's title or preview (`needle_lower`:
/// the query, lowercased), title first; `None` when neither contains it.
pub(crate) fn title_hit(t: &ThreadRow, needle_lower: &str) -> Option<String> {
    [t.title.as_deref(), Some(t.preview.as_str())]
        .into_iter()
        .flatten()
        .find_map(|text| {
            find_ci(text, needle_lower).map(|(s, e)| snippet(text, s, e, SNIPPET_CHARS))
        })
}
