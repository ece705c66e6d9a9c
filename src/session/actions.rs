//! Conversation actions the desktop and phone clients call (spec `app-server.md`; shapes
//! from the Go dispatcher): `thread/pin`, `thread/organization/update`, `thread/edit-message`,
//! `thread/context-composition`, and `turn/requeue` (in [`super::inputs`]).
//!
//! - Pin and folder live in the conversation row's `extra` (`pinned`, `folder_id`);
//!   both answer `{thread}` (a summary, `turns: []`) and broadcast `thread/updated`
//!   (clients keep their turns when a snapshot has none).
//! - `thread/edit-message` rewinds: the chosen user message's turn and every later turn
//!   leave the history (store and memory, in one transaction) — or, for a message that
//!   was steered into the middle of a turn, that message and everything after it. The
//!   model never sees them again. The message comes back as a draft to edit and send.
//! - `thread/context-composition` measures the request the next turn would send, with
//!   the same measure as the `request_context` event of a turn.

use super::convert::{thread_wire, TurnState};
use super::Session;
use crate::engine::{context, history};
use crate::outbound::Responder;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use wuu_protocol::*;
use wuu_store::input_state;

type Refusal = (ErrorCode, String);

impl Session {
    /// The conversation snapshot without turns (for organization changes).
    fn summary_wire(&self) -> Thread {
        thread_wire(&self.thread, &[], self.running.load(Ordering::SeqCst))
    }

    /// Sets one `extra` member (store first, then memory).
    fn set_extra(&mut self, key: &str, value: Option<Value>) -> Result<(), Refusal> {
        if self.store.is_some() {
            let id = self.id.clone();
            let row = self.persist(|st| st.set_thread_extra(&id, key, value.as_ref()))?;
            match row {
                Some(r) => self.thread = r,
                None => {
                    return Err((
                        ErrorCode::ThreadNotFound,
                        format!("thread {:?} not found", self.id),
                    ))
                }
            }
        } else if let Value::Object(m) = &mut self.thread.extra {
            match value {
                Some(v) => m.insert(key.to_owned(), v),
                None => m.remove(key),
            };
        } else {
            self.thread.extra = match value {
                Some(v) => json!({ key: v }),
                None => json!({}),
            };
        }
        Ok(())
    }

    fn answer_organized(&mut self, result: Result<(), Refusal>, reply: Responder) {
        match result {
            Err((c, m)) => reply.err(c, m),
            Ok(()) => {
                let thread = self.summary_wire();
                reply.ok(&ThreadResult {
                    thread: thread.clone(),
                });
                let _ = self.shared.outbox.notify(&ThreadUpdated { thread });
            }
        }
    }

    /// `thread/pin`.
    pub(crate) fn pin(&mut self, p: ThreadPinParams, reply: Responder) {
        let r = self.set_extra("pinned", p.pinned.then_some(Value::Bool(true)));
        self.answer_organized(r, reply);
    }

    /// `thread/organization/update`.
    pub(crate) fn organize(&mut self, p: ThreadOrganizationUpdateParams, reply: Responder) {
        let folder = p
            .folder_id
            .as_deref()
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .map(str::to_owned);
        let r = (|| {
            if let Some(f) = &folder {
                let Some(st) = self.store.as_ref() else {
                    return Err((
                        ErrorCode::InvalidParams,
                        "invalid params: an ephemeral conversation cannot be put in a folder"
                            .to_owned(),
                    ));
                };
                match st.get_folder(f) {
                    Ok(Some(_)) => {}
                    Ok(None) => {
                        return Err((
                            ErrorCode::InvalidParams,
                            format!(
                                "invalid params: folder_id: no folder {:?}",
                                crate::util::clip(f, 60)
                            ),
                        ))
                    }
                    Err(e) => return Err(crate::session::host::store_error(&self.shared, &e)),
                }
            }
            self.set_extra("folder_id", folder.map(Value::String))
        })();
        self.answer_organized(r, reply);
    }

