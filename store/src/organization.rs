//! Conversation organization (folders, pins), the first turns of a conversation, and
//! rewinding a conversation's history (message edits).
//!
//! Folders live in `session_folders` (migration 2); a conversation's `pinned` and
//! `folder_id` live in its `threads.extra` JSON object.

use rusqlite::{params, OptionalExtension};

use crate::error::{Result, StoreError};
use crate::rows::{ThreadRow, TurnRow};
use crate::store::{Store, Tx};
use crate::util::get;

/// A conversation folder row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FolderRow {
    /// Folder id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Position (0 first).
    pub sort_order: i64,
    /// Unix ms.
    pub created_at_ms: i64,
    /// Unix ms.
    pub updated_at_ms: i64,
}

fn folder_from(row: &rusqlite::Row<'_>) -> Result<FolderRow> {
    let id: String = get(row, 0, "session_folders", "?")?;
    Ok(FolderRow {
        name: get(row, 1, "session_folders", &id)?,
        sort_order: get(row, 2, "session_folders", &id)?,
        created_at_ms: get(row, 3, "session_folders", &id)?,
        updated_at_ms: get(row, 4, "session_folders", &id)?,
        id,
    })
}

impl Tx<'_> {
    /// Every folder, in order (`sort_order`, then creation, then id).
    pub fn list_folders(&self) -> Result<Vec<FolderRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, name, sort_order, created_at_ms, updated_at_ms FROM session_folders \
             ORDER BY sort_order, created_at_ms, id",
        )?;
        let mut rows = stmt.query([])?;
        let mut out = vec![];
        while let Some(r) = rows.next()? {
            out.push(folder_from(r)?);
        }
        Ok(out)
    }

    /// One folder.
    pub fn get_folder(&self, id: &str) -> Result<Option<FolderRow>> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, name, sort_order, created_at_ms, updated_at_ms FROM session_folders \
             WHERE id = ?1",
        )?;
        let mut rows = stmt.query([id])?;
        match rows.next()? {
            Some(r) => Ok(Some(folder_from(r)?)),
            None => Ok(None),
        }
    }

    /// Creates a folder at the end of the order.
    pub fn create_folder(&self, id: &str, name: &str, now_ms: i64) -> Result<FolderRow> {
        let next: i64 = crate::util::query_row(
            self.conn,
            "SELECT coalesce(max(sort_order) + 1, 0) FROM session_folders",
            [],
            |r| r.get(0),
        )?;
        crate::util::execute(
            self.conn,
            "INSERT INTO session_folders (id, name, sort_order, created_at_ms, updated_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?4)",
            params![id, name, next, now_ms],
        )?;
        self.get_folder(id)?.ok_or(StoreError::NotFound {
            kind: "folder",
            id: id.to_owned(),
        })
    }

    /// Renames a folder; `Ok(None)` when it does not exist.
    pub fn rename_folder(&self, id: &str, name: &str, now_ms: i64) -> Result<Option<FolderRow>> {
        let n = crate::util::execute(
            self.conn,
            "UPDATE session_folders SET name = ?2, updated_at_ms = ?3 WHERE id = ?1",
            params![id, name, now_ms],
        )?;
        if n == 0 {
            return Ok(None);
        }
        self.get_folder(id)
    }

    /// Sets the order: `ids` must name every folder exactly once
    /// ([`StoreError::Invalid`] otherwise, nothing changed).
    pub fn reorder_folders(&self, ids: &[String], now_ms: i64) -> Result<()> {
        let current = self.list_folders()?;
        let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
        want.sort_unstable();
        let before = want.len();
        want.dedup();
        let mut have: Vec<&str> = current.iter().map(|f| f.id.as_str()).collect();
        have.sort_unstable();
        if want.len() != before || want != have {
            return Err(StoreError::Invalid(
                "ids must name every folder exactly once".into(),
            ));
        }
        for (i, id) in ids.iter().enumerate() {
            crate::util::execute(
                self.conn,
                "UPDATE session_folders SET sort_order = ?2, updated_at_ms = ?3 \
                 WHERE id = ?1 AND sort_order != ?2",
                params![id, i as i64, now_ms],
            )?;
        }
        Ok(())
    }

    /// Deletes a folder; its conversations leave it. Returns whether it existed and the
    /// ids of the conversations that left it.
    pub fn delete_folder(&self, id: &str) -> Result<(bool, Vec<String>)> {
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM threads WHERE json_extract(extra, '$.folder_id') = ?1",
        )?;
        let members: Vec<String> = stmt
            .query_map([id], |r| r.get(0))?
            .collect::<std::result::Result<_, _>>()?;
        crate::util::execute(
            self.conn,
            "UPDATE threads SET extra = json_remove(extra, '$.folder_id') \
             WHERE json_extract(extra, '$.folder_id') = ?1",
            [id],
        )?;
        let n = self
            .conn
            .execute("DELETE FROM session_folders WHERE id = ?1", [id])?;
        Ok((n > 0, members))
    }

    /// Sets (or, with `None`, removes) one member of a thread's `extra` object without
    /// touching its other columns. Returns the row after the change; `Ok(None)` when the
    /// thread does not exist.
    pub fn set_thread_extra(
        &self,
        id: &str,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<Option<ThreadRow>> {
        if !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || key.is_empty() {
            return Err(StoreError::Invalid(format!("extra key {key:?}")));
        }
        let path = format!("$.{key}");
        match value {
            Some(v) => crate::util::execute(
                self.conn,
                "UPDATE threads SET extra = json_set(extra, ?2, json(?3)) WHERE id = ?1",
                params![id, path, v.to_string()],
            )?,
            None => crate::util::execute(
                self.conn,
                "UPDATE threads SET extra = json_remove(extra, ?2) WHERE id = ?1",
                params![id, path],
            )?,
        };
        self.get_thread(id)
    }

    /// The oldest turn whose ordinal is above `after` (the first turn for 0), with its
    /// ordinal.
    pub fn turn_after(&self, thread_id: &str, after: i64) -> Result<Option<(i64, TurnRow)>> {
        let mut stmt = self.conn.prepare_cached(&format!(
            "SELECT {}, ordinal FROM turns WHERE thread_id = ?1 AND ordinal > ?2 \
             ORDER BY ordinal ASC LIMIT 1",
            crate::pages::TURN_COLS
        ))?;
        let mut rows = stmt.query(params![thread_id, after])?;
        match rows.next()? {
            Some(row) => {
                let turn = crate::history::turn_from_cells(row)?;
                let ordinal: i64 = get(row, 18, "turns", &turn.id)?;
                Ok(Some((ordinal, turn)))
            }
            None => Ok(None),
        }
    }

    /// Rewinds a thread's history: removes `from_turn_id` and every later turn (their
    /// items with them) — or, with `from_seq`, keeps that turn and removes only its items
    /// from that `seq` on, plus every later turn — and the explicit-continue claims of the
    /// removed turns. Returns the ids of the removed turns, oldest first;
    /// [`StoreError::NotFound`] when the turn does not exist.
    pub fn truncate_history(
        &self,
        thread_id: &str,
        from_turn_id: &str,
        from_seq: Option<u64>,
    ) -> Result<Vec<String>> {
        let ord: i64 = self
            .conn
            .query_row(
                "SELECT ordinal FROM turns WHERE thread_id = ?1 AND id = ?2",
                [thread_id, from_turn_id],
                |r| r.get(0),
            )
            .optional()?
            .ok_or_else(|| StoreError::NotFound {
                kind: "turn",
                id: format!("{thread_id}/{from_turn_id}"),
            })?;
        let first_removed = if from_seq.is_some() { ord + 1 } else { ord };
        if let Some(seq) = from_seq {
            let seq = i64::try_from(seq).map_err(|_| StoreError::Invalid("seq".into()))?;
            crate::util::execute(
                self.conn,
                "DELETE FROM items WHERE thread_id = ?1 AND turn_id = ?2 AND seq >= ?3",
                params![thread_id, from_turn_id, seq],
            )?;
        }
        let mut stmt = self.conn.prepare_cached(
            "SELECT id FROM turns WHERE thread_id = ?1 AND ordinal >= ?2 ORDER BY ordinal",
        )?;
        let ids: Vec<String> = stmt
            .query_map(params![thread_id, first_removed], |r| r.get(0))?
            .collect::<std::result::Result<_, _>>()?;
        for id in &ids {
            crate::util::execute(
                self.conn,
                "DELETE FROM continue_sources WHERE thread_id = ?1 AND source_turn_id = ?2",
                [thread_id, id],
            )?;
        }
        crate::util::execute(
            self.conn,
            "DELETE FROM items WHERE thread_id = ?1 AND turn_id IN \
             (SELECT id FROM turns WHERE thread_id = ?1 AND ordinal >= ?2)",
            params![thread_id, first_removed],
        )?;
        crate::util::execute(
            self.conn,
            "DELETE FROM turns WHERE thread_id = ?1 AND ordinal >= ?2",
            params![thread_id, first_removed],
        )?;
        Ok(ids)
    }
}

