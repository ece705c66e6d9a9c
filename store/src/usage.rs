//! Read-only queries behind the usage views (`usage/overview`, `settings/usage`,
//! `engine/list {include_quota}` statistics). They read usage records, turn headers and
//! thread engine bindings; never message content (the skill count reads only the name
//! and arguments of skill tool calls).

use crate::error::Result;
use crate::sql::{values, Cells, Ops};
use crate::store::{Store, Tx};
use crate::util::{get, get_u64};

/// What [`Store::usage_snapshot`] reads, in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageSnapshot {
    /// [`Store::usage_scan`].
    pub rows: Vec<UsageScanRow>,
    /// [`Store::engine_claims`].
    pub claims: Vec<EngineClaim>,
    /// [`Store::skill_loads`].
    pub skills: Vec<(String, u64)>,
    /// [`Store::latest_turns`].
    pub latest: Vec<LatestTurn>,
}

/// One usage record with the engine of its conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageScanRow {
    /// Conversation.
    pub thread_id: String,
    /// Engine the conversation is bound to (`""` for legacy rows = built-in).
    pub engine_id: String,
    /// Turn the usage belongs to.
    pub turn_id: String,
    /// Provider recorded with the usage (durable: not the thread's current selection).
    pub provider: String,
    /// Model recorded with the usage.
    pub model: String,
    /// When it was reported, Unix ms.
    pub at_ms: i64,
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache-read tokens.
    pub cache_read_tokens: u64,
    /// Cache-creation tokens.
    pub cache_creation_tokens: u64,
    /// Whether the conversation is a subagent worker's child thread.
    pub is_agent: bool,
}

/// A conversation bound to an external engine and the native session it claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineClaim {
    /// Conversation.
    pub thread_id: String,
    /// Engine id.
    pub engine_id: String,
    /// The engine's native session id (`extra.engine_ref`), when known.
    pub engine_ref: Option<String>,
}

/// The newest turn of one `(engine, provider)` pair, with its usage sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatestTurn {
    /// Engine of the conversation (`""` = built-in).
    pub engine_id: String,
    /// Provider recorded on the turn.
    pub provider: String,
    /// Conversation.
    pub thread_id: String,
    /// Turn id.
    pub turn_id: String,
    /// Turn status.
    pub status: String,
    /// Error message of a failed turn (the `message` of the stored error object).
    pub error: Option<String>,
    /// Model recorded on the turn.
    pub model: String,
    /// Start, Unix ms (the request time that orders turns).
    pub started_at_ms: i64,
    /// End, Unix ms.
    pub completed_at_ms: Option<i64>,
    /// Usage records of the turn with at least one non-zero counter.
    pub reported: u64,
    /// Sums over the turn's usage records: input, output, cache read, cache creation.
    pub tokens: [u64; 4],
}

/// The message of a stored turn error (JSON `{"message": …}` or a JSON string); damaged
/// text is returned as is.
fn error_message(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(v) => match v.get("message").and_then(|m| m.as_str()) {
            Some(m) => m.to_owned(),
            None => v.to_string(),
        },
        Err(_) => text.to_owned(),
    }
}

fn scan_row(row: &(impl Cells + ?Sized)) -> Result<UsageScanRow> {
    let thread_id: String = get(row, 0, "usage", "?")?;
    let (t, k) = ("usage", thread_id.as_str());
    Ok(UsageScanRow {
        engine_id: get(row, 1, t, k)?,
        turn_id: get(row, 2, t, k)?,
        provider: get(row, 3, t, k)?,
        model: get(row, 4, t, k)?,
        at_ms: get(row, 5, t, k)?,
        input_tokens: get_u64(row, 6, t, k)?,
        output_tokens: get_u64(row, 7, t, k)?,
        cache_read_tokens: get_u64(row, 8, t, k)?,
        cache_creation_tokens: get_u64(row, 9, t, k)?,
        is_agent: get::<i64>(row, 10, t, k)? != 0,
        thread_id,
    })
}

