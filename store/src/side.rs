//! Side chats (`side_threads`, `side_messages`): one side chat per main conversation and
//! its messages, in send order. Deleting the main conversation deletes its side chat
//! (foreign keys). Nothing here touches the main history (`turns`, `items`).

use crate::error::Result;
use crate::sql::{values, Ops, Value};
use crate::store::{Store, Tx};
use crate::util::get;

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

impl Ops<'_> {
    /// See [`Store::side_thread`].
    pub(crate) fn side_thread(&self, main_thread_id: &str) -> Result<Option<SideThreadRow>> {
        let rows = self.conn.rows(
            "SELECT id, status, revision, created_at_ms, updated_at_ms FROM side_threads \
             WHERE main_thread_id = ?1",
            &values![main_thread_id],
        )?;
        let Some(r) = rows.first() else {
            return Ok(None);
        };
        let (t, k) = ("side_threads", main_thread_id);
        Ok(Some(SideThreadRow {
            main_thread_id: main_thread_id.to_owned(),
            id: get(r, 0, t, k)?,
            status: get(r, 1, t, k)?,
            revision: get::<i64>(r, 2, t, k)?.max(0) as u64,
            created_at_ms: get(r, 3, t, k)?,
            updated_at_ms: get(r, 4, t, k)?,
        }))
    }

    /// See [`Store::side_messages`].
    pub(crate) fn side_messages(&self, main_thread_id: &str) -> Result<Vec<SideMessageRow>> {
        let rows = self.conn.rows(
            "SELECT id, role, text, status, error, created_at_ms FROM side_messages \
             WHERE main_thread_id = ?1 ORDER BY seq",
            &values![main_thread_id],
        )?;
        rows.iter()
            .map(|r| {
                let id: String = get(r, 0, "side_messages", main_thread_id)?;
                Ok(SideMessageRow {
                    role: get(r, 1, "side_messages", &id)?,
                    text: get(r, 2, "side_messages", &id)?,
                    status: get(r, 3, "side_messages", &id)?,
                    error: get(r, 4, "side_messages", &id)?,
                    created_at_ms: get(r, 5, "side_messages", &id)?,
                    id,
                })
            })
            .collect()
    }

    /// See [`Store::save_side_thread`].
    pub(crate) fn save_side_thread(&self, t: &SideThreadRow) -> Result<()> {
        self.conn.exec(
            "INSERT INTO side_threads (main_thread_id, id, status, revision, created_at_ms, \
             updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT (main_thread_id) DO UPDATE SET id = excluded.id, \
             status = excluded.status, revision = excluded.revision, \
             updated_at_ms = excluded.updated_at_ms",
            &[
                Value::from(&t.main_thread_id),
                Value::from(&t.id),
                Value::from(&t.status),
                Value::Int(i64::try_from(t.revision).unwrap_or(i64::MAX)),
                Value::from(t.created_at_ms),
                Value::from(t.updated_at_ms),
            ],
        )?;
        Ok(())
    }

    /// See [`Store::save_side_message`].
    pub(crate) fn save_side_message(&self, main_thread_id: &str, m: &SideMessageRow) -> Result<()> {
        let updated = self.conn.exec(
            "UPDATE side_messages SET text = ?3, status = ?4, error = ?5 \
             WHERE main_thread_id = ?1 AND id = ?2",
            &values![main_thread_id, &m.id, &m.text, &m.status, &m.error],
        )?;
        if updated == 0 {
            self.conn.exec(
                "INSERT INTO side_messages (main_thread_id, seq, id, role, text, status, error, \
                 created_at_ms) VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM \
                 side_messages WHERE main_thread_id = ?1), ?2, ?3, ?4, ?5, ?6, ?7)",
                &values![
                    main_thread_id,
                    &m.id,
                    &m.role,
                    &m.text,
                    &m.status,
                    &m.error,
                    m.created_at_ms
                ],
            )?;
        }
        Ok(())
    }

    /// See [`Store::delete_side_thread`].
    pub(crate) fn delete_side_thread(&self, main_thread_id: &str) -> Result<bool> {
        Ok(self.conn.exec(
            "DELETE FROM side_threads WHERE main_thread_id = ?1",
            &values![main_thread_id],
        )? > 0)
    }

    /// See [`Store::save_activity`].
    pub(crate) fn save_activity(
        &self,
        id: &str,
        thread_id: &str,
        body: &str,
        now_ms: i64,
    ) -> Result<()> {
        self.conn.exec(
            "INSERT INTO activities (id, thread_id, body, updated_at_ms) \
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (id) DO UPDATE SET body = excluded.body, \
             updated_at_ms = excluded.updated_at_ms",
            &values![id, thread_id, body, now_ms],
        )?;
        Ok(())
    }

    /// See [`Store::activities_of`].
    pub(crate) fn activities_of(&self, thread_id: &str) -> Result<Vec<(String, String)>> {
        let rows = self.conn.rows(
            "SELECT id, body FROM activities WHERE thread_id = ?1 ORDER BY rowid",
            &values![thread_id],
        )?;
        rows.iter()
            .map(|r| {
                let id: String = get(r, 0, "activities", thread_id)?;
                let body: String = get(r, 1, "activities", &id)?;
                Ok((id, body))
            })
            .collect()
    }
}