impl Store {
    /// See [`Tx::list_folders`].
    pub fn list_folders(&self) -> Result<Vec<FolderRow>> {
        self.read(|tx| tx.list_folders())
    }

    /// See [`Tx::create_folder`].
    pub fn create_folder(&mut self, id: &str, name: &str, now_ms: i64) -> Result<FolderRow> {
        self.transaction(|tx| tx.create_folder(id, name, now_ms))
    }

    /// See [`Tx::rename_folder`].
    pub fn rename_folder(
        &mut self,
        id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<Option<FolderRow>> {
        self.transaction(|tx| tx.rename_folder(id, name, now_ms))
    }

    /// See [`Tx::reorder_folders`].
    pub fn reorder_folders(&mut self, ids: &[String], now_ms: i64) -> Result<()> {
        self.transaction(|tx| tx.reorder_folders(ids, now_ms))
    }

    /// See [`Tx::delete_folder`].
    pub fn delete_folder(&mut self, id: &str) -> Result<(bool, Vec<String>)> {
        self.transaction(|tx| tx.delete_folder(id))
    }

    /// See [`Tx::get_folder`].
    pub fn get_folder(&self, id: &str) -> Result<Option<FolderRow>> {
        self.read(|tx| tx.get_folder(id))
    }

    /// See [`Tx::set_thread_extra`].
    pub fn set_thread_extra(
        &mut self,
        id: &str,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<Option<ThreadRow>> {
        self.transaction(|tx| tx.set_thread_extra(id, key, value))
    }

    /// See [`Tx::turn_after`].
    pub fn turn_after(&self, thread_id: &str, after: i64) -> Result<Option<(i64, TurnRow)>> {
        self.read(|tx| tx.turn_after(thread_id, after))
    }

    /// See [`Tx::truncate_history`].
    pub fn truncate_history(
        &mut self,
        thread_id: &str,
        from_turn_id: &str,
        from_seq: Option<u64>,
    ) -> Result<Vec<String>> {
        self.transaction(|tx| tx.truncate_history(thread_id, from_turn_id, from_seq))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::TurnRow;

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(&d.path().join("wuu.db")).unwrap();
        (d, s)
    }

    #[test]
    fn folders_persist_order_and_membership() {
        let (d, mut s) = store();
        let a = s.create_folder("f_a", "Alpha", 1).unwrap();
        let b = s.create_folder("f_b", "Beta", 2).unwrap();
        assert_eq!((a.sort_order, b.sort_order), (0, 1));
        s.insert_thread(&ThreadRow::new("t1", "/w", 1)).unwrap();
        let row = s
            .set_thread_extra("t1", "folder_id", Some(&serde_json::json!("f_b")))
            .unwrap()
            .unwrap();
        assert_eq!(row.extra["folder_id"], "f_b");
        s.reorder_folders(&["f_b".into(), "f_a".into()], 3).unwrap();
        assert!(s.reorder_folders(&["f_b".into()], 3).is_err());
        assert!(s.reorder_folders(&["f_b".into(), "f_b".into()], 3).is_err());
        assert_eq!(s.rename_folder("f_a", "A2", 4).unwrap().unwrap().name, "A2");
        assert!(s.rename_folder("nope", "x", 4).unwrap().is_none());
        drop(s);
        let mut s = Store::open(&d.path().join("wuu.db")).unwrap();
        let ids: Vec<String> = s
            .list_folders()
            .unwrap()
            .into_iter()
            .map(|f| f.id)
            .collect();
        assert_eq!(ids, vec!["f_b", "f_a"]);
        let (found, members) = s.delete_folder("f_b").unwrap();
        assert!(found);
        assert_eq!(members, vec!["t1"]);
        assert!(s
            .get_thread("t1")
            .unwrap()
            .unwrap()
            .extra
            .get("folder_id")
            .is_none());
        assert!(!s.delete_folder("f_b").unwrap().0);
    }

    #[test]
    fn truncate_removes_the_turn_and_later_ones() {
        let (_d, mut s) = store();
        s.insert_thread(&ThreadRow::new("t1", "/w", 1)).unwrap();
        for i in 1..=3 {
            s.insert_turn(&TurnRow::new("t1", format!("u{i}"), "user", i))
                .unwrap();
        }
        let removed = s.truncate_history("t1", "u2", None).unwrap();
        assert_eq!(removed, vec!["u2", "u3"]);
        assert_eq!(s.turn_after("t1", 0).unwrap().unwrap().1.id, "u1");
        assert!(s.turn_after("t1", 1).unwrap().is_none());
        assert!(s.truncate_history("t1", "u9", None).is_err());
        // Keeping the turn, from an item on.
        assert_eq!(
            s.truncate_history("t1", "u1", Some(5)).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(s.turn_after("t1", 0).unwrap().unwrap().1.id, "u1");
    }
}