/// Whether a thread's `extra` JSON marks a subagent worker's child thread
/// (`agent.root_id` present and not null).
fn is_agent_extra(extra: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(extra)
        .ok()
        .and_then(|v| v.get("agent")?.get("root_id").map(|r| !r.is_null()))
        .unwrap_or(false)
}

/// The native session id in a thread's `extra` JSON (`engine_ref`, a non-blank string).
fn engine_ref_of(extra: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(extra)
        .ok()?
        .get("engine_ref")?
        .as_str()
        .filter(|r| !r.trim().is_empty())
        .map(String::from)
}

/// Fills in the usage sums of each turn of `latest` (`sums` reads those of one turn:
/// reported records, then the four token counters).
fn add_sums(
    latest: &mut [LatestTurn],
    mut sums: impl FnMut(&str, &str) -> Result<[u64; 5]>,
) -> Result<()> {
    for turn in latest {
        let [reported, a, b, c, d] = sums(&turn.thread_id, &turn.turn_id)?;
        turn.reported = reported;
        turn.tokens = [a, b, c, d];
    }
    Ok(())
}

const SUMS_SQL: &str = "SELECT COALESCE(SUM(CASE WHEN input_tokens + output_tokens + \
     cache_read_tokens + cache_creation_tokens > 0 THEN 1 ELSE 0 END), 0), \
     COALESCE(SUM(input_tokens), 0), COALESCE(SUM(output_tokens), 0), \
     COALESCE(SUM(cache_read_tokens), 0), COALESCE(SUM(cache_creation_tokens), 0) \
     FROM usage WHERE thread_id = ?1 AND turn_id = ?2";

fn sums_of(row: &(impl Cells + ?Sized), thread_id: &str) -> Result<[u64; 5]> {
    let (t, k) = ("usage", thread_id);
    Ok([
        get_u64(row, 0, t, k)?,
        get_u64(row, 1, t, k)?,
        get_u64(row, 2, t, k)?,
        get_u64(row, 3, t, k)?,
        get_u64(row, 4, t, k)?,
    ])
}

