//! Thread updates, the listing visitor and search on PostgreSQL: the [`PgStore`]
//! counterparts of the [`crate::Store`] thread methods beyond those in `mod.rs`
//! (search and the visitor are `crate::search`). README "Several hosts, one database".

use super::PgStore;
use crate::error::Result;
use crate::rows::{SearchHit, ThreadFilter, ThreadRow, ThreadView};

impl PgStore {
    /// See [`crate::Store::thread_exists`].
    pub fn thread_exists(&mut self, id: &str) -> Result<bool> {
        self.transaction(None, |ops| ops.thread_exists(id))
    }

    /// See [`crate::Store::update_thread`].
    pub fn update_thread(&mut self, t: &ThreadRow) -> Result<()> {
        self.transaction(Some(&t.id), |ops| ops.update_thread(t))
    }

    /// See [`crate::Store::set_title`].
    pub fn set_title(
        &mut self,
        id: &str,
        title: Option<&str>,
        revision: u64,
    ) -> Result<Option<ThreadRow>> {
        self.transaction(Some(id), |ops| ops.set_title(id, title, revision))
    }

    /// See [`crate::Store::set_title_if_empty`].
    pub fn set_title_if_empty(
        &mut self,
        id: &str,
        title: &str,
        expected_revision: u64,
    ) -> Result<(Option<ThreadRow>, bool)> {
        self.transaction(Some(id), |ops| {
            ops.set_title_if_empty(id, title, expected_revision)
        })
    }

    /// See [`crate::Store::set_archived`].
    pub fn set_archived(
        &mut self,
        id: &str,
        archived: bool,
        reason: Option<&str>,
    ) -> Result<Option<ThreadRow>> {
        self.transaction(Some(id), |ops| ops.set_archived(id, archived, reason))
    }

    /// See [`crate::Store::latest_thread`].
    pub fn latest_thread(&mut self, cwd: &str) -> Result<Option<ThreadRow>> {
        self.transaction(None, |ops| ops.latest_thread(cwd))
    }

    /// See [`crate::Store::search_threads`].
    pub fn search_threads(&mut self, query: &str, limit: u32) -> Result<Vec<SearchHit>> {
        self.transaction(None, |ops| ops.search_threads(query, limit))
    }

    /// See [`crate::Store::visit_threads`].
    pub fn visit_threads(
        &mut self,
        filter: &ThreadFilter,
        visit: impl FnMut(&ThreadView<'_>) -> Result<()>,
    ) -> Result<usize> {
        self.transaction(None, |ops| ops.visit_threads(filter, visit))
    }
}
