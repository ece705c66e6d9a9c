//! The turn driver: runs the built-in agent loop of one admitted turn on the session
//! thread (spec `app-server.md` §4.3–§4.9).
//!
//! Each step sends the normalized history to the provider (on a helper thread) and
//! `select!`s over its events and the session mailbox, so an interrupt is seen at once
//! even while the socket is silent. Tool calls run on helper threads the same way.
//! Every item is persisted as it settles; the turn ends with exactly one of
//! `turn/completed` / `turn/error`.

use super::{context, history, trace::Trace};
use crate::provider::{
    self, ChatRequest, FailureKind, Provider, ProviderError, StreamEvent, ToolCall, Usage,
};
use crate::server::transport::Overflow;
use crate::session::{Session, SessionMsg};
use crate::tools::{self, PermissionMode, ToolContext, ToolEvent, ToolOutcome};
use crate::util::{now_ms, rfc3339};
use crossbeam_channel::select;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use wuu_protocol::*;
use wuu_store::{ItemRow, UsageRow};

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEnd {
    /// The model gave its final answer.
    Completed {
        /// The answer text.
        content: String,
    },
    /// The turn failed.
    Failed(Box<TurnError>),
    /// The turn was interrupted (reason: `interrupted`, `timeout`, `shutdown`, `archived`).
    Interrupted(String),
}

/// Why the driver stopped listening.
enum Stop {
    Interrupt(String),
    Overflow,
}

/// Per-turn limits and options.
#[derive(Debug, Clone, Default)]
pub struct TurnOptions {
    /// JSON Schema the final answer must satisfy (passed to the provider).
    pub output_schema: Option<Value>,
    /// Deadline (Unix ms) after which the turn is interrupted with reason `timeout`.
    pub deadline_ms: Option<i64>,
    /// The run this turn belongs to (`run/interrupt` for it stops the turn).
    pub run_id: Option<String>,
}

/// The live state of the active turn.
pub struct Driver<'a> {
    /// The session.
    pub s: &'a mut Session,
    turn_idx: usize,
    next_item: u32,
    step: u32,
    usage: Usage,
    provider: Option<Arc<dyn Provider>>,
    /// Messages that must wait until the turn settles (archive, shutdown).
    pub deferred: Vec<SessionMsg>,
    stop: Option<Stop>,
    denials: Vec<Value>,
    agent_item: Option<usize>,
    reasoning_item: Option<usize>,
    reconnect_item: Option<usize>,
    trace: Trace,
    opts: TurnOptions,
    last_usage_emit: i64,
}

impl<'a> Driver<'a> {
    /// A driver for the last turn of `s` (already admitted and announced).
    pub fn new(s: &'a mut Session, opts: TurnOptions) -> Self {
        let turn_idx = s.turns.len() - 1;
        let next_item = s.turns[turn_idx].items.len() as u32 + 1;
        let trace = Trace::open(&s.shared.opts.home, &s.id);
        Driver {
            s,
            turn_idx,
            next_item,
            step: 0,
            usage: Usage::default(),
            provider: None,
            deferred: vec![],
            stop: None,
            denials: vec![],
            agent_item: None,
            reasoning_item: None,
            reconnect_item: None,
            trace,
            opts,
            last_usage_emit: 0,
        }
    }

    fn thread_id(&self) -> String {
        self.s.id.clone()
    }

    fn turn_id(&self) -> String {
        self.s.turns[self.turn_idx].row.id.clone()
    }

    fn notify<N: ServerNotification>(&mut self, n: &N) {
        if let Err(Overflow) = self.s.shared.notify(n) {
            log::error!("outbox overflow in {}; failing the turn", self.s.id);
            self.stop.get_or_insert(Stop::Overflow);
        }
    }

    fn new_item(&mut self, ty: &str) -> usize {
        let id = format!("{}-item-{:04}", self.turn_id(), self.next_item);
        self.next_item += 1;
        let mut item = ThreadItem::new(id, ty);
        item.status = Some("in_progress".into());
        item.step = Some(self.step);
        let items = &mut self.s.turns[self.turn_idx].items;
        items.push(item);
        items.len() - 1
    }