    /// `thread/edit-message`.
    pub(crate) fn edit_message(&mut self, p: ThreadEditMessageParams, reply: Responder) {
        match self.edit_inner(&p) {
            Err((c, m)) => reply.err(c, m),
            Ok(draft) => {
                let thread = self.thread_wire();
                reply.ok(&ThreadEditMessageResult {
                    thread: thread.clone(),
                    draft,
                });
                let _ = self.shared.outbox.notify(&ThreadUpdated { thread });
            }
        }
    }

    fn edit_inner(&mut self, p: &ThreadEditMessageParams) -> Result<MessageDraft, Refusal> {
        if self.running.load(Ordering::SeqCst) {
            return Err((
                ErrorCode::ThreadBusy,
                format!("thread {:?} is running; interrupt it first", self.id),
            ));
        }
        if !self
            .inputs_in(&[input_state::PENDING, input_state::HELD])
            .is_empty()
        {
            return Err((
                ErrorCode::Error,
                "the conversation has queued messages; send or remove them first".into(),
            ));
        }
        let (turn_id, item_id) = (p.turn_id.trim(), p.item_id.trim());
        let not_found = || {
            (
                ErrorCode::InvalidParams,
                format!(
                    "invalid params: no user message {:?} in turn {:?}",
                    crate::util::clip(item_id, 60),
                    crate::util::clip(turn_id, 60)
                ),
            )
        };
        let ti = self
            .turns
            .iter()
            .position(|t| t.row.id == turn_id)
            .ok_or_else(not_found)?;
        let ii = self.turns[ti]
            .items
            .iter()
            .position(|i| i.id == item_id && i.item_type == "user_message")
            .ok_or_else(not_found)?;
        let item = self.turns[ti].items[ii].clone();
        if item
            .origin
            .as_deref()
            .is_some_and(|o| o == "host" || o == "plugin")
        {
            return Err((
                ErrorCode::Error,
                "this message was not written by the user and cannot be edited".into(),
            ));
        }
        // The message opens its turn: the turn goes. Otherwise (a steer): the turn is
        // kept up to the message.
        let whole_turn = self.turns[ti].items[..ii]
            .iter()
            .all(|i| i.item_type != "user_message");
        if self.store.is_some() {
            let id = self.id.clone();
            let tid = turn_id.to_owned();
            let iid = item.id.clone();
            // The cut's position is the stored item's `seq`: an item a running turn added
            // carries none in memory until the conversation is read again.
            self.persist(|st| {
                let from_seq = if whole_turn {
                    None
                } else {
                    let stored = st.get_item(&id, &iid)?;
                    Some(stored.map(|row| row.seq).ok_or_else(|| {
                        wuu_store::StoreError::NotFound {
                            kind: "item",
                            id: format!("{id}/{iid}"),
                        }
                    })?)
                };
                st.truncate_history(&id, &tid, from_seq)
            })?;
        }
        if whole_turn {
            self.turns.truncate(ti);
        } else {
            self.turns.truncate(ti + 1);
            self.turns[ti].items.truncate(ii);
        }
        let now = crate::util::now_ms();
        let first_user = self
            .turns
            .iter()
            .flat_map(|t| t.items.iter())
            .find(|i| i.item_type == "user_message")
            .and_then(|i| i.text.clone());
        self.thread.preview = first_user
            .map(|t| crate::util::preview(&t, 120))
            .unwrap_or_default();
        self.thread.updated_at_ms = now;
        let row = self.thread.clone();
        self.persist(|st| st.update_thread(&row))?;
        let attachments = |v: &Option<Vec<Value>>| -> Vec<Attachment> {
            v.as_deref()
                .unwrap_or_default()
                .iter()
                .filter_map(|a| serde_json::from_value(a.clone()).ok())
                .collect()
        };
        Ok(MessageDraft {
            prompt: item.text.clone().unwrap_or_default(),
            images: attachments(&item.images),
            files: attachments(&item.files),
            content_parts: item.content_parts.clone(),
        })
    }

