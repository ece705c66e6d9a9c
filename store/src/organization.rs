//! Conversation organization (folders, pins), the first turns of a conversation, and
//! rewinding a conversation's history (message edits).
//!
//! Folders live in `session_folders` (migration 2); a conversation's `pinned` and
//! `folder_id` live in its `threads.extra` JSON object.

use crate::error::{Result, StoreError};
use crate::rows::{ThreadRow, TurnRow};
use crate::sql::{values, Cells, Dialect, Ops};
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

fn folder_from(row: &(impl Cells + ?Sized)) -> Result<FolderRow> {
    let id: String = get(row, 0, "session_folders", "?")?;
    Ok(FolderRow {
        name: get(row, 1, "session_folders", &id)?,
        sort_order: get(row, 2, "session_folders", &id)?,
        created_at_ms: get(row, 3, "session_folders", &id)?,
        updated_at_ms: get(row, 4, "session_folders", &id)?,
        id,
    })
}

/// The first column of every row, as text.
fn ids(rows: &[crate::sql::ValueRow], table: &str) -> Result<Vec<String>> {
    rows.iter().map(|r| get(r, 0, table, "?")).collect()
}

impl Ops<'_> {
    /// See [`Tx::list_folders`].
    pub(crate) fn list_folders(&self) -> Result<Vec<FolderRow>> {
        let rows = self.conn.rows(
            "SELECT id, name, sort_order, created_at_ms, updated_at_ms FROM session_folders \
             ORDER BY sort_order, created_at_ms, id",
            &[],
        )?;
        rows.iter().map(folder_from).collect()
    }

    /// See [`Tx::get_folder`].
    pub(crate) fn get_folder(&self, id: &str) -> Result<Option<FolderRow>> {
        let rows = self.conn.rows(
            "SELECT id, name, sort_order, created_at_ms, updated_at_ms FROM session_folders \
             WHERE id = ?1",
            &values![id],
        )?;
        rows.first().map(folder_from).transpose()
    }

    /// See [`Tx::create_folder`].
    pub(crate) fn create_folder(&self, id: &str, name: &str, now_ms: i64) -> Result<FolderRow> {
        let rows = self.conn.rows(
            "SELECT coalesce(max(sort_order) + 1, 0) FROM session_folders",
            &[],
        )?;
        let next: i64 = match rows.first() {
            Some(r) => get(r, 0, "session_folders", "max(sort_order)")?,
            None => 0,
        };
        self.conn.exec(
            "INSERT INTO session_folders (id, name, sort_order, created_at_ms, updated_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?4)",
            &values![id, name, next, now_ms],
        )?;
        self.get_folder(id)?.ok_or(StoreError::NotFound {
            kind: "folder",
            id: id.to_owned(),
        })
    }

    /// See [`Tx::rename_folder`].
    pub(crate) fn rename_folder(
        &self,
        id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<Option<FolderRow>> {
        let n = self.conn.exec(
            "UPDATE session_folders SET name = ?2, updated_at_ms = ?3 WHERE id = ?1",
            &values![id, name, now_ms],
        )?;
        if n == 0 {
            return Ok(None);
        }
        self.get_folder(id)
    }

    /// See [`Tx::reorder_folders`].
    pub(crate) fn reorder_folders(&self, ids: &[String], now_ms: i64) -> Result<()> {
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
            self.conn.exec(
                "UPDATE session_folders SET sort_order = ?2, updated_at_ms = ?3 \
                 WHERE id = ?1 AND sort_order != ?2",
                &values![id, i as i64, now_ms],
            )?;
        }
        Ok(())
    }

    /// See [`Tx::delete_folder`].
    pub(crate) fn delete_folder(&self, id: &str) -> Result<(bool, Vec<String>)> {
        let members = ids(
            &self.conn.rows(
                "SELECT id FROM threads WHERE json_extract(extra, '$.folder_id') = ?1 \
                 ORDER BY id",
                &values![id],
            )?,
            "threads",
        )?;
        let remove = match self.conn.dialect() {
            Dialect::Sqlite => "json_remove(extra, '$.folder_id')",
            Dialect::Postgres => "CAST(CAST(extra AS jsonb) - 'folder_id' AS TEXT)",
        };
        self.conn.exec(
            &format!(
                "UPDATE threads SET extra = {remove} \
                 WHERE json_extract(extra, '$.folder_id') = ?1"
            ),
            &values![id],
        )?;
        let n = self
            .conn
            .exec("DELETE FROM session_folders WHERE id = ?1", &values![id])?;
        Ok((n > 0, members))
    }

    /// See [`Tx::set_thread_extra`].
    pub(crate) fn set_thread_extra(
        &self,
        id: &str,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<Option<ThreadRow>> {
        if !key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') || key.is_empty() {
            return Err(StoreError::Invalid(format!("extra key {key:?}")));
        }
        let sqlite = self.conn.dialect() == Dialect::Sqlite;
        let path = if sqlite {
            format!("$.{key}")
        } else {
            key.to_string()
        };
        match (value, sqlite) {
            (Some(v), true) => self.conn.exec(
                "UPDATE threads SET extra = json_set(extra, ?2, json(?3)) WHERE id = ?1",
                &values![id, path, v.to_string()],
            )?,
            (Some(v), false) => self.conn.exec(
                "UPDATE threads SET extra = CAST(jsonb_set(CAST(extra AS jsonb), \
                 ARRAY[CAST(?2 AS TEXT)], CAST(?3 AS jsonb), true) AS TEXT) WHERE id = ?1",
                &values![id, path, v.to_string()],
            )?,
            (None, true) => self.conn.exec(
                "UPDATE threads SET extra = json_remove(extra, ?2) WHERE id = ?1",
                &values![id, path],
            )?,
            (None, false) => self.conn.exec(
                "UPDATE threads SET extra = CAST(CAST(extra AS jsonb) - CAST(?2 AS TEXT) AS TEXT) \
                 WHERE id = ?1",
                &values![id, path],
            )?,
        };
        self.get_thread(id)
    }

    /// See [`Tx::turn_after`].
    pub(crate) fn turn_after(&self, thread_id: &str, after: i64) -> Result<Option<(i64, TurnRow)>> {
        let rows = self.conn.rows(
            &format!(
                "SELECT {}, ordinal FROM turns WHERE thread_id = ?1 AND ordinal > ?2 \
                 ORDER BY ordinal ASC LIMIT 1",
                crate::pages::TURN_COLS
            ),
            &values![thread_id, after],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let turn = crate::history::turn_from_cells(row)?;
        let ordinal: i64 = get(row, 18, "turns", &turn.id)?;
        Ok(Some((ordinal, turn)))
    }

    /// See [`Tx::truncate_history`].
    pub(crate) fn truncate_history(
        &self,
        thread_id: &str,
        from_turn_id: &str,
        from_seq: Option<u64>,
    ) -> Result<Vec<String>> {
        let ord: i64 =
            self.turn_ordinal(thread_id, from_turn_id)?
                .ok_or_else(|| StoreError::NotFound {
                    kind: "turn",
                    id: format!("{thread_id}/{from_turn_id}"),
                })?;
        let first_removed = if from_seq.is_some() { ord + 1 } else { ord };
        if let Some(seq) = from_seq {
            let seq = i64::try_from(seq).map_err(|_| StoreError::Invalid("seq".into()))?;
            self.conn.exec(
                "DELETE FROM items WHERE thread_id = ?1 AND turn_id = ?2 AND seq >= ?3",
                &values![thread_id, from_turn_id, seq],
            )?;
        }
        let removed = ids(
            &self.conn.rows(
                "SELECT id FROM turns WHERE thread_id = ?1 AND ordinal >= ?2 ORDER BY ordinal",
                &values![thread_id, first_removed],
            )?,
            "turns",
        )?;
        for id in &removed {
            self.conn.exec(
                "DELETE FROM continue_sources WHERE thread_id = ?1 AND source_turn_id = ?2",
                &values![thread_id, id],
            )?;
        }
        self.conn.exec(
            "DELETE FROM items WHERE thread_id = ?1 AND turn_id IN \
             (SELECT id FROM turns WHERE thread_id = ?1 AND ordinal >= ?2)",
            &values![thread_id, first_removed],
        )?;
        self.conn.exec(
            "DELETE FROM turns WHERE thread_id = ?1 AND ordinal >= ?2",
            &values![thread_id, first_removed],
        )?;
        Ok(removed)
    }
}