// The PostgreSQL paths: JSON is decoded here rather than with SQLite's typed
// `json_extract`; SQLite's `Tx` keeps its cached statements.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
impl Ops<'_> {
    /// See [`Store::usage_scan`].
    pub(crate) fn usage_scan(&self) -> Result<Vec<UsageScanRow>> {
        let rows = self.conn.rows(
            "SELECT u.thread_id, t.engine_id, u.turn_id, u.provider, u.model, u.at_ms, \
             u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_creation_tokens, \
             0, t.extra FROM usage u JOIN threads t ON t.id = u.thread_id ORDER BY u.at_ms, u.id",
            &[],
        )?;
        let mut agents: std::collections::HashMap<String, bool> = Default::default();
        rows.iter()
            .map(|row| {
                let mut scan = scan_row(row)?;
                let extra: String = get(row, 11, "threads", &scan.thread_id)?;
                scan.is_agent = *agents
                    .entry(scan.thread_id.clone())
                    .or_insert_with(|| is_agent_extra(&extra));
                Ok(scan)
            })
            .collect()
    }

    /// See [`Store::engine_claims`].
    pub(crate) fn engine_claims(&self) -> Result<Vec<EngineClaim>> {
        let rows = self.conn.rows(
            "SELECT id, engine_id, extra FROM threads WHERE engine_id NOT IN ('', 'wuu')",
            &[],
        )?;
        rows.iter()
            .map(|row| {
                let thread_id: String = get(row, 0, "threads", "?")?;
                let extra: String = get(row, 2, "threads", &thread_id)?;
                Ok(EngineClaim {
                    engine_id: get(row, 1, "threads", &thread_id)?,
                    engine_ref: engine_ref_of(&extra),
                    thread_id,
                })
            })
            .collect()
    }

    /// See [`Store::latest_turns`].
    pub(crate) fn latest_turns(&self) -> Result<Vec<LatestTurn>> {
        let rows = self.conn.rows(
            "SELECT engine_id, provider, thread_id, id, status, error, model, started_at_ms, \
             completed_at_ms FROM (SELECT t.engine_id, tr.provider, tr.thread_id, tr.id, \
             tr.status, tr.error, tr.model, tr.started_at_ms, tr.completed_at_ms, \
             ROW_NUMBER() OVER (PARTITION BY t.engine_id, tr.provider \
             ORDER BY tr.started_at_ms DESC, tr.ordinal DESC) AS n \
             FROM turns tr JOIN threads t ON t.id = tr.thread_id) latest WHERE n = 1",
            &[],
        )?;
        let mut out = rows
            .iter()
            .map(latest_from_row)
            .collect::<Result<Vec<_>>>()?;
        add_sums(&mut out, |thread_id, turn_id| {
            let rows = self.conn.rows(SUMS_SQL, &values![thread_id, turn_id])?;
            match rows.first() {
                Some(row) => sums_of(row, thread_id),
                None => Ok([0; 5]),
            }
        })?;
        Ok(out)
    }

    /// See [`Store::skill_loads`].
    pub(crate) fn skill_loads(&self) -> Result<Vec<(String, u64)>> {
        let rows = self.conn.rows(SKILL_LOADS_SQL, &[])?;
        rows.iter()
            .filter_map(|row| {
                // A non-text skill name is no skill load.
                let name: String = get(row, 0, "items", "skill").ok()?;
                Some(get_u64(row, 1, "items", "skill").map(|n| (name, n)))
            })
            .collect()
    }

    /// See [`Store::usage_snapshot`].
    pub(crate) fn usage_snapshot(&self) -> Result<UsageSnapshot> {
        Ok(UsageSnapshot {
            rows: self.usage_scan()?,
            claims: self.engine_claims()?,
            skills: self.skill_loads()?,
            latest: self.latest_turns()?,
        })
    }

    /// See [`Store::quota_snapshot`].
    pub(crate) fn quota_snapshot(&self, key: &str) -> Result<Option<serde_json::Value>> {
        let rows = self.conn.rows(
            "SELECT body FROM quota_snapshots WHERE key = ?1",
            &values![key],
        )?;
        // A damaged snapshot is no snapshot.
        Ok(rows
            .first()
            .and_then(|r| get::<String>(r, 0, "quota_snapshots", key).ok())
            .and_then(|t| serde_json::from_str(&t).ok()))
    }

    /// See [`Store::put_quota_snapshot`].
    pub(crate) fn put_quota_snapshot(
        &self,
        key: &str,
        body: &serde_json::Value,
        now_ms: i64,
    ) -> Result<()> {
        self.conn.exec(
            "INSERT INTO quota_snapshots (key, body, updated_at_ms) VALUES (?1, ?2, ?3) \
             ON CONFLICT (key) DO UPDATE SET body = excluded.body, \
             updated_at_ms = excluded.updated_at_ms",
            &values![key, body.to_string(), now_ms],
        )?;
        Ok(())
    }

    /// See [`Store::delete_quota_snapshot`].
    pub(crate) fn delete_quota_snapshot(&self, key: &str) -> Result<()> {
        self.conn
            .exec("DELETE FROM quota_snapshots WHERE key = ?1", &values![key])?;
        Ok(())
    }
}

/// Skill loads by name: the shared SQL (`json_extract` is SQLite's, and a function of
/// the PostgreSQL schema).
const SKILL_LOADS_SQL: &str = "SELECT skill, COUNT(*) FROM (SELECT \
     COALESCE(json_extract(json_extract(body, '$.arguments'), '$.name'), \
     json_extract(json_extract(body, '$.arguments'), '$.skill')) AS skill \
     FROM items WHERE item_type = 'tool_call' AND json_valid(body) \
     AND json_extract(body, '$.name') IN ('load_skill', 'skill', 'Skill') \
     AND json_valid(json_extract(body, '$.arguments'))) loads \
     WHERE skill IS NOT NULL GROUP BY skill";

