//! Turns and items: insertion order, thread-wide item `seq`, history load and copy.

use std::collections::HashMap;

use crate::error::{Result, StoreError};
use crate::rows::{turn_status, ItemRow, TurnRow, TurnWithItems};
use crate::sql::{values, Cells, Ops, Value};
use crate::store::Tx;
use crate::util::{get, get_json, get_json_opt, get_u64, json_text, now_ms, U64};

const TURN_COLS: &str = "thread_id, id, kind, status, provider, model, error, \
    started_at_ms, completed_at_ms, answer_ready_at_ms, input_tokens, output_tokens, \
    cache_read_tokens, cache_creation_tokens, finish_reason, stop_reason, truncated, extra";

const ITEM_COLS: &str = "thread_id, turn_id, id, item_type, status, seq, body";

pub(crate) fn turn_from_cells(row: &(impl Cells + ?Sized)) -> Result<TurnRow> {
    turn_from_row(row)
}

fn turn_from_row(row: &(impl Cells + ?Sized)) -> Result<TurnRow> {
    let thread_id: String = get(row, 0, "turns", "?")?;
    let id: String = get(row, 1, "turns", &thread_id)?;
    let key = format!("{thread_id}/{id}");
    let (t, k) = ("turns", key.as_str());
    Ok(TurnRow {
        kind: get(row, 2, t, k)?,
        status: get(row, 3, t, k)?,
        provider: get(row, 4, t, k)?,
        model: get(row, 5, t, k)?,
        error: get_json_opt(row, 6, t, k).unwrap_or_else(|e| {
            log::warn!("{e}");
            Some(serde_json::json!({"message": format!("the stored error of this turn is damaged ({e})")}))
        }),
        started_at_ms: get(row, 7, t, k)?,
        completed_at_ms: get(row, 8, t, k)?,
        answer_ready_at_ms: get(row, 9, t, k)?,
        input_tokens: get_u64(row, 10, t, k)?,
        output_tokens: get_u64(row, 11, t, k)?,
        cache_read_tokens: get_u64(row, 12, t, k)?,
        cache_creation_tokens: get_u64(row, 13, t, k)?,
        finish_reason: get(row, 14, t, k)?,
        stop_reason: get(row, 15, t, k)?,
        truncated: get(row, 16, t, k)?,
        extra: get_json(row, 17, t, k).unwrap_or_else(|e| {
            log::warn!("{e}");
            serde_json::Value::Object(Default::default())
        }),
        thread_id,
        id,
    })
}

fn item_from_row(row: &(impl Cells + ?Sized)) -> Result<ItemRow> {
    let thread_id: String = get(row, 0, "items", "?")?;
    let id: String = get(row, 2, "items", &thread_id)?;
    let key = format!("{thread_id}/{id}");
    let (t, k) = ("items", key.as_str());
    let item_type: String = get(row, 3, t, k)?;
    let mut status: Option<String> = get(row, 4, t, k)?;
    let body = match get_json(row, 6, t, k) {
        Ok(b) => b,
        Err(e) => {
            log::warn!("{e}");
            status = Some(crate::rows::item_damage::STATUS.to_string());
            serde_json::json!({
                "id": id,
                "type": item_type,
                "status": crate::rows::item_damage::STATUS,
                "error": format!("this item is damaged in the store and could not be read ({e})"),
            })
        }
    };
    Ok(ItemRow {
        turn_id: get(row, 1, t, k)?,
        item_type,
        status,
        seq: get_u64(row, 5, t, k)?,
        body,
        thread_id,
        id,
    })
}

/// A turn row's values in [`TURN_COLS`] order (`?1`..`?18`), for the shared
/// ([`crate::sql::Conn`]) statements.
fn turn_values(t: &TurnRow) -> Result<Vec<Value>> {
    Ok(vec![
        Value::from(&t.thread_id),
        Value::from(&t.id),
        Value::from(&t.kind),
        Value::from(&t.status),
        Value::from(&t.provider),
        Value::from(&t.model),
        Value::from(t.error.as_ref().map(json_text)),
        Value::from(t.started_at_ms),
        Value::from(&t.completed_at_ms),
        Value::from(&t.answer_ready_at_ms),
        U64(t.input_tokens).value()?,
        U64(t.output_tokens).value()?,
        U64(t.cache_read_tokens).value()?,
        U64(t.cache_creation_tokens).value()?,
        Value::from(&t.finish_reason),
        Value::from(&t.stop_reason),
        Value::from(t.truncated),
        Value::from(json_text(&t.extra)),
    ])
}

