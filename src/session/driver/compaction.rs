//! The host's side of context compaction (spec `app-server.md` §4.9 rule 7; the
//! engine's side and the rules are in [`crate::engine::compaction`]): the transcript
//! of a step as the provider reads it, the compaction settings of the live
//! configuration, and the `context_compaction` item: opened when the engine starts a
//! compaction (with the older messages it must summarise), completed with the summary
//! and the kept boundary (`result_detail.kept_from`), which the history normalization
//! reads from then on, here, after a restart, and in a fork.

use super::Driver;
use crate::engine::compaction::{self, CompactReason, CompactionSettings};
use crate::engine::{history, StepStart};
use crate::provider::chat::{ChatMessage, Role};
use serde_json::json;

/// A compaction under way.
pub(super) struct Pending {
    /// The item's index in the turn.
    item: usize,
    /// `(turn_id, item_id)` of the first kept item; `None` = nothing kept.
    kept_from: Option<(String, String)>,
    /// Estimated tokens of the history before.
    tokens_before: u64,
}

impl Driver<'_> {
    /// The compaction settings in force now (live configuration; the window as
    /// `turn/usage.context_window_tokens` reports it, `agent.max_context_tokens`
    /// included).
    pub(super) fn compaction_settings(&self) -> CompactionSettings {
        let host = &self.s.shared;
        let cfg = host.config();
        let agent = cfg.agent();
        let row = &self.s.turns[self.turn_idx].row;
        CompactionSettings {
            window: crate::provider::catalog::context_window(
                &cfg,
                &host.model_catalog,
                &row.provider,
                &row.model,
            ),
            threshold_pct: agent
                .compact_threshold_pct
                .unwrap_or(compaction::DEFAULT_THRESHOLD),
            keep_recent_tokens: agent.compact_keep_recent_tokens.unwrap_or(0),
            auto: !agent.disable_auto_compact.unwrap_or(false),
        }
    }

    /// The transcript of the current step (history + this turn so far, compacted).
    pub(super) fn transcript(&self) -> StepStart {
        let (messages, origins) = self.messages();
        let turn_start_index = origins
            .iter()
            .position(|o| o.is_some_and(|(t, _)| t >= self.turn_idx))
            .unwrap_or(messages.len());
        StepStart {
            step: self.step,
            messages,
            turn_start_index,
            compaction: self.compaction_settings(),
        }
    }

    fn messages(&self) -> (Vec<ChatMessage>, Vec<history::Origin>) {
        let row = &self.s.turns[self.turn_idx].row;
        history::to_messages_with_origins(&self.s.turns, &row.provider, &row.model)
    }

    /// The engine starts a compaction: picks the kept boundary (the most recent
    /// `compact_keep_recent_tokens`, starting at a message group), opens the
    /// `context_compaction` item and answers with the messages to summarise. `None`
    /// when nothing could be summarised (a manual compaction still shows an item).
    pub(super) fn compact_start(&mut self, reason: CompactReason) -> Option<Vec<ChatMessage>> {
        let (messages, origins) = self.messages();
        let keep = self.compaction_settings().keep_tokens();
        let starts = |i: usize| origins[i].is_some() && messages[i].role != Role::Tool;
        let Some(cut) = compaction::cut_index(&messages, starts, keep) else {
            if reason == CompactReason::Manual {
                let i = self.new_item("context_compaction");
                let item = self.item(i);
                item.reason = Some(reason.as_str().into());
                item.text = Some("Nothing to compact yet".into());
                self.announce_started(i);
                self.complete_item(i, "completed");
            }
            return None;
        };
        let kept_from = origins.get(cut).copied().flatten().and_then(|(t, i)| {
            let turn = self.s.turns.get(t)?;
            Some((turn.row.id.clone(), turn.items.get(i)?.id.clone()))
        });
        let tokens_before = messages.iter().map(compaction::estimate_message).sum();
        let i = self.new_item("context_compaction");
        let item = self.item(i);
        item.reason = Some(reason.as_str().into());
        item.text = Some("Compacting context…".into());
        self.announce_started(i);
        self.compaction = Some(Pending {
            item: i,
            kept_from,
            tokens_before,
        });
        let mut older = messages;
        older.truncate(cut);
        Some(older)
    }

    /// The summary is ready (or failed): completes the item and answers with the
    /// step's transcript, compacted when the summary came.
    pub(super) fn compact_end(&mut self, summary: Result<String, String>) -> StepStart {
        if let Some(p) = self.compaction.take() {
            match summary {
                Ok(text) => {
                    let kept = p
                        .kept_from
                        .as_ref()
                        .map(|(t, i)| json!({"turn_id": t, "item_id": i}));
                    let item = self.item(p.item);
                    item.summary = Some(json!(text));
                    item.text = Some("Context compacted".into());
                    item.result_detail = Some(json!({
                        "kept_from": kept,
                        "tokens_before": p.tokens_before,
                    }));
                    // The normalization reads completed compactions only.
                    item.status = Some("completed".into());
                    let after: u64 = self
                        .messages()
                        .0
                        .iter()
                        .map(compaction::estimate_message)
                        .sum();
                    if let Some(d) = self.item(p.item).result_detail.as_mut() {
                        d["tokens_after"] = json!(after);
                    }
                    self.complete_item(p.item, "completed");
                }
                Err(e) => {
                    let item = self.item(p.item);
                    item.text = Some("Context compaction failed".into());
                    item.error = Some(e);
                    self.complete_item(p.item, "failed");
                }
            }
        }
        self.transcript()
    }
}