impl Tx<'_> {
    /// See [`Store::side_thread`].
    pub fn side_thread(&self, main_thread_id: &str) -> Result<Option<SideThreadRow>> {
        self.ops().side_thread(main_thread_id)
    }

    /// See [`Store::side_messages`].
    pub fn side_messages(&self, main_thread_id: &str) -> Result<Vec<SideMessageRow>> {
        self.ops().side_messages(main_thread_id)
    }

    /// See [`Store::save_side_thread`].
    pub fn save_side_thread(&self, t: &SideThreadRow) -> Result<()> {
        self.ops().save_side_thread(t)
    }

    /// See [`Store::save_side_message`].
    pub fn save_side_message(&self, main_thread_id: &str, m: &SideMessageRow) -> Result<()> {
        self.ops().save_side_message(main_thread_id, m)
    }

    /// See [`Store::delete_side_thread`].
    pub fn delete_side_thread(&self, main_thread_id: &str) -> Result<bool> {
        self.ops().delete_side_thread(main_thread_id)
    }
}

impl Store {
    /// Records the state of browser activity `id` of `thread_id` (`body`: its wire
    /// JSON). Fails with a foreign-key error for a conversation that is not stored.
    pub fn save_activity(&mut self, id: &str, thread_id: &str, body: &str) -> Result<()> {
        let now = crate::util::now_ms();
        self.transaction(|tx| tx.ops().save_activity(id, thread_id, body, now))
    }