impl Ops<'_> {
    /// See [`crate::Store::insert_turn`].
    pub(crate) fn insert_turn(&self, t: &TurnRow) -> Result<()> {
        let rows = self.conn.rows(
            "SELECT 1 FROM threads WHERE id = ?1",
            &values![&t.thread_id],
        )?;
        if rows.is_empty() {
            return Err(StoreError::not_found("thread", &t.thread_id));
        }
        self.conn.exec(
            &format!(
                "INSERT INTO turns ({TURN_COLS}, ordinal) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, \
                 ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, \
                 (SELECT coalesce(max(ordinal), 0) + 1 FROM turns WHERE thread_id = ?1))"
            ),
            &turn_values(t)?,
        )?;
        Ok(())
    }

    /// See [`crate::Store::update_turn`].
    pub(crate) fn update_turn(&self, t: &TurnRow) -> Result<()> {
        let n = self.conn.exec(
            "UPDATE turns SET kind = ?3, status = ?4, provider = ?5, model = ?6, error = ?7, \
             started_at_ms = ?8, completed_at_ms = ?9, answer_ready_at_ms = ?10, \
             input_tokens = ?11, output_tokens = ?12, cache_read_tokens = ?13, \
             cache_creation_tokens = ?14, finish_reason = ?15, stop_reason = ?16, \
             truncated = ?17, extra = ?18 WHERE thread_id = ?1 AND id = ?2",
            &turn_values(t)?,
        )?;
        if n == 0 {
            return Err(StoreError::not_found(
                "turn",
                format!("{}/{}", t.thread_id, t.id),
            ));
        }
        Ok(())
    }

    /// See [`crate::Store::upsert_item`].
    pub(crate) fn upsert_item(&self, item: &ItemRow) -> Result<u64> {
        let turn = self.conn.rows(
            "SELECT 1 FROM turns WHERE thread_id = ?1 AND id = ?2",
            &values![&item.thread_id, &item.turn_id],
        )?;
        if turn.is_empty() {
            return Err(StoreError::not_found(
                "turn",
                format!("{}/{}", item.thread_id, item.turn_id),
            ));
        }
        let key = format!("{}/{}", item.thread_id, item.id);
        let existing = self.conn.rows(
            "SELECT seq FROM items WHERE thread_id = ?1 AND id = ?2",
            &values![&item.thread_id, &item.id],
        )?;
        let body = json_text(&item.body);
        if let Some(row) = existing.first() {
            let seq = get_u64(row, 0, "items", &key)?;
            self.conn.exec(
                "UPDATE items SET turn_id = ?3, item_type = ?4, status = ?5, body = ?6 \
                 WHERE thread_id = ?1 AND id = ?2",
                &values![
                    &item.thread_id,
                    &item.id,
                    &item.turn_id,
                    &item.item_type,
                    &item.status,
                    body
                ],
            )?;
            return Ok(seq);
        }
        let next = self.conn.rows(
            "UPDATE threads SET item_seq = item_seq + 1 WHERE id = ?1 RETURNING item_seq",
            &values![&item.thread_id],
        )?;
        let seq = match next.first() {
            Some(row) => get_u64(row, 0, "threads", &item.thread_id)?,
            None => return Err(StoreError::not_found("thread", &item.thread_id)),
        };
        self.conn.exec(
            &format!("INSERT INTO items ({ITEM_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
            &[
                Value::from(&item.thread_id),
                Value::from(&item.turn_id),
                Value::from(&item.id),
                Value::from(&item.item_type),
                Value::from(&item.status),
                U64(seq).value()?,
                Value::from(body),
            ],
        )?;
        Ok(seq)
    }

    /// Reads one turn. `Ok(None)` when it does not exist.
    pub(crate) fn get_turn(&self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>> {
        let rows = self.conn.rows(
            &format!("SELECT {TURN_COLS} FROM turns WHERE thread_id = ?1 AND id = ?2"),
            &values![thread_id, turn_id],
        )?;
        rows.first().map(turn_from_row).transpose()
    }

    /// See [`crate::Store::delete_item`].
    pub(crate) fn delete_item(&self, thread_id: &str, item_id: &str) -> Result<()> {
        self.conn.exec(
            "DELETE FROM items WHERE thread_id = ?1 AND id = ?2",
            &values![thread_id, item_id],
        )?;
        Ok(())
    }

    /// Reads one item. `Ok(None)` when it does not exist.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn get_item(&self, thread_id: &str, item_id: &str) -> Result<Option<ItemRow>> {
        let rows = self.conn.rows(
            &format!("SELECT {ITEM_COLS} FROM items WHERE thread_id = ?1 AND id = ?2"),
            &values![thread_id, item_id],
        )?;
        rows.first().map(item_from_row).transpose()
    }

    /// See [`crate::Store::load_history`].
    pub(crate) fn load_history(&self, thread_id: &str) -> Result<Vec<TurnWithItems>> {
        let turns = self.conn.rows(
            &format!("SELECT {TURN_COLS} FROM turns WHERE thread_id = ?1 ORDER BY ordinal"),
            &values![thread_id],
        )?;
        let turns = turns
            .iter()
            .map(turn_from_row)
            .collect::<Result<Vec<_>>>()?;
        let items = self.conn.rows(
            &format!("SELECT {ITEM_COLS} FROM items WHERE thread_id = ?1 ORDER BY seq"),
            &values![thread_id],
        )?;
        group_history(thread_id, turns, items.iter().map(item_from_row))
    }

    /// See [`crate::Store::copy_history`].
    pub(crate) fn copy_history(
        &self,
        src: &str,
        dst: &str,
        cut_turn: Option<&str>,
        cut_item: Option<&str>,
    ) -> Result<()> {
        if self.get_thread(src)?.is_none() {
            return Err(StoreError::not_found("thread", src));
        }
        if self.get_thread(dst)?.is_none() {
            return Err(StoreError::not_found("thread", dst));
        }
        let history = self.load_history(src)?;
        // Resolve the cut: the turn named, or the turn holding `cut_item`.
        let cut_turn: Option<String> = match (cut_turn, cut_item) {
            (Some(t), _) => Some(t.to_string()),
            (None, Some(i)) => Some(
                history
                    .iter()
                    .find(|t| t.items.iter().any(|it| it.id == i))
                    .map(|t| t.turn.id.clone())
                    .ok_or_else(|| StoreError::not_found("item", format!("{src}/{i}")))?,
            ),
            (None, None) => None,
        };
        let end = match &cut_turn {
            Some(id) => {
                history
                    .iter()
                    .position(|t| &t.turn.id == id)
                    .ok_or_else(|| StoreError::not_found("turn", format!("{src}/{id}")))?
                    + 1
            }
            None => history.len(),
        };
        let now = now_ms();
        for (i, twi) in history.iter().take(end).enumerate() {
            let mut items: &[ItemRow] = &twi.items;
            if i + 1 == end {
                if let Some(item_id) = cut_item {
                    let pos = items
                        .iter()
                        .position(|it| it.id == item_id)
                        .ok_or_else(|| {
                            StoreError::not_found(
                                "item",
                                format!("{src}/{}/{item_id}", twi.turn.id),
                            )
                        })?;
                    items = items.get(..=pos).unwrap_or(items);
                }
            }
            let mut turn = twi.turn.clone();
            turn.thread_id = dst.to_string();
            if turn.status == turn_status::IN_PROGRESS {
                turn.status = turn_status::INTERRUPTED.to_string();
                turn.completed_at_ms.get_or_insert(now);
            }
            self.insert_turn(&turn)?;
            for item in items {
                let mut item = item.clone();
                item.thread_id = dst.to_string();
                self.upsert_item(&item)?;
            }
        }
        Ok(())
    }
}

