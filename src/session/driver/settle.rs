//! Settling a turn: how it ended (completed with its answer, failed, interrupted), its
//! open items closed, and in one transaction its final answer and the other items it
//! closes, its usage records not stored yet, its row, usage totals and lease; then the
//! items' frames and exactly one terminal `turn/completed` / `turn/error` (spec
//! `app-server.md` §4.3, §4.9, §6 rule 9). Every write transaction queues at the
//! process's write gate and commits its own pages, so a turn that streams an answer
//! commits twice: its admission and its settlement.

use super::{Driver, Stop, TurnEnd};
use crate::engine::Outcome;
use crate::util::{now_ms, rfc3339};
use serde_json::json;
use wuu_protocol::*;
use wuu_store::ItemRow;

/// What the settlement holds back until its transaction committed: the rows of the
/// items completed while settling, and their frames in order.
#[derive(Default)]
pub(super) struct Settling {
    pub(super) rows: Vec<ItemRow>,
    pub(super) frames: Vec<Held>,
}

/// A frame held until the settlement committed.
pub(super) enum Held {
    Started(ItemStarted),
    Completed(ItemCompleted),
}

impl Driver<'_> {
    /// How the turn ended, from the engine's outcome and any stop asked for meanwhile.
    pub(super) fn end_of(&mut self, outcome: Outcome) -> TurnEnd {
        if let Some(end) = self.stopped() {
            // A stop the client was told about wins over an engine that finished while
            // the session was still projecting (its backlog can be a whole provider
            // read and a full outbox behind); a shutdown, a deadline or a store failure
            // that comes after the answer leaves the turn completed.
            if self.stop_acknowledged || !matches!(outcome, Outcome::Completed) {
                return end;
            }
        }
        match outcome {
            Outcome::Completed => TurnEnd::Completed {
                content: self.finish_answer(),
            },
            Outcome::Failed(e) => TurnEnd::Failed(e),
            Outcome::Interrupted => TurnEnd::Interrupted("interrupted".into()),
        }
    }

    /// The end a stop asked for (an interrupt, a deadline, an outbox overflow), if any.
    fn stopped(&mut self) -> Option<TurnEnd> {
        self.check_deadline();
        match &self.stop {
            Some(Stop::Interrupt(r)) => Some(TurnEnd::Interrupted(r.clone())),
            Some(Stop::Overflow) => Some(TurnEnd::Failed(Box::new(TurnError {
                message: "subscription overflow: the client stopped reading notifications".into(),
                code: Some("subscription_overflow".into()),
                category: Some("local".into()),
                ..Default::default()
            }))),
            None => None,
        }
    }

    /// The turn's answer: the message the engine marked final, else the open message,
    /// which becomes the terminal answer; it stays open until the settlement stores
    /// and announces it (the turn settles next).
    pub(super) fn finish_answer(&mut self) -> String {
        if let Some(content) = self.final_content.take() {
            return content;
        }
        let Some(i) = self.agent_item.take() else {
            return self.s.turns[self.turn_idx]
                .items
                .iter()
                .rev()
                .find(|i| i.item_type == "agent_message" && i.terminal)
                .and_then(|i| i.text.clone())
                .unwrap_or_default();
        };
        let content = self.s.turns[self.turn_idx].items[i]
            .text
            .clone()
            .unwrap_or_default();
        self.item(i).terminal = true;
        self.answer_item = Some(i);
        self.s.turns[self.turn_idx].row.answer_ready_at_ms = Some(now_ms());
        content
    }

    /// Completes in-progress message/reasoning items (keeping partial text) and fails
    /// in-progress tool calls that never ran.
    fn settle_open_items(&mut self) {
        let n = self.s.turns[self.turn_idx].items.len();
        for i in 0..n {
            let it = &self.s.turns[self.turn_idx].items[i];
            if it.status.as_deref() != Some("in_progress") {
                continue;
            }
            match it.item_type.as_str() {
                "tool_call" => {
                    self.item(i).error = Some("not run: the tool call did not complete".into());
                    self.complete_item(i, "failed");
                }
                "stream_reconnect" => self.complete_item(i, "failed"),
                _ => self.complete_item(i, "completed"),
            }
        }
        self.agent_item = None;
        self.reasoning_item = None;
        self.reconnect_item = None;
    }

    /// Settles the turn: items, row, usage totals, terminal notification, lease release.
    pub(super) fn settle(&mut self, end: &TurnEnd) {
        // Held-back delta tails go out before any item is held: each item's deltas
        // precede its `item/completed`.
        for i in 0..self.s.turns[self.turn_idx].items.len() {
            if self.s.turns[self.turn_idx].items[i].status.as_deref() == Some("in_progress") {
                self.flush_deltas(i, |_| true);
            }
        }
        self.settling = Some(Settling::default());
        if let Some(i) = self.answer_item.take() {
            self.complete_item(i, "completed");
        }
        self.settle_open_items();
        let now = now_ms();
        self.mark_row(end, now);
        if let TurnEnd::Failed(e) = end {
            let i = self.new_item("error");
            self.item(i).error = Some(e.message.clone());
            self.announce_started(i);
            self.complete_item(i, "failed");
        }
        let held = self.settling.take().unwrap_or_default();
        let row = self.s.turns[self.turn_idx].row.clone();
        let settled = self.store_settlement(&row, &held.rows, now);
        for frame in held.frames {
            match frame {
                Held::Started(n) => self.notify(&n),
                Held::Completed(n) => self.notify(&n),
            }
        }
        self.s.thread.updated_at_ms = now;
        self.emit_usage(true);
        self.announce_end(end, &row, now);
        crate::session::client_tools::turn_ended(&self.s.shared, &self.s.id, &row.id);
        if settled {
            self.s.shared.registry.set_running(&self.s.running, false);
        } else {
            // The lease is still ours: release it on its own.
            crate::session::turn::release(self.s);
        }
        // An automatic title after a successful turn (logic in session/title.rs).
        crate::session::title::after_turn(self.s, matches!(end, TurnEnd::Completed { .. }));
    }

    /// Writes the end into the turn's row: completion time, usage totals, permission
    /// denials, status and (unless completed) the error.
    fn mark_row(&mut self, end: &TurnEnd, now: i64) {
        let denials = std::mem::take(&mut self.denials);
        let row = &mut self.s.turns[self.turn_idx].row;
        row.completed_at_ms = Some(now);
        row.input_tokens = self.usage.input_tokens;
        row.output_tokens = self.usage.output_tokens;
        row.cache_read_tokens = self.usage.cache_read_tokens;
        row.cache_creation_tokens = self.usage.cache_creation_tokens;
        if !denials.is_empty() {
            if !row.extra.is_object() {
                row.extra = json!({});
            }
            row.extra["permission_denials"] = json!(denials);
        }
        match end {
            TurnEnd::Completed { .. } => row.status = "completed".into(),
            TurnEnd::Failed(e) => {
                row.status = "failed".into();
                row.error = serde_json::to_value(&**e).ok();
            }
            TurnEnd::Interrupted(reason) => {
                row.status = "interrupted".into();
                let message = match reason.as_str() {
                    "archived" => "archived while the conversation was still running".into(),
                    "timeout" => "interrupted: the run timed out".into(),
                    "shutdown" => "interrupted: the server shut down".into(),
                    _ => "interrupted by the user".to_owned(),
                };
                row.error = serde_json::to_value(TurnError {
                    message,
                    code: Some(reason.clone()),
                    category: Some("cancelled".into()),
                    ..Default::default()
                })
                .ok();
            }
        }
    }

    /// One transaction stores the items completed while settling and the usage records
    /// not stored yet, settles the row, records the conversation's activity time and
    /// gives the lease back (each write transaction queues at the process's write
    /// gate); `running` is cleared once the turn is announced. When that transaction
    /// fails, the parts are tried one by one (items, usage, then the settlement), so
    /// one bad row loses no other. Returns whether the settlement was stored.
    fn store_settlement(&mut self, row: &wuu_store::TurnRow, items: &[ItemRow], now: i64) -> bool {
        let id = self.s.id.clone();
        let owner = self.s.shared.owner.clone();
        let usage = std::mem::take(&mut self.unsaved_usage);
        let settle = |tx: &wuu_store::Tx<'_>| {
            tx.update_turn(row)?;
            tx.touch_thread(&id, now)?;
            tx.release_lease(&id, &owner)
        };
        let whole = self.s.persist(|st| {
            st.transaction(|tx| {
                for u in &usage {
                    tx.insert_usage(u)?;
                }
                for item in items {
                    tx.upsert_item(item)?;
                }
                settle(tx)
            })
        });
        let Err((_, e)) = whole else {
            return true;
        };
        if !items.is_empty() || !usage.is_empty() {
            log::warn!(
                "settling turn {} in one transaction failed ({e}); storing its parts one by one",
                row.id
            );
            for item in items {
                if let Err((_, e)) = self.s.persist(|st| st.upsert_item(item)) {
                    log::error!("persisting item {} failed: {e}", item.id);
                }
            }
            for u in &usage {
                if let Err((_, e)) = self.s.persist(|st| st.insert_usage(u)) {
                    log::error!("usage record: {e}");
                }
            }
            if let Err((_, e)) = self.s.persist(|st| st.transaction(settle)) {
                log::error!("persisting turn {} failed: {e}", row.id);
                return false;
            }
            return true;
        }
        log::error!("persisting turn {} failed: {e}", row.id);
        false
    }

    /// Traces the settled turn and announces it: `turn/completed` with the answer, or
    /// `turn/error` for a failed or interrupted turn.
    fn announce_end(&mut self, end: &TurnEnd, row: &wuu_store::TurnRow, now: i64) {
        let turn = crate::session::convert::turn_wire(&self.s.turns[self.turn_idx]);
        let thread_id = self.thread_id();
        self.trace.write(json!({
            "type": "turn", "thread_id": thread_id, "turn_id": row.id, "status": row.status,
            "usage": self.usage, "at": rfc3339(now),
        }));
        let trace_path = self.trace.path_string();
        match end {
            TurnEnd::Completed { content } => {
                // The run starts a correction turn for an answer that fails its schema
                // (spec exec.md §5.5): this turn is then not the run's last.
                let awaiting_auto_continuation = self.opts.corrects_schema
                    && !self.s.shared.is_closing()
                    && self.opts.output_schema.as_ref().is_some_and(|schema| {
                        crate::session::run::parse_structured(content)
                            .and_then(|v| crate::session::run::schema_errors(schema, &v))
                            .is_err()
                    });
                let n = TurnCompleted {
                    thread_id,
                    turn,
                    content: content.clone(),
                    input_tokens: self.usage.input_tokens,
                    output_tokens: self.usage.output_tokens,
                    cache_creation_tokens: Some(self.usage.cache_creation_tokens),
                    cache_read_tokens: Some(self.usage.cache_read_tokens),
                    finish_reason: row.finish_reason.clone(),
                    stop_reason: row.stop_reason.clone(),
                    truncated: Some(row.truncated),
                    trace_path,
                    awaiting_auto_continuation,
                };
                let _ = self.s.shared.outbox.notify(&n);
            }
            TurnEnd::Failed(_) | TurnEnd::Interrupted(_) => {
                let n = crate::session::convert::turn_error_notification(thread_id, turn);
                let _ = self.s.shared.outbox.notify(&n);
            }
        }
    }
}
