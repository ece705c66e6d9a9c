//! Side chats (`side_threads`, `side_messages`): one side chat per main conversation and
//! its messages, in send order. Deleting the main conversation deletes its side chat
//! (foreign keys). Nothing here touches the main history (`turns`, `items`).

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::store::{Store, Tx};
use crate::util::{execute, get, query_row};

/// One side chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideThreadRow {
    /// The main conversation (key).
    pub main_thread_id: String,
    /// The side chat's own id.
    pub id: String,
    /// `running` | `completed` | `failed` | `interrupted`.
    pub status: String,
    /// Durable version, one up on every change.
    pub revision: u64,
    /// Unix ms.
    pub created_at_ms: i64,
    /// Unix ms.
    pub updated_at_ms: i64,
}

/// One message of a side chat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideMessageRow {
    /// Message id (unique within the side chat).
    pub id: String,
    /// `user` | `assistant`.
    pub role: String,
    /// The text.
    pub text: String,
    /// Assistant: `streaming` | `completed` | `failed` | `interrupted`.
    pub status: Option<String>,
    /// Assistant, when failed.
    pub error: Option<String>,
    /// Unix ms.
    pub created_at_ms: i64,
}

impl Tx<'_> {
    /// See [`Store::side_thread`].
    pub fn side_thread(&self, main_thread_id: &str) -> Result<Option<SideThreadRow>> {
        let row = query_row(
            self.conn,
            "SELECT id, status, revision, created_at_ms, updated_at_ms FROM side_threads \
             WHERE main_thread_id = ?1",
            params![main_thread_id],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            },
        )
        .optional()?;
        Ok(row.map(|(id, status, revision, c, u)| SideThreadRow {
            main_thread_id: main_thread_id.to_owned(),
            id,
            status,
            revision: revision.max(0) as u64,
            created_at_ms: c,
            updated_at_ms: u,
        }))
    }

    /// See [`Store::side_messages`].
    pub fn side_messages(&self, main_thread_id: &str) -> Result<Vec<SideMessageRow>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, role, text, status, error, created_at_ms FROM side_messages \
             WHERE main_thread_id = ?1 ORDER BY seq",
        )?;
        let mut rows = st.query(params![main_thread_id])?;
        let mut out = vec![];
        while let Some(r) = rows.next()? {
            let id: String = get(r, 0, "side_messages", main_thread_id)?;
            out.push(SideMessageRow {
                role: get(r, 1, "side_messages", &id)?,
                text: get(r, 2, "side_messages", &id)?,
                status: get(r, 3, "side_messages", &id)?,
                error: get(r, 4, "side_messages", &id)?,
                created_at_ms: get(r, 5, "side_messages", &id)?,
                id,
            });
        }
        Ok(out)
    }

    /// See [`Store::save_side_thread`].
    pub fn save_side_thread(&self, t: &SideThreadRow) -> Result<()> {
        execute(
            self.conn,
            "INSERT INTO side_threads (main_thread_id, id, status, revision, created_at_ms, \
             updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT (main_thread_id) DO UPDATE SET id = excluded.id, \
             status = excluded.status, revision = excluded.revision, \
             updated_at_ms = excluded.updated_at_ms",
            params![
                t.main_thread_id,
                t.id,
                t.status,
                i64::try_from(t.revision).unwrap_or(i64::MAX),
                t.created_at_ms,
                t.updated_at_ms
            ],
        )?;
        Ok(())
    }

    /// See [`Store::save_side_message`].
    pub fn save_side_message(&self, main_thread_id: &str, m: &SideMessageRow) -> Result<()> {
        let updated = execute(
            self.conn,
            "UPDATE side_messages SET text = ?3, status = ?4, error = ?5 \
             WHERE main_thread_id = ?1 AND id = ?2",
            params![main_thread_id, m.id, m.text, m.status, m.error],
        )?;
        if updated == 0 {
            execute(
                self.conn,
                "INSERT INTO side_messages (main_thread_id, seq, id, role, text, status, error, \
                 created_at_ms) VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM \
                 side_messages WHERE main_thread_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    main_thread_id,
                    m.id,
                    m.role,
                    m.text,
                    m.status,
                    m.error,
                    m.created_at_ms
                ],
            )?;
        }
        Ok(())
    }

    /// See [`Store::delete_side_thread`].
    pub fn delete_side_thread(&self, main_thread_id: &str) -> Result<bool> {
        Ok(execute(
            self.conn,
            "DELETE FROM side_threads WHERE main_thread_id = ?1",
            params![main_thread_id],
        )? > 0)
    }
}

impl Store {
    /// Records the state of browser activity `id` of `thread_id` (`body`: its wire
    /// JSON). Fails with a foreign-key error for a conversation that is not stored.
    pub fn save_activity(&mut self, id: &str, thread_id: &str, body: &str) -> Result<()> {
        self.transaction(|tx| {
            execute(
                tx.conn,
                "INSERT INTO activities (id, thread_id, body, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO UPDATE SET body = excluded.body, \
                 updated_at_ms = excluded.updated_at_ms",
                params![id, thread_id, body, crate::util::now_ms()],
            )?;
            Ok(())
        })
    }

    /// The recorded activities of `thread_id`: `(id, body)`, oldest first.
    pub fn activities_of(&self, thread_id: &str) -> Result<Vec<(String, String)>> {
        self.read(|tx| {
            let mut st = tx.conn.prepare_cached(
                "SELECT id, body FROM activities WHERE thread_id = ?1 ORDER BY rowid",
            )?;
            let mut rows = st.query(params![thread_id])?;
            let mut out = vec![];
            while let Some(r) = rows.next()? {
                let id: String = get(r, 0, "activities", thread_id)?;
                let body: String = get(r, 1, "activities", &id)?;
                out.push((id, body));
            }
            Ok(out)
        })
    }

    /// The side chat of `main_thread_id`, if one was ever sent to (and not reset).
    pub fn side_thread(&self, main_thread_id: &str) -> Result<Option<SideThreadRow>> {
        self.read(|tx| tx.side_thread(main_thread_id))
    }

    /// The messages of `main_thread_id`'s side chat, oldest first.
    pub fn side_messages(&self, main_thread_id: &str) -> Result<Vec<SideMessageRow>> {
        self.read(|tx| tx.side_messages(main_thread_id))
    }

    /// Inserts or updates a side chat (keyed by its main conversation, which must exist:
    /// a foreign-key error otherwise).
    pub fn save_side_thread(&mut self, t: &SideThreadRow) -> Result<()> {
        self.transaction(|tx| tx.save_side_thread(t))
    }

    /// Writes a side chat and one of its messages in one transaction (a new message is
    /// appended; an existing id gets its text, status and error replaced).
    pub fn save_side_turn(&mut self, t: &SideThreadRow, m: &SideMessageRow) -> Result<()> {
        self.transaction(|tx| {
            tx.save_side_thread(t)?;
            tx.save_side_message(&t.main_thread_id, m)
        })
    }

    /// Appends or updates one message of an existing side chat.
    pub fn save_side_message(&mut self, main_thread_id: &str, m: &SideMessageRow) -> Result<()> {
        self.transaction(|tx| tx.save_side_message(main_thread_id, m))
    }

    /// Deletes the side chat of `main_thread_id` and its messages; whether one existed.
    pub fn delete_side_thread(&mut self, main_thread_id: &str) -> Result<bool> {
        self.transaction(|tx| tx.delete_side_thread(main_thread_id))
    }
}
