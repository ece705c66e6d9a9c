//! History and paged reads on PostgreSQL: the [`PgStore`] counterparts of the
//! [`crate::Store`] methods of `history.rs` and `pages.rs`, each one transaction over
//! the shared row logic ([`crate::sql::Ops`]). README "Several hosts, one database".

use super::PgStore;
use crate::error::Result;
use crate::pages::ItemHead;
use crate::rows::{ItemRow, TurnRow, TurnWithItems};

impl PgStore {
    /// See [`crate::Store::get_item`].
    pub fn get_item(&mut self, thread_id: &str, item_id: &str) -> Result<Option<ItemRow>> {
        self.transaction(None, |ops| ops.get_item(thread_id, item_id))
    }

    /// See [`crate::Store::delete_item`].
    pub fn delete_item(&mut self, thread_id: &str, item_id: &str) -> Result<()> {
        self.transaction(Some(thread_id), |ops| ops.delete_item(thread_id, item_id))
    }

    /// See [`crate::Store::load_history`].
    pub fn load_history(&mut self, thread_id: &str) -> Result<Vec<TurnWithItems>> {
        self.transaction(None, |ops| ops.load_history(thread_id))
    }

    /// See [`crate::Store::copy_history`]: all or nothing, in one transaction.
    pub fn copy_history(
        &mut self,
        src: &str,
        dst: &str,
        cut_turn: Option<&str>,
        cut_item: Option<&str>,
    ) -> Result<()> {
        self.transaction(Some(dst), |ops| {
            ops.copy_history(src, dst, cut_turn, cut_item)
        })
    }

    /// See [`crate::Store::turn_ordinal`].
    pub fn turn_ordinal(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<i64>> {
        self.transaction(None, |ops| ops.turn_ordinal(thread_id, turn_id))
    }

    /// See [`crate::Store::turn_before`].
    pub fn turn_before(
        &mut self,
        thread_id: &str,
        before: Option<i64>,
    ) -> Result<Option<(i64, TurnRow)>> {
        self.transaction(None, |ops| ops.turn_before(thread_id, before))
    }

    /// See [`crate::Store::item_heads`].
    pub fn item_heads(&mut self, thread_id: &str, turn_id: &str) -> Result<Vec<ItemHead>> {
        self.transaction(None, |ops| ops.item_heads(thread_id, turn_id))
    }

    /// See [`crate::Store::item_locator`].
    pub fn item_locator(
        &mut self,
        thread_id: &str,
        item_id: &str,
    ) -> Result<Option<(String, u64)>> {
        self.transaction(None, |ops| ops.item_locator(thread_id, item_id))
    }

    /// See [`crate::Store::item_body_range`]: the server cuts the range, the body is not
    /// sent whole.
    pub fn item_body_range(
        &mut self,
        thread_id: &str,
        item_id: &str,
        offset: u64,
        len: usize,
    ) -> Result<Option<(Vec<u8>, u64)>> {
        self.transaction(None, |ops| {
            ops.item_body_range(thread_id, item_id, offset, len)
        })
    }

    /// See [`crate::Store::stream_item_body`]: the body is fetched in `chunk`-byte
    /// ranges inside one transaction.
    pub fn stream_item_body(
        &mut self,
        thread_id: &str,
        item_id: &str,
        chunk: usize,
        f: impl FnMut(&[u8]),
    ) -> Result<bool> {
        self.transaction(None, |ops| {
            ops.stream_item_body(thread_id, item_id, chunk, f)
        })
    }
}