fn latest_from_row(row: &(impl Cells + ?Sized)) -> Result<LatestTurn> {
    let thread_id: String = get(row, 2, "turns", "?")?;
    let (t, k) = ("turns", thread_id.as_str());
    Ok(LatestTurn {
        engine_id: get(row, 0, t, k)?,
        provider: get(row, 1, t, k)?,
        turn_id: get(row, 3, t, k)?,
        status: get(row, 4, t, k)?,
        error: get::<Option<String>>(row, 5, t, k)
            .ok()
            .flatten()
            .map(|text| error_message(&text)),
        model: get(row, 6, t, k)?,
        started_at_ms: get(row, 7, t, k)?,
        completed_at_ms: get(row, 8, t, k)?,
        reported: 0,
        tokens: [0; 4],
        thread_id,
    })
}

impl Tx<'_> {
    /// See [`Store::usage_scan`].
    pub fn usage_scan(&self) -> Result<Vec<UsageScanRow>> {
        let Some(conn) = self.lite else {
            return self.ops().usage_scan();
        };
        let mut stmt = conn.prepare_cached(
            "SELECT u.thread_id, t.engine_id, u.turn_id, u.provider, u.model, u.at_ms, \
             u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_creation_tokens, \
             CASE WHEN json_valid(t.extra) \
             AND json_extract(t.extra, '$.agent.root_id') IS NOT NULL THEN 1 ELSE 0 END \
             FROM usage u JOIN threads t ON t.id = u.thread_id ORDER BY u.at_ms, u.id",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            out.push(scan_row(row)?);
        }
        Ok(out)
    }

    /// See [`Store::engine_claims`].
    pub fn engine_claims(&self) -> Result<Vec<EngineClaim>> {
        let Some(conn) = self.lite else {
            return self.ops().engine_claims();
        };
        let mut stmt = conn.prepare_cached(
            "SELECT id, engine_id, CASE WHEN json_valid(extra) \
             THEN json_extract(extra, '$.engine_ref') END \
             FROM threads WHERE engine_id NOT IN ('', 'wuu')",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let thread_id: String = get(row, 0, "threads", "?")?;
            let engine_id: String = get(row, 1, "threads", &thread_id)?;
            // A non-text engine_ref (a number, an object) is no claim.
            let engine_ref: Option<String> = row.get::<_, String>(2).ok();
            out.push(EngineClaim {
                thread_id,
                engine_id,
                engine_ref: engine_ref.filter(|r| !r.trim().is_empty()),
            });
        }
        Ok(out)
    }

    /// See [`Store::latest_turns`].
    pub fn latest_turns(&self) -> Result<Vec<LatestTurn>> {
        let Some(conn) = self.lite else {
            return self.ops().latest_turns();
        };
        // SQLite: with one MAX() aggregate, the bare columns come from the row holding
        // the maximum.
        let mut stmt = conn.prepare_cached(
            "SELECT t.engine_id, tr.provider, tr.thread_id, tr.id, tr.status, tr.error, \
             tr.model, MAX(tr.started_at_ms), tr.completed_at_ms \
             FROM turns tr JOIN threads t ON t.id = tr.thread_id \
             GROUP BY t.engine_id, tr.provider",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let thread_id: String = get(row, 2, "turns", "?")?;
            let (t, k) = ("turns", thread_id.as_str());
            out.push(LatestTurn {
                engine_id: get(row, 0, t, k)?,
                provider: get(row, 1, t, k)?,
                turn_id: get(row, 3, t, k)?,
                status: get(row, 4, t, k)?,
                error: row
                    .get::<_, Option<String>>(5)
                    .ok()
                    .flatten()
                    .map(|text| error_message(&text)),
                model: get(row, 6, t, k)?,
                started_at_ms: get(row, 7, t, k)?,
                completed_at_ms: get(row, 8, t, k)?,
                reported: 0,
                tokens: [0; 4],
                thread_id,
            });
        }
        drop(rows);
        let mut sums = conn.prepare_cached(
            "SELECT COALESCE(SUM(input_tokens + output_tokens + cache_read_tokens + \
             cache_creation_tokens > 0), 0), COALESCE(SUM(input_tokens), 0), \
             COALESCE(SUM(output_tokens), 0), COALESCE(SUM(cache_read_tokens), 0), \
             COALESCE(SUM(cache_creation_tokens), 0) \
             FROM usage WHERE thread_id = ?1 AND turn_id = ?2",
        )?;
        for turn in &mut out {
            let (t, k) = ("usage", turn.thread_id.as_str());
            sums.query_row([&turn.thread_id, &turn.turn_id], |row| {
                Ok((
                    get_u64(row, 0, t, k),
                    get_u64(row, 1, t, k),
                    get_u64(row, 2, t, k),
                    get_u64(row, 3, t, k),
                    get_u64(row, 4, t, k),
                ))
            })
            .map_err(crate::error::StoreError::from)
            .and_then(|(a, b, c, d, e)| {
                turn.reported = a?;
                turn.tokens = [b?, c?, d?, e?];
                Ok(())
            })?;
        }
        Ok(out)
    }

    /// See [`Store::skill_loads`].
    pub fn skill_loads(&self) -> Result<Vec<(String, u64)>> {
        let Some(conn) = self.lite else {
            return self.ops().skill_loads();
        };
        let mut stmt = conn.prepare_cached(SKILL_LOADS_SQL)?;
        let mut rows = stmt.query([])?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let Ok(name) = row.get::<_, String>(0) else {
                continue;
            };
            out.push((name, get_u64(row, 1, "items", "skill")?));
        }
        Ok(out)
    }
}

