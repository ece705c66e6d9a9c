//! Side chats and browser activities on PostgreSQL: the [`PgStore`] counterparts of the
//! [`crate::Store`] methods of `side.rs`. README "Several hosts, one database".

use super::PgStore;
use crate::error::Result;
use crate::side::{SideMessageRow, SideThreadRow};

impl PgStore {
    /// See [`crate::Store::side_thread`].
    pub fn side_thread(&mut self, main_thread_id: &str) -> Result<Option<SideThreadRow>> {
        self.transaction(None, |ops| ops.side_thread(main_thread_id))
    }

    /// See [`crate::Store::side_messages`].
    pub fn side_messages(&mut self, main_thread_id: &str) -> Result<Vec<SideMessageRow>> {
        self.transaction(None, |ops| ops.side_messages(main_thread_id))
    }

    /// See [`crate::Store::save_side_thread`].
    pub fn save_side_thread(&mut self, t: &SideThreadRow) -> Result<()> {
        self.transaction(Some(&t.main_thread_id), |ops| ops.save_side_thread(t))
    }

    /// See [`crate::Store::save_side_turn`].
    pub fn save_side_turn(&mut self, t: &SideThreadRow, m: &SideMessageRow) -> Result<()> {
        self.transaction(Some(&t.main_thread_id), |ops| {
            ops.save_side_thread(t)?;
            ops.save_side_message(&t.main_thread_id, m)
        })
    }

    /// See [`crate::Store::save_side_message`].
    pub fn save_side_message(&mut self, main_thread_id: &str, m: &SideMessageRow) -> Result<()> {
        self.transaction(Some(main_thread_id), |ops| {
            ops.save_side_message(main_thread_id, m)
        })
    }

    /// See [`crate::Store::delete_side_thread`].
    pub fn delete_side_thread(&mut self, main_thread_id: &str) -> Result<bool> {
        self.transaction(Some(main_thread_id), |ops| {
            ops.delete_side_thread(main_thread_id)
        })
    }

    /// See [`crate::Store::save_activity`].
    pub fn save_activity(&mut self, id: &str, thread_id: &str, body: &str) -> Result<()> {
        let now = crate::util::now_ms();
        self.transaction(Some(thread_id), |ops| {
            ops.save_activity(id, thread_id, body, now)
        })
    }

    /// See [`crate::Store::activities_of`].
    pub fn activities_of(&mut self, thread_id: &str) -> Result<Vec<(String, String)>> {
        self.transaction(None, |ops| ops.activities_of(thread_id))
    }
}