    fn item(&mut self, idx: usize) -> &mut ThreadItem {
        &mut self.s.turns[self.turn_idx].items[idx]
    }

    fn announce_started(&mut self, idx: usize) {
        let n = ItemStarted {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            item: self.s.turns[self.turn_idx].items[idx].clone(),
            started_at_ms: now_ms() as u64,
        };
        self.notify(&n);
    }

    /// Persists an item and announces `item/completed`.
    fn complete_item(&mut self, idx: usize, status: &str) {
        self.item(idx).status = Some(status.into());
        let item = self.s.turns[self.turn_idx].items[idx].clone();
        let _ = self.persist_item(&item);
        let n = ItemCompleted {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            item,
            completed_at_ms: now_ms() as u64,
        };
        self.notify(&n);
    }

    /// Persists an item; returns whether it was stored (ephemeral: always true).
    fn persist_item(&mut self, item: &ThreadItem) -> bool {
        let row = ItemRow {
            thread_id: self.s.id.clone(),
            turn_id: self.turn_id(),
            id: item.id.clone(),
            item_type: item.item_type.clone(),
            status: item.status.clone(),
            seq: 0,
            body: serde_json::to_value(item).unwrap_or_default(),
        };
        match self.s.persist(|st| st.upsert_item(&row)) {
            Ok(_) => true,
            Err((_, e)) => {
                log::error!("persisting item {} failed: {e}", item.id);
                false
            }
        }
    }