    /// The recorded activities of `thread_id`: `(id, body)`, oldest first.
    pub fn activities_of(&self, thread_id: &str) -> Result<Vec<(String, String)>> {
        self.read(|tx| tx.ops().activities_of(thread_id))
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

#[cfg(test)]
mod tests {
    //! Run against both backends (see `history_tests`).
    use super::*;
    use crate::history_tests::{both, lite, thread, History};
    use crate::DeleteOutcome;

    /// The side chat calls these tests make, on either backend.
    trait Side: History {
        fn side_thread(&mut self, main: &str) -> Result<Option<SideThreadRow>>;
        fn side_messages(&mut self, main: &str) -> Result<Vec<SideMessageRow>>;
        fn save_side_thread(&mut self, t: &SideThreadRow) -> Result<()>;
        fn save_side_turn(&mut self, t: &SideThreadRow, m: &SideMessageRow) -> Result<()>;
        fn save_side_message(&mut self, main: &str, m: &SideMessageRow) -> Result<()>;
        fn delete_side_thread(&mut self, main: &str) -> Result<bool>;
        fn save_activity(&mut self, id: &str, thread_id: &str, body: &str) -> Result<()>;
        fn activities_of(&mut self, thread_id: &str) -> Result<Vec<(String, String)>>;
        fn delete_thread(&mut self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome>;
    }

    macro_rules! delegate_side {
        ($ty:ty) => {
            impl Side for $ty {
                fn side_thread(&mut self, main: &str) -> Result<Option<SideThreadRow>> {
                    <$ty>::side_thread(self, main)
                }
                fn side_messages(&mut self, main: &str) -> Result<Vec<SideMessageRow>> {
                    <$ty>::side_messages(self, main)
                }
                fn save_side_thread(&mut self, t: &SideThreadRow) -> Result<()> {
                    <$ty>::save_side_thread(self, t)
                }
                fn save_side_turn(&mut self, t: &SideThreadRow, m: &SideMessageRow) -> Result<()> {
                    <$ty>::save_side_turn(self, t, m)
                }
                fn save_side_message(&mut self, main: &str, m: &SideMessageRow) -> Result<()> {
                    <$ty>::save_side_message(self, main, m)
                }
                fn delete_side_thread(&mut self, main: &str) -> Result<bool> {
                    <$ty>::delete_side_thread(self, main)
                }
                fn save_activity(&mut self, id: &str, thread_id: &str, body: &str) -> Result<()> {
                    <$ty>::save_activity(self, id, thread_id, body)
                }
                fn activities_of(&mut self, thread_id: &str) -> Result<Vec<(String, String)>> {
                    <$ty>::activities_of(self, thread_id)
                }
                fn delete_thread(
                    &mut self,
                    id: &str,
                    only_if_archived: bool,
                ) -> Result<DeleteOutcome> {
                    <$ty>::delete_thread(self, id, only_if_archived)
                }
            }
        };
    }

    delegate_side!(Store);
    #[cfg(feature = "postgres")]
    delegate_side!(crate::pg::PgStore);

    both!(
        side_chats_keep_their_messages_apart_and_go_with_their_conversation_sqlite,
        side_chats_keep_their_messages_apart_and_go_with_their_conversation_postgres,
        side_chats_keep_their_messages_apart_and_go_with_their_conversation
    );

    fn side_chats_keep_their_messages_apart_and_go_with_their_conversation(store: &mut impl Side) {
        store.insert_thread(&thread("m1", "/w", 1)).unwrap();
        let mut row = SideThreadRow {
            main_thread_id: "m1".into(),
            id: "side_1".into(),
            status: "running".into(),
            revision: 1,
            created_at_ms: 5,
            updated_at_ms: 5,
        };
        let q = SideMessageRow {
            id: "q".into(),
            role: "user".into(),
            text: "status?".into(),
            status: None,
            error: None,
            created_at_ms: 5,
        };
        let mut a = SideMessageRow {
            id: "a".into(),
            role: "assistant".into(),
            text: String::new(),
            status: Some("streaming".into()),
            error: None,
            created_at_ms: 5,
        };
        store.save_side_turn(&row, &q).unwrap();
        store.save_side_message("m1", &a).unwrap();
        a.text = "running tests".into();
        a.status = Some("completed".into());
        row.status = "completed".into();
        row.revision = 2;
        store.save_side_turn(&row, &a).unwrap();
        assert_eq!(store.side_thread("m1").unwrap(), Some(row.clone()));
        let msgs = store.side_messages("m1").unwrap();
        assert_eq!(msgs, vec![q, a]);
        // The main history is untouched.
        assert!(store.load_history("m1").unwrap().is_empty());
        // A side chat needs a stored main conversation.
        let mut orphan = row.clone();
        orphan.main_thread_id = "nope".into();
        assert!(store.save_side_thread(&orphan).is_err());
        // Activities are recorded per conversation.
        store
            .save_activity("act_1", "m1", r#"{"id":"act_1"}"#)
            .unwrap();
        store
            .save_activity("act_1", "m1", r#"{"id":"act_1","state":"stopped"}"#)
            .unwrap();
        store.save_activity("act_0", "m1", "{}").unwrap();
        store
            .save_activity("act_1", "m1", r#"{"id":"act_1","state":"stopped"}"#)
            .unwrap();
        assert_eq!(
            store.activities_of("m1").unwrap(),
            vec![
                (
                    "act_1".to_owned(),
                    r#"{"id":"act_1","state":"stopped"}"#.to_owned()
                ),
                ("act_0".to_owned(), "{}".to_owned())
            ],
            "in the order first recorded"
        );
        // Deleting the main conversation deletes its side chat and activities.
        store.delete_thread("m1", false).unwrap();
        assert_eq!(store.side_thread("m1").unwrap(), None);
        assert!(store.side_messages("m1").unwrap().is_empty());
        assert!(store.activities_of("m1").unwrap().is_empty());
        // Reset.
        store.insert_thread(&thread("m2", "/w", 1)).unwrap();
        row.main_thread_id = "m2".into();
        store.save_side_thread(&row).unwrap();
        assert!(store.delete_side_thread("m2").unwrap());
        assert!(!store.delete_side_thread("m2").unwrap());
    }
}