impl Store {
    /// The quota snapshot under `key` (JSON as stored), if any; a damaged one is none.
    pub fn quota_snapshot(&self, key: &str) -> Result<Option<serde_json::Value>> {
        self.read(|tx| tx.ops().quota_snapshot(key))
    }

    /// Replaces the quota snapshot under `key`.
    pub fn put_quota_snapshot(
        &mut self,
        key: &str,
        body: &serde_json::Value,
        now_ms: i64,
    ) -> Result<()> {
        self.transaction(|tx| tx.ops().put_quota_snapshot(key, body, now_ms))
    }

    /// Deletes the quota snapshot under `key` (no error when there is none).
    pub fn delete_quota_snapshot(&mut self, key: &str) -> Result<()> {
        self.transaction(|tx| tx.ops().delete_quota_snapshot(key))
    }

    /// Every usage record with its conversation's engine, oldest first. Reads no content.
    pub fn usage_scan(&self) -> Result<Vec<UsageScanRow>> {
        self.read(|tx| tx.usage_scan())
    }

    /// Conversations bound to an external engine (`engine_id` not `""`/`wuu`) with the
    /// native session id they claimed (`extra.engine_ref`, a string).
    pub fn engine_claims(&self) -> Result<Vec<EngineClaim>> {
        self.read(|tx| tx.engine_claims())
    }

    /// The newest turn (by start time) of every `(engine, provider)` pair, with the
    /// usage sums of that turn.
    pub fn latest_turns(&self) -> Result<Vec<LatestTurn>> {
        self.read(|tx| tx.latest_turns())
    }

    /// Skill loads (`load_skill`/`skill` tool calls) by skill name.
    pub fn skill_loads(&self) -> Result<Vec<(String, u64)>> {
        self.read(|tx| tx.skill_loads())
    }

    /// All four reads above in one consistent snapshot.
    pub fn usage_snapshot(&self) -> Result<UsageSnapshot> {
        self.read(|tx| {
            Ok(UsageSnapshot {
                rows: tx.usage_scan()?,
                claims: tx.engine_claims()?,
                skills: tx.skill_loads()?,
                latest: tx.latest_turns()?,
            })
        })
    }
}