impl Tx<'_> {
    /// Every folder, in order (`sort_order`, then creation, then id).
    pub fn list_folders(&self) -> Result<Vec<FolderRow>> {
        self.ops().list_folders()
    }

    /// One folder.
    pub fn get_folder(&self, id: &str) -> Result<Option<FolderRow>> {
        self.ops().get_folder(id)
    }

    /// Creates a folder at the end of the order.
    pub fn create_folder(&self, id: &str, name: &str, now_ms: i64) -> Result<FolderRow> {
        self.ops().create_folder(id, name, now_ms)
    }

    /// Renames a folder; `Ok(None)` when it does not exist.
    pub fn rename_folder(&self, id: &str, name: &str, now_ms: i64) -> Result<Option<FolderRow>> {
        self.ops().rename_folder(id, name, now_ms)
    }

    /// Sets the order: `ids` must name every folder exactly once
    /// ([`StoreError::Invalid`] otherwise, nothing changed).
    pub fn reorder_folders(&self, ids: &[String], now_ms: i64) -> Result<()> {
        self.ops().reorder_folders(ids, now_ms)
    }

    /// Deletes a folder; its conversations leave it. Returns whether it existed and the
    /// ids of the conversations that left it (by id).
    pub fn delete_folder(&self, id: &str) -> Result<(bool, Vec<String>)> {
        self.ops().delete_folder(id)
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
        self.ops().set_thread_extra(id, key, value)
    }

    /// The oldest turn whose ordinal is above `after` (the first turn for 0), with its
    /// ordinal.
    pub fn turn_after(&self, thread_id: &str, after: i64) -> Result<Option<(i64, TurnRow)>> {
        self.ops().turn_after(thread_id, after)
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
        self.ops()
            .truncate_history(thread_id, from_turn_id, from_seq)
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
    //! Run against both backends (see `history_tests`).
    use super::*;
    use crate::history_tests::{both, lite, History};

    /// The organization calls these tests make, on either backend.
    trait Org: History {
        /// Closes the connection and opens the same database again.
        fn reopen(&mut self);
        fn list_folders(&mut self) -> Result<Vec<FolderRow>>;
        fn create_folder(&mut self, id: &str, name: &str, now: i64) -> Result<FolderRow>;
        fn rename_folder(&mut self, id: &str, name: &str, now: i64) -> Result<Option<FolderRow>>;
        fn reorder_folders(&mut self, ids: &[String], now: i64) -> Result<()>;
        fn delete_folder(&mut self, id: &str) -> Result<(bool, Vec<String>)>;
        fn set_thread_extra(
            &mut self,
            id: &str,
            key: &str,
            value: Option<&serde_json::Value>,
        ) -> Result<Option<ThreadRow>>;
        fn get_thread(&mut self, id: &str) -> Result<Option<ThreadRow>>;
        fn turn_after(&mut self, thread_id: &str, after: i64) -> Result<Option<(i64, TurnRow)>>;
        fn truncate_history(
            &mut self,
            thread_id: &str,
            from_turn_id: &str,
            from_seq: Option<u64>,
        ) -> Result<Vec<String>>;
    }

    macro_rules! delegate_org {
        ($ty:ty, $reopen:expr) => {
            impl Org for $ty {
                fn reopen(&mut self) {
                    *self = $reopen(self);
                }
                fn list_folders(&mut self) -> Result<Vec<FolderRow>> {
                    <$ty>::list_folders(self)
                }
                fn create_folder(&mut self, id: &str, name: &str, now: i64) -> Result<FolderRow> {
                    <$ty>::create_folder(self, id, name, now)
                }
                fn rename_folder(
                    &mut self,
                    id: &str,
                    name: &str,
                    now: i64,
                ) -> Result<Option<FolderRow>> {
                    <$ty>::rename_folder(self, id, name, now)
                }
                fn reorder_folders(&mut self, ids: &[String], now: i64) -> Result<()> {
                    <$ty>::reorder_folders(self, ids, now)
                }
                fn delete_folder(&mut self, id: &str) -> Result<(bool, Vec<String>)> {
                    <$ty>::delete_folder(self, id)
                }
                fn set_thread_extra(
                    &mut self,
                    id: &str,
                    key: &str,
                    value: Option<&serde_json::Value>,
                ) -> Result<Option<ThreadRow>> {
                    <$ty>::set_thread_extra(self, id, key, value)
                }
                fn get_thread(&mut self, id: &str) -> Result<Option<ThreadRow>> {
                    <$ty>::get_thread(self, id)
                }
                fn turn_after(
                    &mut self,
                    thread_id: &str,
                    after: i64,
                ) -> Result<Option<(i64, TurnRow)>> {
                    <$ty>::turn_after(self, thread_id, after)
                }
                fn truncate_history(
                    &mut self,
                    thread_id: &str,
                    from_turn_id: &str,
                    from_seq: Option<u64>,
                ) -> Result<Vec<String>> {
                    <$ty>::truncate_history(self, thread_id, from_turn_id, from_seq)
                }
            }
        };
    }

    fn reopen_lite(s: &Store) -> Store {
        Store::open(s.path()).unwrap()
    }

    #[cfg(feature = "postgres")]
    fn reopen_pg(s: &crate::pg::PgStore) -> crate::pg::PgStore {
        crate::pg::PgStore::open(s.url()).unwrap()
    }

    delegate_org!(Store, reopen_lite);
    #[cfg(feature = "postgres")]
    delegate_org!(crate::pg::PgStore, reopen_pg);

    both!(
        folders_persist_order_and_membership_sqlite,
        folders_persist_order_and_membership_postgres,
        folders_persist_order_and_membership
    );
    both!(
        truncate_removes_the_turn_and_later_ones_sqlite,
        truncate_removes_the_turn_and_later_ones_postgres,
        truncate_removes_the_turn_and_later_ones
    );
    both!(
        thread_extras_are_set_and_removed_one_key_at_a_time_sqlite,
        thread_extras_are_set_and_removed_one_key_at_a_time_postgres,
        thread_extras_are_set_and_removed_one_key_at_a_time
    );

    fn folders_persist_order_and_membership(s: &mut impl Org) {
        let a = s.create_folder("f_a", "Alpha", 1).unwrap();
        let b = s.create_folder("f_b", "Beta", 2).unwrap();
        assert_eq!((a.sort_order, b.sort_order), (0, 1));
        s.insert_thread(&ThreadRow::new("t1", "/w", 1)).unwrap();
        s.insert_thread(&ThreadRow::new("t2", "/w", 1)).unwrap();
        let row = s
            .set_thread_extra("t1", "folder_id", Some(&serde_json::json!("f_b")))
            .unwrap()
            .unwrap();
        assert_eq!(row.extra["folder_id"], "f_b");
        s.set_thread_extra("t2", "folder_id", Some(&serde_json::json!("f_a")))
            .unwrap();
        s.reorder_folders(&["f_b".into(), "f_a".into()], 3).unwrap();
        assert!(s.reorder_folders(&["f_b".into()], 3).is_err());
        assert!(s.reorder_folders(&["f_b".into(), "f_b".into()], 3).is_err());
        assert_eq!(s.rename_folder("f_a", "A2", 4).unwrap().unwrap().name, "A2");
        assert!(s.rename_folder("nope", "x", 4).unwrap().is_none());
        s.reopen();
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
        assert_eq!(
            s.get_thread("t2").unwrap().unwrap().extra["folder_id"],
            "f_a"
        );
        assert!(!s.delete_folder("f_b").unwrap().0);
    }

    fn thread_extras_are_set_and_removed_one_key_at_a_time(s: &mut impl Org) {
        let mut t = ThreadRow::new("t1", "/w", 1);
        t.extra = serde_json::json!({"keep": {"n": 1}});
        s.insert_thread(&t).unwrap();
        let pinned = serde_json::json!({"at": 5, "why": ["a", "b"]});
        let row = s
            .set_thread_extra("t1", "pinned", Some(&pinned))
            .unwrap()
            .unwrap();
        assert_eq!(
            row.extra,
            serde_json::json!({"keep": {"n": 1}, "pinned": pinned})
        );
        let row = s.set_thread_extra("t1", "pinned", None).unwrap().unwrap();
        assert_eq!(row.extra, serde_json::json!({"keep": {"n": 1}}));
        assert!(s.set_thread_extra("t1", "a.b", None).is_err());
        assert!(s.set_thread_extra("t1", "", None).is_err());
        assert!(s.set_thread_extra("ghost", "x", None).unwrap().is_none());
    }

    fn truncate_removes_the_turn_and_later_ones(s: &mut impl Org) {
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
        for (id, ty) in [("a", "user_message"), ("b", "agent_message")] {
            s.upsert_item(&crate::history_tests::item("t1", "u1", id, ty, "x"))
                .unwrap();
        }
        let b_seq = s.get_item("t1", "b").unwrap().unwrap().seq;
        assert_eq!(
            s.truncate_history("t1", "u1", Some(b_seq)).unwrap(),
            Vec::<String>::new()
        );
        assert_eq!(s.turn_after("t1", 0).unwrap().unwrap().1.id, "u1");
        assert!(s.get_item("t1", "a").unwrap().is_some());
        assert!(s.get_item("t1", "b").unwrap().is_none());
    }
}