    /// `thread/context-composition`.
    pub(crate) fn context_composition(&mut self, reply: Responder) {
        reply.ok(&self.composition());
    }

    fn composition(&self) -> ThreadContextCompositionResult {
        let mut out = ThreadContextCompositionResult {
            thread_id: self.id.clone(),
            provider: self.thread.provider.clone(),
            model: self.thread.model.clone(),
            context_window_tokens: crate::provider::catalog::context_window(
                &self.shared.config(),
                &self.shared.model_catalog,
                &self.thread.provider,
                &self.thread.model,
            ),
            request_context: Value::Null,
            ..Default::default()
        };
        if self.thread.engine_id != "wuu" && !self.thread.engine_id.is_empty() {
            out.reason = Some(format!(
                "the context of engine {:?} is built by the engine itself",
                self.thread.engine_id
            ));
            return out;
        }
        out.available = true;
        out.last_context_tokens = self.store.as_ref().and_then(|st| {
            st.list_usage(Some(&self.id))
                .ok()?
                .last()
                .map(|u| u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens)
        });
        let mode = super::convert::stored_permission_mode(&self.thread);
        let cfg = self.shared.config();
        let sections = context::system_sections(
            &self.shared.opts.workdir,
            std::path::Path::new(&self.thread.cwd),
            mode.as_str(),
            cfg.config.instructions.as_deref(),
        );
        let system = context::system_prompt(&sections);
        let tools = crate::provider::chat::Tools::from(super::client_tools::offered_now(
            &self.shared,
            mode,
            &super::agents::role_of(&self.thread),
        ));
        let settled: Vec<TurnState> = self
            .turns
            .iter()
            .filter(|t| t.row.status != "in_progress")
            .cloned()
            .collect();
        let messages = history::to_messages(&settled, &self.thread.provider, &self.thread.model);
        let cache_key: String = self.id.chars().take(64).collect();
        let rc = context::request_context(
            1,
            &sections,
            &system,
            &messages,
            messages.len(),
            &tools,
            &cache_key,
        );
        let tok = |b: u64| b.div_ceil(4);
        let mut cats: Vec<ContextCategory> = vec![];
        let mut push = |id: &str, label: &str, bytes: u64, count: u64| {
            if count > 0 || bytes > 0 {
                cats.push(ContextCategory {
                    id: id.into(),
                    label: label.into(),
                    bytes,
                    estimated_tokens: tok(bytes),
                    count,
                });
            }
        };
        push(
            "system",
            "System prompt and instructions",
            system.len() as u64,
            sections.len() as u64,
        );
        let tool_bytes = serde_json::to_vec(&tools).map(|v| v.len()).unwrap_or(0) as u64;
        push("tools", "Tool definitions", tool_bytes, tools.len() as u64);
        let mut by_role: [(u64, u64); 3] = [(0, 0); 3];
        for m in &messages {
            let n = serde_json::to_vec(m).map(|v| v.len()).unwrap_or(0) as u64;
            let slot = match serde_json::to_value(m.role)
                .ok()
                .as_ref()
                .and_then(Value::as_str)
            {
                Some("user") => 0,
                Some("assistant") => 1,
                _ => 2,
            };
            by_role[slot].0 += n;
            by_role[slot].1 += 1;
        }
        push("user", "Your messages", by_role[0].0, by_role[0].1);
        push(
            "assistant",
            "Assistant messages and tool calls",
            by_role[1].0,
            by_role[1].1,
        );
        push("tool_results", "Tool results", by_role[2].0, by_role[2].1);
        cats.sort_by_key(|c| std::cmp::Reverse(c.bytes));
        out.total_bytes = cats.iter().map(|c| c.bytes).sum();
        out.estimated_tokens = tok(out.total_bytes);
        out.categories = cats;
        out.request_context = rc;
        out
    }
}
