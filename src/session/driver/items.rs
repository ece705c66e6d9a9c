//! The turn's items as the projector keeps them: opened in progress, announced
//! (`item/started`), persisted as they settle, completed (`item/completed`) or removed
//! (`item/removed`); spec `app-server.md` §4.5, §4.9. While the turn settles, items
//! completed are held for the settlement's transaction and announced after it.

use super::settle::Held;
use super::Driver;
use crate::util::now_ms;
use wuu_protocol::*;
use wuu_store::ItemRow;

impl Driver<'_> {
    pub(super) fn new_item(&mut self, ty: &str) -> usize {
        let id = format!("{}-item-{:04}", self.turn_id(), self.next_item);
        self.next_item += 1;
        let mut item = ThreadItem::new(id, ty);
        item.status = Some("in_progress".into());
        item.step = Some(self.step);
        let items = &mut self.s.turns[self.turn_idx].items;
        items.push(item);
        items.len() - 1
    }

    pub(super) fn item(&mut self, idx: usize) -> &mut ThreadItem {
        &mut self.s.turns[self.turn_idx].items[idx]
    }

    pub(super) fn announce_started(&mut self, idx: usize) {
        let n = ItemStarted {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            item: self.s.turns[self.turn_idx].items[idx].clone(),
            started_at_ms: now_ms() as u64,
        };
        if let Some(held) = self.settling.as_mut() {
            held.frames.push(Held::Started(n));
            return;
        }
        self.notify(&n);
    }

    /// Persists an item and announces `item/completed` (while the turn settles: both
    /// with the settlement, see [`super::settle::Settling`]).
    pub(super) fn complete_item(&mut self, idx: usize, status: &str) {
        self.flush_deltas(idx, |_| true);
        self.item(idx).status = Some(status.into());
        let item = self.s.turns[self.turn_idx].items[idx].clone();
        let row = self.settling.is_some().then(|| self.item_row(&item));
        if row.is_none() {
            let _ = self.persist_item(&item);
        }
        let n = ItemCompleted {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            item,
            completed_at_ms: now_ms() as u64,
        };
        match (row, self.settling.as_mut()) {
            (Some(row), Some(held)) => {
                held.rows.push(row);
                held.frames.push(Held::Completed(n));
            }
            _ => self.notify(&n),
        }
    }

    /// The store row of an item of this turn.
    pub(super) fn item_row(&self, item: &ThreadItem) -> ItemRow {
        ItemRow {
            thread_id: self.s.id.clone(),
            turn_id: self.turn_id(),
            id: item.id.clone(),
            item_type: item.item_type.clone(),
            status: item.status.clone(),
            seq: 0,
            body: serde_json::to_value(item).unwrap_or_default(),
        }
    }

    /// Persists an item, with the usage records not stored yet in the same transaction;
    /// returns whether the item was stored (ephemeral: always true).
    pub(super) fn persist_item(&mut self, item: &ThreadItem) -> bool {
        let row = self.item_row(item);
        let usage = std::mem::take(&mut self.unsaved_usage);
        let stored = if usage.is_empty() {
            self.s.persist(|st| st.upsert_item(&row))
        } else {
            let both = self.s.persist(|st| {
                st.transaction(|tx| {
                    for u in &usage {
                        tx.insert_usage(u)?;
                    }
                    tx.upsert_item(&row)
                })
            });
            if both.is_err() {
                // The records wait for the next write; the item is tried on its own.
                self.unsaved_usage = usage;
                self.s.persist(|st| st.upsert_item(&row))
            } else {
                both
            }
        };
        match stored {
            Ok(_) => true,
            Err((_, e)) => {
                log::error!("persisting item {} failed: {e}", item.id);
                false
            }
        }
    }

    pub(super) fn remove_item(&mut self, idx: usize) {
        let item = self.s.turns[self.turn_idx].items.remove(idx);
        if !self.masks.is_empty() {
            self.masks.discard(|(id, _)| *id == item.id);
        }
        let (tid, id) = (self.s.id.clone(), item.id.clone());
        let _ = self.s.persist(|st| st.delete_item(&tid, &id));
        let n = ItemRemoved {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            item_id: item.id,
            removed_at_ms: now_ms() as u64,
        };
        self.notify(&n);
        for slot in [
            &mut self.agent_item,
            &mut self.answer_item,
            &mut self.reasoning_item,
            &mut self.reconnect_item,
        ] {
            *slot = match *slot {
                Some(i) if i == idx => None,
                Some(i) if i > idx => Some(i - 1),
                other => other,
            };
        }
    }
}
