//! Steers during a turn: pending steer inputs are committed into the turn as user
//! items before the next model request, or handed once to an engine that steers
//! natively (spec `app-server.md` §4.4; `engines.md` §1.9).

use super::Driver;
use crate::engine::{SteerInput, UserInput};
use crate::util::now_ms;
use wuu_protocol::*;
use wuu_store::ItemRow;

impl Driver<'_> {
    /// Takes pending steers into the turn (before the next model request): each becomes
    /// a user item, committed in the same transaction that marks the input consumed.
    pub(super) fn consume_steers(&mut self) {
        let steers: Vec<_> = self
            .s
            .inputs_in(&[wuu_store::input_state::PENDING])
            .into_iter()
            .filter(|r| r.mode == wuu_store::input_mode::STEER)
            .collect();
        for row in steers {
            self.commit_steer(row);
        }
    }

    /// Commits one pending steer as a user item of this turn (same transaction as the
    /// input's consumption). `false` when it was cancelled or edited meanwhile (a stale
    /// input never enters history) or the commit failed.
    pub(super) fn commit_steer(&mut self, row: wuu_store::InputRow) -> bool {
        let input = crate::session::inputs::input_of(&row);
        let i = self.new_item("user_message");
        {
            let it = self.item(i);
            it.step = None;
            it.role = Some("user".into());
            it.text = Some(input.prompt.clone());
            it.source_id = Some(row.id.clone());
            it.origin = Some("steer".into());
            it.content_parts = input.content_parts.clone();
            if !input.images.is_empty() {
                it.images = Some(
                    input
                        .images
                        .iter()
                        .filter_map(|a| serde_json::to_value(a).ok())
                        .collect(),
                );
            }
            it.status = Some("completed".into());
        }
        let item = self.s.turns[self.turn_idx].items[i].clone();
        let item_row = ItemRow {
            thread_id: self.s.id.clone(),
            turn_id: self.turn_id(),
            id: item.id.clone(),
            item_type: item.item_type.clone(),
            status: item.status.clone(),
            seq: 0,
            body: serde_json::to_value(&item).unwrap_or_default(),
        };
        let mut done = row.clone();
        done.state = wuu_store::input_state::CONSUMED.into();
        done.updated_at_ms = now_ms();
        let committed = if self.s.store.is_some() {
            self.s.persist(|st| {
                st.transaction(|tx| {
                    let fresh = tx.get_input(&row.thread_id, &row.id)?;
                    if fresh.as_ref().map(|f| f.state.as_str())
                        != Some(wuu_store::input_state::PENDING)
                    {
                        return Ok(false);
                    }
                    tx.upsert_input(&done)?;
                    tx.upsert_item(&item_row)?;
                    Ok(true)
                })
            })
        } else {
            self.s.input_put(done).map(|_| true)
        };
        match committed {
            Ok(true) => {
                self.announce_started(i);
                let n = ItemCompleted {
                    thread_id: self.thread_id(),
                    turn_id: self.turn_id(),
                    item,
                    completed_at_ms: now_ms() as u64,
                };
                self.notify(&n);
                true
            }
            Ok(false) | Err(_) => {
                self.s.turns[self.turn_idx].items.remove(i);
                false
            }
        }
    }

    /// Steers waiting for a native steering engine that it has not been given yet.
    pub(super) fn native_steers(&mut self) -> Vec<SteerInput> {
        let rows: Vec<_> = self
            .s
            .inputs_in(&[wuu_store::input_state::PENDING])
            .into_iter()
            .filter(|r| r.mode == wuu_store::input_mode::STEER)
            .filter(|r| !self.steers_sent.contains(&r.id))
            .collect();
        rows.into_iter()
            .map(|row| {
                self.steers_sent.push(row.id.clone());
                let input = crate::session::inputs::input_of(&row);
                SteerInput {
                    input_id: row.id.clone(),
                    input: UserInput {
                        prompt: input.prompt,
                        images: input.images,
                        files: input.files,
                    },
                }
            })
            .collect()
    }
}
