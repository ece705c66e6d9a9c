//! The listing visitor and conversation search over the shared row logic ([`Ops`]),
//! for backends without SQLite's in-place reads and text index (PostgreSQL). Same
//! results, same order as [`crate::Store::visit_threads`] and
//! [`crate::Store::search_threads`] on SQLite. README "Several hosts, one database".

use std::collections::HashSet;

use crate::error::Result;
use crate::rows::{SearchHit, ThreadFilter, ThreadView};
use crate::sql::{values, Ops};
use crate::threads::{title_hit, SNIPPET_CHARS};
use crate::util::{find_ci, get, get_json, get_u64, snippet};

/// The message items search reads, newest first.
const MESSAGES_SQL: &str = "SELECT id, seq, body FROM items WHERE thread_id = ?1 \
     AND item_type IN ('user_message', 'agent_message') ORDER BY seq DESC";

/// Conversations with a message item whose stored body holds `needle` (lower-cased
/// on both sides by the server).
const CANDIDATES_SQL: &str = "SELECT DISTINCT thread_id FROM items \
     WHERE item_type IN ('user_message', 'agent_message') AND strpos(lower(body), ?1) > 0";

impl Ops<'_> {
    /// See [`crate::Store::visit_threads`]: the rows of [`Ops::list_threads`], each
    /// viewed in turn.
    pub(crate) fn visit_threads(
        &self,
        filter: &ThreadFilter,
        mut visit: impl FnMut(&ThreadView<'_>) -> Result<()>,
    ) -> Result<usize> {
        let rows = self.list_threads(filter)?;
        for t in &rows {
            visit(&t.view())?;
        }
        Ok(rows.len())
    }

    /// See [`crate::Store::search_threads`]: the same hits in the same order. The
    /// server narrows the conversations whose messages are read to those whose stored
    /// message bodies contain the query (lower-cased) when the query is ASCII without
    /// quotes, backslashes or control characters (its JSON text is then itself); any
    /// other query reads every conversation's messages. The real test is Rust's, as on
    /// SQLite.
    pub(crate) fn search_threads(&self, query: &str, limit: u32) -> Result<Vec<SearchHit>> {
        let limit = limit as usize;
        let mut hits = Vec::new();
        if limit == 0 {
            return Ok(hits);
        }
        let query = query.trim();
        if query.is_empty() {
            let newest = self.list_threads(&ThreadFilter {
                cwd: None,
                archived: Some(false),
                limit: Some(limit as u32),
            })?;
            for t in newest {
                let snippet = snippet(
                    t.title.as_deref().unwrap_or(&t.preview),
                    0,
                    0,
                    SNIPPET_CHARS,
                );
                hits.push(SearchHit {
                    thread: t,
                    snippet,
                    item_seq: None,
                    item_id: None,
                });
            }
            return Ok(hits);
        }
        let needle = query.to_lowercase();
        let narrowable = needle
            .chars()
            .all(|c| c.is_ascii() && !c.is_ascii_control() && c != '"' && c != '\\');
        let candidates: Option<HashSet<String>> = if narrowable {
            let mut ids = HashSet::new();
            for row in self.conn.rows(CANDIDATES_SQL, &values![needle.as_str()])? {
                if let Ok(id) = get::<String>(&row, 0, "items", "?") {
                    ids.insert(id);
                }
            }
            Some(ids)
        } else {
            None
        };
        for t in self.list_threads(&ThreadFilter::default())? {
            if hits.len() >= limit {
                break;
            }
            if let Some(snippet) = title_hit(&t, &needle) {
                hits.push(SearchHit {
                    thread: t,
                    snippet,
                    item_seq: None,
                    item_id: None,
                });
                continue;
            }
            if candidates.as_ref().is_some_and(|c| !c.contains(&t.id)) {
                continue;
            }
            let mut found = None;
            for row in self.conn.rows(MESSAGES_SQL, &values![&t.id])? {
                let item = (|| -> Result<(String, u64, serde_json::Value)> {
                    Ok((
                        get(&row, 0, "items", &t.id)?,
                        get_u64(&row, 1, "items", &t.id)?,
                        get_json(&row, 2, "items", &t.id)?,
                    ))
                })();
                let (id, seq, body) = match item {
                    Ok(v) => v,
                    Err(e) => {
                        log::warn!("search: skipping damaged item row: {e}");
                        continue;
                    }
                };
                let Some(text) = body.get("text").and_then(|v| v.as_str()) else {
                    continue;
                };
                if let Some((s, e)) = find_ci(text, &needle) {
                    found = Some((snippet(text, s, e, SNIPPET_CHARS), seq, id));
                    break;
                }
            }
            if let Some((snippet, seq, id)) = found {
                hits.push(SearchHit {
                    snippet,
                    thread: t,
                    item_seq: Some(seq),
                    item_id: Some(id),
                });
            }
        }
        Ok(hits)
    }
}
