//! Folders, thread extras and history rewinds on PostgreSQL: the [`PgStore`]
//! counterparts of the [`crate::Store`] methods of `organization.rs`. README "Several
//! hosts, one database".

use super::PgStore;
use crate::error::Result;
use crate::organization::FolderRow;
use crate::rows::{ThreadRow, TurnRow};

impl PgStore {
    /// See [`crate::Store::list_folders`].
    pub fn list_folders(&mut self) -> Result<Vec<FolderRow>> {
        self.transaction(None, |ops| ops.list_folders())
    }

    /// See [`crate::Store::get_folder`].
    pub fn get_folder(&mut self, id: &str) -> Result<Option<FolderRow>> {
        self.transaction(None, |ops| ops.get_folder(id))
    }

    /// See [`crate::Store::create_folder`].
    pub fn create_folder(&mut self, id: &str, name: &str, now_ms: i64) -> Result<FolderRow> {
        self.transaction(Some(""), |ops| ops.create_folder(id, name, now_ms))
    }

    /// See [`crate::Store::rename_folder`].
    pub fn rename_folder(
        &mut self,
        id: &str,
        name: &str,
        now_ms: i64,
    ) -> Result<Option<FolderRow>> {
        self.transaction(Some(""), |ops| ops.rename_folder(id, name, now_ms))
    }

    /// See [`crate::Store::reorder_folders`].
    pub fn reorder_folders(&mut self, ids: &[String], now_ms: i64) -> Result<()> {
        self.transaction(Some(""), |ops| ops.reorder_folders(ids, now_ms))
    }

    /// See [`crate::Store::delete_folder`].
    pub fn delete_folder(&mut self, id: &str) -> Result<(bool, Vec<String>)> {
        self.transaction(Some(""), |ops| ops.delete_folder(id))
    }

    /// See [`crate::Store::set_thread_extra`].
    pub fn set_thread_extra(
        &mut self,
        id: &str,
        key: &str,
        value: Option<&serde_json::Value>,
    ) -> Result<Option<ThreadRow>> {
        self.transaction(Some(id), |ops| ops.set_thread_extra(id, key, value))
    }

    /// See [`crate::Store::turn_after`].
    pub fn turn_after(&mut self, thread_id: &str, after: i64) -> Result<Option<(i64, TurnRow)>> {
        self.transaction(None, |ops| ops.turn_after(thread_id, after))
    }

    /// See [`crate::Store::truncate_history`].
    pub fn truncate_history(
        &mut self,
        thread_id: &str,
        from_turn_id: &str,
        from_seq: Option<u64>,
    ) -> Result<Vec<String>> {
        self.transaction(Some(thread_id), |ops| {
            ops.truncate_history(thread_id, from_turn_id, from_seq)
        })
    }
}