/// Turns (in order) with their items (in `seq` order) attached; an item whose turn is
/// missing is [`StoreError::Corrupt`] (unreachable with foreign keys on; never lose data
/// silently).
fn group_history(
    thread_id: &str,
    turns: Vec<TurnRow>,
    items: impl Iterator<Item = Result<ItemRow>>,
) -> Result<Vec<TurnWithItems>> {
    let index: HashMap<String, usize> = turns
        .iter()
        .enumerate()
        .map(|(i, t)| (t.id.clone(), i))
        .collect();
    let mut out: Vec<TurnWithItems> = turns
        .into_iter()
        .map(|turn| TurnWithItems {
            turn,
            items: Vec::new(),
        })
        .collect();
    for item in items {
        let item = item?;
        match index.get(&item.turn_id).and_then(|&i| out.get_mut(i)) {
            Some(t) => t.items.push(item),
            None => {
                return Err(StoreError::corrupt(
                    format!("items[{thread_id}/{}]", item.id),
                    format!("turn {} does not exist", item.turn_id),
                ))
            }
        }
    }
    Ok(out)
}

impl Tx<'_> {
    /// See [`crate::Store::insert_turn`].
    pub fn insert_turn(&self, t: &TurnRow) -> Result<()> {
        self.ops().insert_turn(t)
    }

    /// See [`crate::Store::update_turn`].
    pub fn update_turn(&self, t: &TurnRow) -> Result<()> {
        self.ops().update_turn(t)
    }

    /// Reads one turn. `Ok(None)` when it does not exist.
    pub fn get_turn(&self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>> {
        self.ops().get_turn(thread_id, turn_id)
    }

    /// See [`crate::Store::upsert_item`].
    pub fn upsert_item(&self, item: &ItemRow) -> Result<u64> {
        self.ops().upsert_item(item)
    }

    /// See [`crate::Store::delete_item`].
    pub fn delete_item(&self, thread_id: &str, item_id: &str) -> Result<()> {
        self.ops().delete_item(thread_id, item_id)
    }

    /// Reads one item. `Ok(None)` when it does not exist.
    pub fn get_item(&self, thread_id: &str, item_id: &str) -> Result<Option<ItemRow>> {
        let Some(conn) = self.lite else {
            return self.ops().get_item(thread_id, item_id);
        };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ITEM_COLS} FROM items WHERE thread_id = ?1 AND id = ?2"
        ))?;
        let mut rows = stmt.query([thread_id, item_id])?;
        match rows.next()? {
            Some(row) => item_from_row(row).map(Some),
            None => Ok(None),
        }
    }

    /// See [`crate::Store::load_history`] (SQLite: cached statements, rows decoded in
    /// place).
    pub fn load_history(&self, thread_id: &str) -> Result<Vec<TurnWithItems>> {
        let Some(conn) = self.lite else {
            return self.ops().load_history(thread_id);
        };
        let mut turns = Vec::new();
        {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {TURN_COLS} FROM turns WHERE thread_id = ?1 ORDER BY ordinal"
            ))?;
            let mut rows = stmt.query([thread_id])?;
            while let Some(row) = rows.next()? {
                turns.push(turn_from_row(row)?);
            }
        }
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {ITEM_COLS} FROM items WHERE thread_id = ?1 ORDER BY seq"
        ))?;
        let mut rows = stmt.query([thread_id])?;
        let mut items = Vec::new();
        while let Some(row) = rows.next()? {
            items.push(item_from_row(row));
        }
        group_history(thread_id, turns, items.into_iter())
    }

    /// See [`crate::Store::copy_history`].
    pub fn copy_history(
        &self,
        src: &str,
        dst: &str,
        cut_turn: Option<&str>,
        cut_item: Option<&str>,
    ) -> Result<()> {
        self.ops().copy_history(src, dst, cut_turn, cut_item)
    }
}