    fn remove_item(&mut self, idx: usize) {
        let item = self.s.turns[self.turn_idx].items.remove(idx);
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

    fn event(&mut self, event: Value) {
        let n = TurnEvent {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            event,
        };
        self.notify(&n);
    }

    fn emit_usage(&mut self, force: bool) {
        let now = now_ms();
        if !force && now - self.last_usage_emit < 100 {
            return;
        }
        self.last_usage_emit = now;
        let n = TurnUsage {
            thread_id: self.thread_id(),
            turn_id: self.turn_id(),
            model: Some(self.s.turns[self.turn_idx].row.model.clone()),
            input_tokens: self.usage.input_tokens,
            output_tokens: self.usage.output_tokens,
            cache_creation_tokens: self.usage.cache_creation_tokens,
            cache_read_tokens: self.usage.cache_read_tokens,
            reasoning_tokens: Some(self.usage.reasoning_tokens).filter(|n| *n > 0),
            context_tokens: None,
        };
        self.notify(&n);
    }

    /// Serves the mailbox while the turn runs. Requests that touch the active turn are
    /// answered here; conversation reads are served normally; archive and shutdown
    /// interrupt the turn and wait for its settlement.
    fn on_mailbox(&mut self, msg: SessionMsg) {
        // Once a request waits for the settlement (forced archive, shutdown), later
        // requests of this conversation wait behind it, in order.
        if !self.deferred.is_empty() {
            self.deferred.push(msg);
            return;
        }
        match msg {
            SessionMsg::Request { req, reply } => match req {
                ClientRequest::TurnInterrupt(p) => {
                    let current = self.turn_id();
                    if p.turn_id.as_deref().is_some_and(|t| !t.is_empty() && t != current) {
                        return reply.err(
                            ErrorCode::Error,
                            format!("turn {:?} is not the active turn ({current})", p.turn_id.unwrap_or_default()),
                        );
                    }
                    self.stop.get_or_insert(Stop::Interrupt("interrupted".into()));
                    // Pending steers and queued input become durable held work.
                    self.s.hold_all_pending();
                    reply.ok(&OkResult { ok: true });
                }
                ClientRequest::RunInterrupt(p)
                    if Some(p.run_id.trim()) == self.opts.run_id.as_deref() =>
                {
                    let reason = if p.reason.as_deref() == Some("timeout") {
                        "timeout"
                    } else {
                        "interrupted"
                    };
                    self.stop.get_or_insert(Stop::Interrupt(reason.into()));
                    self.deferred.push(SessionMsg::Request {
                        req: ClientRequest::RunInterrupt(p),
                        reply,
                    });
                }
                ClientRequest::TurnStart(_) | ClientRequest::RunStart(_) => reply.err(
                    ErrorCode::ThreadBusy,
                    format!("thread {:?} already has a running turn", self.s.id),
                ),
                ClientRequest::ThreadDelete(_) => reply.err(
                    ErrorCode::ThreadBusy,
                    format!("thread {:?} is running; interrupt it first", self.s.id),
                ),
                ClientRequest::ThreadArchive(p) if p.archived && !p.force.unwrap_or(false) => reply
                    .err(
                        ErrorCode::ThreadBusy,
                        "cannot archive a running thread (send force: true after the user confirms)",
                    ),
                ClientRequest::ThreadArchive(p) if p.archived => {
                    self.stop.get_or_insert(Stop::Interrupt("archived".into()));
                    self.s.hold_all_pending();
                    self.deferred.push(SessionMsg::Request {
                        req: ClientRequest::ThreadArchive(p),
                        reply,
                    });
                }
                other => self.s.handle(SessionMsg::Request { req: other, reply }),
            },
            SessionMsg::Shutdown { done } => {
                self.stop.get_or_insert(Stop::Interrupt("shutdown".into()));
                self.deferred.push(SessionMsg::Shutdown { done });
            }
            other => self.s.handle(other),
        }
    }

    fn deadline_wait(&self) -> Duration {
        match self.opts.deadline_ms {
            Some(d) => Duration::from_millis((d - now_ms()).max(0) as u64),
            None => Duration::from_secs(3600),
        }
    }

    fn check_deadline(&mut self) {
        if let Some(d) = self.opts.deadline_ms {
            if now_ms() >= d {
                self.stop.get_or_insert(Stop::Interrupt("timeout".into()));
            }
        }
    }

    /// Runs the turn to its end and settles it.
    pub fn run(mut self) -> (TurnEnd, Vec<SessionMsg>) {
        let end = self.run_steps();
        self.settle(&end);
        (end, std::mem::take(&mut self.deferred))
    }

    fn provider(&mut self) -> Result<Arc<dyn Provider>, Box<TurnError>> {
        if let Some(p) = &self.provider {
            return Ok(p.clone());
        }
        let id = self.s.turns[self.turn_idx].row.provider.clone();
        match super::provider_for(&self.s.shared, &id) {
            Ok(p) => {
                self.provider = Some(p.clone());
                Ok(p)
            }
            Err(message) => Err(Box::new(TurnError {
                message,
                code: Some("provider_unavailable".into()),
                category: Some("provider".into()),
                provider: Some(id),
                ..Default::default()
            })),
        }
    }

    fn run_steps(&mut self) -> TurnEnd {
        let cfg = self.s.shared.config();
        let max_steps = cfg.agent().max_steps.unwrap_or(200).max(1);
        let root = self.s.shared.opts.workdir.clone();
        let cwd = std::path::PathBuf::from(&self.s.thread.cwd);
        let mode = PermissionMode::parse(&self.s.thread.permission_mode).unwrap_or_default();
        let sections = context::system_sections(
            &root,
            &cwd,
            mode.as_str(),
            cfg.config.instructions.as_deref(),
        );
        let system = context::system_prompt(&sections);
        let tool_specs = crate::session::client_tools::offered(&self.s.shared, mode);
        let provider = match self.provider() {
            Ok(p) => p,
            Err(e) => return TurnEnd::Failed(e),
        };
        let model = self.s.turns[self.turn_idx].row.model.clone();
        let provider_id = provider.id().to_owned();
        loop {
            if let Some(end) = self.stopped() {
                return end;
            }
            self.consume_steers();
            self.step += 1;
            if self.step > max_steps {
                return TurnEnd::Failed(Box::new(TurnError {
                    message: format!(
                        "the turn reached the step limit ({max_steps} model requests)"
                    ),
                    code: Some("max_steps_exceeded".into()),
                    category: Some("local".into()),
                    ..Default::default()
                }));
            }
            let messages = history::to_messages(&self.s.turns, &provider_id, &model);
            let turn_start_index =
                history::to_messages(&self.s.turns[..self.turn_idx], &provider_id, &model).len();
            let cache_key = self.s.id.chars().take(64).collect::<String>();
            let req = ChatRequest {
                model: model.clone(),
                system: system.clone(),
                messages,
                tools: tool_specs.clone(),
                effort: Some(self.s.thread.effort.clone()).filter(|e| !e.is_empty()),
                max_output_tokens: None,
                prompt_cache_key: Some(cache_key.clone()),
                output_schema: self
                    .opts
                    .output_schema
                    .clone()
                    .map(|s| json!({"name": "final_answer", "schema": s})),
            };
            let rc = context::request_context(
                self.step,
                &sections,
                &system,
                &req.messages,
                turn_start_index,
                &req.tools,
                &cache_key,
            );
            self.trace.write(json!({
                "type": "request", "thread_id": self.s.id, "turn_id": self.turn_id(),
                "step": self.step, "provider": provider_id, "model": model,
                "messages": req.messages.len(), "tools": req.tools.len(),
                "system_hash": rc["system_hash"], "turn_prefix_hash": rc["turn_prefix_hash"],
            }));
            self.event(rc);
            self.event(context::provider_state(
                self.step,
                &provider_id,
                provider.protocol(),
                req.messages.len(),
            ));
            let started = now_ms();
            let calls = match self.stream_step(provider.clone(), req) {
                Ok(Some(calls)) => calls,
                // A steer ended the stream at the visible text: next step.
                Ok(None) => continue,
                Err(end) => return end,
            };
            self.trace.write(json!({
                "type": "response", "thread_id": self.s.id, "turn_id": self.turn_id(),
                "step": self.step, "duration_ms": now_ms() - started,
                "tool_calls": calls.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
                "usage": self.usage,
            }));
            if calls.is_empty() && self.s.has_pending_steers() {
                // The user added input before the answer settled: continue the turn.
                if let Some(i) = self.agent_item.take() {
                    self.complete_item(i, "completed");
                }
                continue;
            }
            if calls.is_empty() {
                let content = self
                    .agent_item
                    .and_then(|i| self.s.turns[self.turn_idx].items[i].text.clone())
                    .unwrap_or_default();
                if let Some(i) = self.agent_item.take() {
                    self.item(i).terminal = true;
                    self.complete_item(i, "completed");
                }
                self.s.turns[self.turn_idx].row.answer_ready_at_ms = Some(now_ms());
                return TurnEnd::Completed { content };
            }
            for call in calls {
                self.run_tool(call, &cwd, mode);
            }
        }
    }

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

    /// Streams one provider step. Returns the complete tool calls of the step (empty =
    /// final answer) or how the turn ended.
    fn stream_step(
        &mut self,
        provider: Arc<dyn Provider>,
        req: ChatRequest,
    ) -> Result<Option<Vec<ToolCall>>, TurnEnd> {
        self.s.steer_signal = false;
        let handle = provider::start_stream(provider, req);
        let mut calls: Vec<ToolCall> = vec![];
        let mailbox = self.s.rx.clone();
        self.agent_item = None;
        self.reasoning_item = None;
        loop {
            if let Some(end) = self.stopped() {
                handle.cancel();
                self.settle_open_items();
                return Err(end);
            }
            let wait = self.deadline_wait();
            let ev = select! {
                recv(handle.events) -> ev => ev,
                recv(mailbox) -> msg => {
                    if let Ok(msg) = msg { self.on_mailbox(msg); }
                    if self.s.steer_signal && self.stop.is_none() {
                        handle.cancel();
                        self.end_at_visible_text();
                        return Ok(None);
                    }
                    continue;
                }
                default(wait) => { continue; }
            };
            let Ok(ev) = ev else {
                self.settle_open_items();
                return Err(TurnEnd::Failed(Box::new(provider_failure(
                    &self.s.turns[self.turn_idx].row.provider,
                    ProviderError {
                        kind: FailureKind::IncompleteStream,
                        message: "the provider stream ended without a result".into(),
                        status_code: None,
                        attempts: 1,
                        max_attempts: 1,
                        stop_reason: "recovery_unavailable".into(),
                    },
                ))));
            };
            // Output of a new attempt = a successful reconnect: drop the row. A final
            // failure leaves it to be frozen as `failed` (spec §4.9 rules 8, 10).
            if !matches!(
                ev,
                StreamEvent::Retrying { .. } | StreamEvent::Failed { .. }
            ) {
                if let Some(i) = self.reconnect_item.take() {
                    self.remove_item(i);
                }
            }
            match ev {
                StreamEvent::TextDelta { text } => self.append_text(false, text),
                StreamEvent::ReasoningDelta { text } => self.append_text(true, text),
                StreamEvent::ReasoningDone { block } => {
                    let idx = match self.reasoning_item.take() {
                        Some(i) => i,
                        None => {
                            let i = self.new_item("reasoning");
                            self.item(i).text = Some(block.text.clone());
                            self.announce_started(i);
                            i
                        }
                    };
                    if self.item(idx).text.as_deref().unwrap_or("").is_empty() {
                        self.item(idx).text = Some(block.text.clone());
                    }
                    self.item(idx).result_detail = serde_json::to_value(&block).ok();
                    self.complete_item(idx, "completed");
                }
                StreamEvent::ToolCallStart { id, name } => {
                    if let Some(i) = self.agent_item.take() {
                        self.complete_item(i, "completed");
                    }
                    if let Some(i) = self.reasoning_item.take() {
                        self.complete_item(i, "completed");
                    }
                    let i = self.new_item("tool_call");
                    self.item(i).call_id = Some(id);
                    self.item(i).name = Some(name);
                    self.item(i).arguments = Some(String::new());
                    self.announce_started(i);
                }
                StreamEvent::ToolCallDelta { id, delta } => {
                    if let Some(i) = self.find_call(&id) {
                        self.item(i)
                            .arguments
                            .get_or_insert_with(String::new)
                            .push_str(&delta);
                        let n = ToolCallDelta {
                            thread_id: self.thread_id(),
                            turn_id: self.turn_id(),
                            item_id: self.s.turns[self.turn_idx].items[i].id.clone(),
                            delta,
                        };
                        self.notify(&n);
                    }
                }
                StreamEvent::ToolCallEnd { call } => {
                    let i = match self.find_call(&call.id) {
                        Some(i) => i,
                        None => {
                            if let Some(a) = self.agent_item.take() {
                                self.complete_item(a, "completed");
                            }
                            let i = self.new_item("tool_call");
                            self.item(i).call_id = Some(call.id.clone());
                            self.item(i).name = Some(call.name.clone());
                            self.announce_started(i);
                            i
                        }
                    };
                    self.item(i).arguments = Some(call.arguments.clone());
                    calls.push(call);
                }
                StreamEvent::Retrying {
                    attempt,
                    max_attempts,
                    delay_ms,
                    kind,
                    message,
                } => {
                    // The failed attempt's partial output is void: drop this step's items.
                    let step = self.step;
                    while let Some(pos) = self.s.turns[self.turn_idx]
                        .items
                        .iter()
                        .position(|it| it.step == Some(step) && it.item_type != "stream_reconnect")
                    {
                        self.remove_item(pos);
                    }
                    calls.clear();
                    self.agent_item = None;
                    self.reasoning_item = None;
                    let idx = match self.reconnect_item {
                        Some(i) => i,
                        None => {
                            let i = self.new_item("stream_reconnect");
                            self.reconnect_item = Some(i);
                            i
                        }
                    };
                    let it = self.item(idx);
                    it.retry_count = Some(attempt.saturating_sub(1));
                    it.max_retries = Some(max_attempts.saturating_sub(1));
                    it.retry_at_ms = Some((now_ms() as u64) + delay_ms);
                    it.text = Some(message);
                    it.reason = serde_json::to_value(kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_owned));
                    self.announce_started(idx);
                }
                StreamEvent::Done {
                    usage,
                    stop_reason,
                    truncated,
                    ..
                } => {
                    self.add_usage(usage);
                    if let Some(i) = self.reasoning_item.take() {
                        self.complete_item(i, "completed");
                    }
                    let row = &mut self.s.turns[self.turn_idx].row;
                    row.stop_reason = stop_reason.clone();
                    row.finish_reason = stop_reason;
                    row.truncated = truncated;
                    if !calls.is_empty() {
                        if let Some(i) = self.agent_item.take() {
                            self.complete_item(i, "completed");
                        }
                    }
                    return Ok(Some(calls));
                }
                StreamEvent::Failed { error } => {
                    self.settle_open_items();
                    return Err(TurnEnd::Failed(Box::new(provider_failure(
                        &self.s.turns[self.turn_idx].row.provider,
                        error,
                    ))));
                }
            }
        }
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

    /// Takes pending steers into the turn (before the next model request): each becomes
    /// a user item, committed in the same transaction that marks the input consumed.
    fn consume_steers(&mut self) {
        let steers: Vec<_> = self
            .s
            .inputs_in(&[wuu_store::input_state::PENDING])
            .into_iter()
            .filter(|r| r.mode == wuu_store::input_mode::STEER)
            .collect();
        for row in steers {
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
                }
                Ok(false) | Err(_) => {
                    // Cancelled or edited meanwhile: a stale input never enters history.
                    self.s.turns[self.turn_idx].items.remove(i);
                }
            }
        }
    }

    /// Appends streamed text to this step's open agent-message (or reasoning) item,
    /// opening it first, and announces the delta.
    fn append_text(&mut self, reasoning: bool, text: String) {
        let open = if reasoning {
            self.reasoning_item
        } else {
            self.agent_item
        };
        let idx = match open {
            Some(i) => i,
            None => {
                let i = self.new_item(if reasoning {
                    "reasoning"
                } else {
                    "agent_message"
                });
                self.item(i).text = Some(String::new());
                self.announce_started(i);
                if reasoning {
                    self.reasoning_item = Some(i);
                } else {
                    self.agent_item = Some(i);
                }
                i
            }
        };
        self.item(idx)
            .text
            .get_or_insert_with(String::new)
            .push_str(&text);
        let (thread_id, turn_id) = (self.thread_id(), self.turn_id());
        let item_id = self.s.turns[self.turn_idx].items[idx].id.clone();
        if reasoning {
            self.notify(&ReasoningDelta {
                thread_id,
                turn_id,
                item_id,
                delta: text,
            });
        } else {
            self.notify(&AgentMessageDelta {
                thread_id,
                turn_id,
                item_id,
                delta: text,
            });
        }
    }

    fn find_call(&self, call_id: &str) -> Option<usize> {
        self.s.turns[self.turn_idx]
            .items
            .iter()
            .rposition(|i| i.item_type == "tool_call" && i.call_id.as_deref() == Some(call_id))
    }

    fn add_usage(&mut self, u: Usage) {
        self.usage.input_tokens += u.input_tokens;
        self.usage.output_tokens += u.output_tokens;
        self.usage.cache_read_tokens += u.cache_read_tokens;
        self.usage.cache_creation_tokens += u.cache_creation_tokens;
        self.usage.reasoning_tokens += u.reasoning_tokens;
        let row = &self.s.turns[self.turn_idx].row;
        let rec = UsageRow {
            thread_id: self.s.id.clone(),
            turn_id: row.id.clone(),
            provider: row.provider.clone(),
            model: row.model.clone(),
            at_ms: now_ms(),
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_creation_tokens: u.cache_creation_tokens,
            reasoning_tokens: u.reasoning_tokens,
        };
        if let Err((_, e)) = self.s.persist(|st| st.insert_usage(&rec)) {
            log::error!("usage record: {e}");
        }
        self.emit_usage(true);
    }

    /// Runs one complete tool call, streaming its output, until it ends or the turn is
    /// interrupted (then the command's process group is killed).
    fn run_tool(&mut self, call: ToolCall, cwd: &std::path::Path, mode: PermissionMode) {
        let Some(idx) = self.find_call(&call.id) else {
            return;
        };
        if self.stop.is_some() {
            self.item(idx).error = Some("not run: the turn was interrupted".into());
            self.complete_item(idx, "failed");
            return;
        }
        let cfg = self.s.shared.config();
        let agent = cfg.agent();
        let ctx = ToolContext {
            workspace_root: self.s.shared.opts.workdir.clone(),
            cwd: cwd.to_path_buf(),
            permission_mode: mode,
            spill_dir: self.s.shared.opts.home.join("spill").join(&self.s.id),
            default_timeout_ms: agent.bash_timeout_ms.unwrap_or(120_000),
            output_cap_bytes: agent.output_cap_bytes.unwrap_or(64 * 1024),
        };
        // The call is durable before its effect: after a crash its outcome is known to
        // be unknown (an at-most-once tool is then never repeated automatically).
        let item = self.s.turns[self.turn_idx].items[idx].clone();
        if !self.persist_item(&item) && tools::is_at_most_once(&call.name) {
            // Without a durable record a crash would leave no trace of the effect.
            self.item(idx).error =
                Some("not run: the call could not be recorded in the store".into());
            self.complete_item(idx, "failed");
            return;
        }
        // Re-announce the item (upsert, spec §4.3) now that its arguments are complete:
        // the first `item/started` went out before the arguments streamed.
        self.announce_started(idx);
        let started = now_ms();
        let handle = if crate::session::client_tools::handles(&self.s.shared, &call.name) {
            crate::session::client_tools::spawn(
                &self.s.shared,
                &self.s.id,
                &self.turn_id(),
                &call.id,
                &call.name,
                &call.arguments,
            )
        } else {
            tools::spawn(&call.name, &call.arguments, ctx)
        };
        let mailbox = self.s.rx.clone();
        let item_id = self.s.turns[self.turn_idx].items[idx].id.clone();
        let mut cancelled = false;
        let outcome: ToolOutcome = loop {
            if self.stop.is_some() && !cancelled {
                handle.cancel();
                cancelled = true;
            }
            let wait = if cancelled {
                Duration::from_secs(10)
            } else {
                self.deadline_wait()
            };
            select! {
                recv(handle.events) -> ev => match ev {
                    Ok(ToolEvent::Output { stream, text }) => {
                        let n = ToolCallOutputDelta {
                            thread_id: self.thread_id(),
                            turn_id: self.turn_id(),
                            item_id: item_id.clone(),
                            delta: text,
                            stream: Some(stream.to_owned()),
                        };
                        self.notify(&n);
                    }
                    Ok(ToolEvent::Done(o)) => break o,
                    Err(_) => break ToolOutcome {
                        output: "the tool ended without a result".into(),
                        is_error: true,
                        ..Default::default()
                    },
                },
                recv(mailbox) -> msg => if let Ok(m) = msg { self.on_mailbox(m) },
                default(wait) => {
                    self.check_deadline();
                    if cancelled {
                        break ToolOutcome {
                            output: "interrupted: the tool did not stop in time".into(),
                            is_error: true,
                            ..Default::default()
                        };
                    }
                }
            }
        };
        self.trace.write(json!({
            "type": "tool", "thread_id": self.s.id, "turn_id": self.turn_id(),
            "name": call.name, "arguments": crate::util::redact(&call.arguments),
            "duration_ms": now_ms() - started, "is_error": outcome.is_error,
            "permission_denied": outcome.permission_denied,
        }));
        if outcome.permission_denied {
            self.denials.push(json!({
                "item_id": item_id, "tool": call.name, "reason": outcome.output,
            }));
        }
        if call.name == "todo_write" && !outcome.is_error {
            let todo = json!({"todos": outcome.detail.get("todos").cloned().unwrap_or(json!([]))});
            self.event(json!({"type": "todo_update", "todo": todo}));
        }
        let it = self.item(idx);
        it.result = Some(outcome.output.clone());
        it.result_detail = Some(json!({
            "structured_content": outcome.detail,
            "is_error": outcome.is_error,
        }));
        if outcome.is_error {
            it.error = Some(outcome.output);
        }
        let status = if outcome.is_error {
            "failed"
        } else {
            "completed"
        };
        self.complete_item(idx, status);
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

    /// Settles the turn: row, usage totals, terminal notification, lease release.
    fn settle(&mut self, end: &TurnEnd) {
        self.settle_open_items();
        let now = now_ms();
        let denials = std::mem::take(&mut self.denials);
        {
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
        if let TurnEnd::Failed(e) = end {
            let i = self.new_item("error");
            self.item(i).error = Some(e.message.clone());
            self.announce_started(i);
            self.complete_item(i, "failed");
        }
        let row = self.s.turns[self.turn_idx].row.clone();
        if let Err((_, e)) = self.s.persist(|st| st.update_turn(&row)) {
            log::error!("persisting turn {} failed: {e}", row.id);
        }
        let id = self.s.id.clone();
        let _ = self.s.persist(|st| st.touch_thread(&id, now));
        self.s.thread.updated_at_ms = now;
        self.emit_usage(true);
        let turn = crate::session::convert::turn_wire(&self.s.turns[self.turn_idx]);
        let thread_id = self.thread_id();
        self.trace.write(json!({
            "type": "turn", "thread_id": thread_id, "turn_id": row.id, "status": row.status,
            "usage": self.usage, "at": rfc3339(now),
        }));
        let trace_path = self.trace.path_string();
        match end {
            TurnEnd::Completed { content } => {
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
                    awaiting_auto_continuation: false,
                };
                let _ = self.s.shared.notify(&n);
            }
            TurnEnd::Failed(_) | TurnEnd::Interrupted(_) => {
                let e = turn.error.clone().unwrap_or_default();
                let n = TurnErrorNotification {
                    thread_id,
                    turn_id: row.id.clone(),
                    error: e.message.clone(),
                    code: e.code.clone(),
                    category: e.category.clone(),
                    provider: e.provider.clone(),
                    status_code: e.status_code,
                    turn,
                };
                let _ = self.s.shared.notify(&n);
            }
        }
        crate::session::client_tools::turn_ended(&self.s.shared, &self.s.id, &row.id);
        super::release(self.s);
        // Issue 6: automatic title after a successful turn (logic in engine/title.rs).
        super::title::after_turn(self.s, matches!(end, TurnEnd::Completed { .. }));
    }
}

/// Maps a provider failure to the turn error (issue 3: 401/403 → `auth`, 404 and server
/// failures → `provider`, 400 → `invalid_request`, network → `network`).
pub fn provider_failure(provider_id: &str, e: ProviderError) -> TurnError {
    let category = match e.kind {
        FailureKind::Authentication => "auth",
        FailureKind::InvalidRequest
        | FailureKind::ContextOverflow
        | FailureKind::RequestTooLarge => "invalid_request",
        FailureKind::Network | FailureKind::IncompleteStream => "network",
        FailureKind::Cancelled => "cancelled",
        _ => "provider",
    };
    let code = serde_json::to_value(e.kind)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned));
    TurnError {
        message: e.message.clone(),
        code: code.clone(),
        category: Some(category.into()),
        provider: Some(provider_id.to_owned()),
        status_code: e.status_code,
        recovery: Some(Recovery {
            attempt_count: e.attempts,
            retry_count: e.attempts.saturating_sub(1),
            submission_count: e.attempts,
            max_attempts: e.max_attempts,
            stop_reason: e.stop_reason.clone(),
            failure_category: code.unwrap_or_default(),
            operation_id: String::new(),
        }),
    }
}
