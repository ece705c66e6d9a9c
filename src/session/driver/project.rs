//! The projection: the only code that turns engine events into items, notifications
//! and store rows, the same for every engine. Steps, messages and reasoning are
//! projected here; tool calls in [`super::tool_calls`], deltas in [`super::deltas`]
//! (spec `app-server.md` §4.5, §4.9; `engines.md` §1.1).

use super::deltas::DeltaKind;
use super::Driver;
use crate::engine::{EngineEvent, Reconnecting, StepStart};
use crate::util::now_ms;
use serde_json::{json, Value};

impl Driver<'_> {
    /// Projects one engine event onto the turn (items, notifications, store rows; a
    /// batch: its events one by one), with a store connection at hand unless the event
    /// never touches the store: deltas and diagnostics are notifications only. A
    /// session that took a connection keeps it until its queue is empty, which a
    /// streaming session's seldom is, so events that need none must not take one:
    /// otherwise many streaming turns hold the pool's few connections and the others
    /// wait for one before their first delta.
    pub(super) fn project_event(&mut self, ev: EngineEvent) {
        if !(ev.is_delta() || matches!(ev, EngineEvent::Diagnostic(_) | EngineEvent::Batch(_))) {
            self.take_store();
        }
        self.project(ev)
    }

    fn project(&mut self, ev: EngineEvent) {
        match ev {
            EngineEvent::Batch(evs) => self.project_batch(evs),
            EngineEvent::Deltas(deltas) => self.project_deltas(&deltas),
            EngineEvent::BeginStep { reply } => {
                if self.stop.is_some() {
                    return; // the dropped reply stops the engine
                }
                let start = self.begin_step();
                let _ = reply.send(start);
            }
            EngineEvent::Step => self.next_step(),
            EngineEvent::Compact { reason, reply } => {
                if self.stop.is_some() {
                    return; // the dropped reply stops the engine
                }
                let older = self.compact_start(reason);
                let _ = reply.send(older);
            }
            EngineEvent::Compacted { summary, reply } => {
                let start = self.compact_end(summary);
                let _ = reply.send(start);
            }
            EngineEvent::AnswerReady { reply } => {
                let more = self.answer_ready();
                let _ = reply.send(more);
            }
            EngineEvent::ToolReady {
                call_id,
                at_most_once,
                reply,
            } => {
                let stored = self.tool_ready(&call_id, at_most_once);
                let _ = reply.send(stored);
            }
            EngineEvent::PersistRef { engine_ref, reply } => {
                let _ = reply.send(crate::session::engines::persist_ref(self.s, &engine_ref));
            }
            EngineEvent::ContentDelta(text) => self.append_text(false, &text),
            EngineEvent::ThinkingDelta(text) => self.append_text(true, &text),
            EngineEvent::ContentReplace(text) => self.replace_text(false, text),
            EngineEvent::ThinkingReplace(text) => self.replace_text(true, text),
            EngineEvent::MessageDone { final_answer } => self.message_done(final_answer),
            EngineEvent::ThinkingDone { text, detail } => self.thinking_done(text, detail),
            EngineEvent::ToolStart {
                call_id,
                name,
                arguments,
            } => self.tool_start(call_id, name, arguments),
            EngineEvent::ToolArgsDelta { call_id, delta } => self.tool_args_delta(&call_id, delta),
            EngineEvent::ToolArgs {
                call_id,
                name,
                arguments,
            } => self.tool_args(call_id, name, arguments),
            EngineEvent::ToolOutput {
                call_id,
                stream,
                text,
            } => self.tool_output(&call_id, stream, text),
            EngineEvent::ToolEnd {
                call_id,
                output,
                detail,
                is_error,
                error,
                permission_denied,
            } => self.tool_end(&call_id, output, detail, is_error, error, permission_denied),
            EngineEvent::Usage(u) => self.add_usage(u),
            EngineEvent::StepEnd {
                stop_reason,
                truncated,
                has_calls,
            } => self.step_end(stop_reason, truncated, has_calls),
            EngineEvent::ToolWithdrawn { call_id, reason } => {
                self.tool_withdrawn(&call_id, &reason)
            }
            EngineEvent::StreamCut => self.end_at_visible_text(),
            EngineEvent::Reconnecting(r) => self.reconnecting(r),
            EngineEvent::Connected => {
                if let Some(i) = self.reconnect_item.take() {
                    self.remove_item(i);
                }
            }
            EngineEvent::Todo(todo) => self.event(json!({"type": "todo_update", "todo": todo})),
            EngineEvent::AgentActivity(activity) => {
                self.event(json!({"type": "agent_activity", "activity": activity}))
            }
            EngineEvent::Diagnostic(v) => self.event(v),
            EngineEvent::Question {
                request_id,
                call_id,
                questions,
                blocking,
            } => self.relay_question(request_id, call_id, questions, blocking),
            EngineEvent::Approval {
                request_id,
                request,
            } => self.answer_approval(request_id, request),
            EngineEvent::Revoked { request_id } => self.revoke_question(&request_id),
            EngineEvent::SteerAccepted { input_id } => self.steer_accepted(&input_id),
            EngineEvent::SteerRefused { input_id, message } => {
                self.steer_refused(&input_id, &message)
            }
            EngineEvent::SteerUnconfirmed { input_id } => self.steer_unconfirmed(&input_id),
            EngineEvent::SteerDeferred { input_id } => {
                // Stays pending: the next turn takes it.
                self.steers_sent.retain(|i| *i != input_id);
            }
        }
    }

    /// A model step begins (the engine asks for the history to send): pending steers
    /// enter the turn first; the step's history and where this turn starts in it.
    fn begin_step(&mut self) -> StepStart {
        self.consume_steers();
        self.next_step();
        self.transcript()
    }

    /// A new model step: its text opens new message and reasoning items.
    fn next_step(&mut self) {
        self.step += 1;
        self.agent_item = None;
        self.reasoning_item = None;
    }

    /// The engine has an answer: whether the turn goes on (the user added input before
    /// the answer settled), else the answer becomes final.
    fn answer_ready(&mut self) -> bool {
        if self.s.has_pending_steers() {
            if let Some(i) = self.agent_item.take() {
                self.complete_item(i, "completed");
            }
            true
        } else {
            let content = self.finish_answer();
            self.final_content = Some(content);
            false
        }
    }

    /// The open message is complete; `final_answer` makes it the turn's answer.
    fn message_done(&mut self, final_answer: bool) {
        if let Some(i) = self.agent_item.take() {
            if final_answer {
                let content = self.s.turns[self.turn_idx].items[i]
                    .text
                    .clone()
                    .unwrap_or_default();
                self.item(i).terminal = true;
                self.s.turns[self.turn_idx].row.answer_ready_at_ms = Some(now_ms());
                self.final_content = Some(content);
            }
            self.complete_item(i, "completed");
        }
    }

    /// The reasoning is complete: the open reasoning item (or a new one) takes the
    /// whole text when it streamed none, and the provider's detail.
    fn thinking_done(&mut self, text: Option<String>, detail: Option<Value>) {
        let idx = match self.reasoning_item.take() {
            Some(i) => i,
            None => {
                let i = self.new_item("reasoning");
                self.item(i).text = Some(text.clone().unwrap_or_default());
                self.announce_started(i);
                i
            }
        };
        if self.item(idx).text.as_deref().unwrap_or("").is_empty() {
            self.item(idx).text = Some(text.unwrap_or_default());
        }
        if detail.is_some() {
            self.item(idx).result_detail = detail;
        }
        self.complete_item(idx, "completed");
    }

    /// A model step ended: the turn's stop reason and truncation, the step message's
    /// truncation, and its open items closed (the message too when tools are called).
    fn step_end(&mut self, stop_reason: Option<String>, truncated: bool, has_calls: bool) {
        if let Some(i) = self.reasoning_item.take() {
            self.complete_item(i, "completed");
        }
        let row = &mut self.s.turns[self.turn_idx].row;
        row.stop_reason = stop_reason.clone();
        row.finish_reason = stop_reason;
        // Sticky within the turn: a step cut off by the output limit (e.g. a
        // tool call withdrawn while others ran) marks the turn even when later
        // steps end normally.
        row.truncated |= truncated;
        // The step's message says whether it was cut (exec's partial answer).
        let step = Some(self.step);
        if let Some(it) = self.s.turns[self.turn_idx]
            .items
            .iter_mut()
            .rev()
            .find(|it| it.item_type == "agent_message" && it.step == step)
        {
            it.truncated = truncated;
        }
        if has_calls {
            if let Some(i) = self.agent_item.take() {
                self.complete_item(i, "completed");
            }
        }
    }

    /// The provider stream broke and the engine retries: the turn's reconnect item
    /// (opened once) shows the attempt; a void attempt's items of this step go.
    fn reconnecting(&mut self, r: Reconnecting) {
        if r.discard_step {
            // The failed attempt's partial output is void: drop this step's items.
            let step = self.step;
            while let Some(pos) = self.s.turns[self.turn_idx]
                .items
                .iter()
                .position(|it| it.step == Some(step) && it.item_type != "stream_reconnect")
            {
                self.remove_item(pos);
            }
            self.agent_item = None;
            self.reasoning_item = None;
        }
        let idx = match self.reconnect_item {
            Some(i) => i,
            None => {
                let i = self.new_item("stream_reconnect");
                self.reconnect_item = Some(i);
                i
            }
        };
        let it = self.item(idx);
        it.retry_count = Some(r.attempt.saturating_sub(1));
        it.max_retries = Some(r.max_attempts.saturating_sub(1));
        it.retry_at_ms = Some((now_ms() as u64) + r.delay_ms);
        it.text = Some(r.message);
        it.reason = r.reason;
        self.announce_started(idx);
    }

    /// This step's open agent-message (or reasoning) item, created when there is none;
    /// the flag says whether it was created now.
    fn open_text_item(&mut self, reasoning: bool) -> (usize, bool) {
        let open = if reasoning {
            self.reasoning_item
        } else {
            self.agent_item
        };
        if let Some(i) = open {
            return (i, false);
        }
        let i = self.new_item(if reasoning {
            "reasoning"
        } else {
            "agent_message"
        });
        if reasoning {
            self.reasoning_item = Some(i);
        } else {
            self.agent_item = Some(i);
        }
        (i, true)
    }

    /// Appends streamed text to this step's open agent-message (or reasoning) item,
    /// opening it first, and announces the delta.
    pub(super) fn append_text(&mut self, reasoning: bool, text: &str) {
        let (idx, opened) = self.open_text_item(reasoning);
        if opened {
            self.item(idx).text = Some(String::new());
            self.announce_started(idx);
        }
        self.item(idx)
            .text
            .get_or_insert_with(String::new)
            .push_str(text);
        let kind = if reasoning {
            DeltaKind::Reasoning
        } else {
            DeltaKind::Message
        };
        self.send_delta(idx, kind, text);
    }

    /// Replaces the whole text of the open message (or reasoning) item, opening one if
    /// needed; clients get the item again (an upsert, spec §4.3).
    fn replace_text(&mut self, reasoning: bool, text: String) {
        let (idx, _) = self.open_text_item(reasoning);
        if !self.masks.is_empty() {
            // The held tail belonged to the text being replaced.
            let id = self.s.turns[self.turn_idx].items[idx].id.clone();
            self.masks
                .discard(|(i, k)| *i == id && *k != DeltaKind::Arguments);
        }
        self.item(idx).text = Some(text);
        self.announce_started(idx);
    }

    /// A steer arrived while the model was streaming: the assistant item ends at the text
    /// already visible and is kept as an incomplete steered fragment (never sent to the
    /// model again); unfinished tool calls of the stream are withdrawn.
    fn end_at_visible_text(&mut self) {
        let step = self.step;
        let mut i = 0;
        while i < self.s.turns[self.turn_idx].items.len() {
            let it = &self.s.turns[self.turn_idx].items[i];
            if it.step == Some(step) && it.status.as_deref() == Some("in_progress") {
                match it.item_type.as_str() {
                    "tool_call" | "stream_reconnect" => {
                        self.remove_item(i);
                        continue;
                    }
                    _ => {
                        self.item(i).cause = Some("incomplete_stream_fragment".into());
                        self.complete_item(i, "completed");
                    }
                }
            }
            i += 1;
        }
        self.agent_item = None;
        self.reasoning_item = None;
    }
}
