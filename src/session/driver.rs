//! The turn driver: runs one admitted turn of a conversation over the engine seam
//! ([`crate::engine`]) and projects what the engine says (spec `app-server.md`
//! §4.3–§4.9, `engines.md` §1.1).
//!
//! The engine runs on its own thread; this (session) thread `select!`s over the engine's
//! events, the session mailbox and the run deadline, so an interrupt or a steer is
//! answered at once and forwarded to the engine as a control. The projector here is the
//! only code that turns engine events into items, notifications and store rows — the
//! same for every engine. Every item is persisted as it settles; the turn ends with
//! exactly one of `turn/completed` / `turn/error`.

use crate::engine::trace::Trace;
use crate::engine::{
    history, Control, EngineEvent, EventSink, Limits, Outcome, SteerInput, Steering, StepStart,
    TurnRequest, UserInput, EVENT_CAPACITY,
};
use crate::outbound::transport::Overflow;
use crate::provider::chat::Usage;
use crate::session::{Session, SessionMsg};
use crate::util::{now_ms, rfc3339};
use crossbeam_channel::select;
use serde_json::{json, Value};
use std::time::Duration;
use wuu_protocol::*;
use wuu_store::{ItemRow, UsageRow};

mod native;

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
    /// Messages that must wait until the turn settles (archive, shutdown).
    pub deferred: Vec<SessionMsg>,
    stop: Option<Stop>,
    /// The stop was asked for by the client and acknowledged (`turn/interrupt`,
    /// `run/interrupt`, a forced archive): the turn ends interrupted even if the engine
    /// finished meanwhile (spec rule 9).
    stop_acknowledged: bool,
    denials: Vec<Value>,
    agent_item: Option<usize>,
    reasoning_item: Option<usize>,
    reconnect_item: Option<usize>,
    trace: Trace,
    opts: TurnOptions,
    last_usage_emit: i64,
    /// Input size (fresh + cached tokens) of the last provider request.
    last_context_tokens: Option<u64>,
    /// Messages of the turns before this one (computed once per turn).
    prior_messages: Option<usize>,
    /// The answer text once the engine marked it final.
    final_content: Option<String>,
    /// Steers handed to a native steering engine (not sent twice).
    steers_sent: Vec<String>,
    /// Questions of the engine relayed to the client.
    questions: Vec<native::Relayed>,
    /// The control channel of the running engine.
    ctl: Option<crossbeam_channel::Sender<Control>>,
    /// Tails of delta streams held back because a secret may continue in the next
    /// delta, by item id and stream; sent before the item is complete.
    masks: crate::secrets::DeltaStreams<(String, DeltaKind)>,
    /// This turn's share of the outbox for its deltas (fair among streaming
    /// conversations, see [`crate::outbound::transport::Lane`]).
    lane: crate::outbound::transport::Lane,
    /// Delta frames of the engine batch being projected, not yet handed to the outbox.
    deltas: crate::outbound::transport::Lines,
    /// An engine batch is being projected (deltas are gathered, [`Self::send_deltas`]).
    batching: bool,
}

/// The delta streams of an item (`item/agentMessage/delta`, `item/reasoning/delta`,
/// `item/toolCall/delta`, `item/toolCall/outputDelta` of one output stream).
#[derive(Clone, PartialEq)]
enum DeltaKind {
    Message,
    Reasoning,
    Arguments,
    Output(Option<String>),
}

/// Decodes stored attachments (`{media_type, data}` values).
fn attachments(v: Option<&[Value]>) -> Vec<Attachment> {
    v.unwrap_or_default()
        .iter()
        .filter_map(|a| serde_json::from_value(a.clone()).ok())
        .collect()
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
            deferred: vec![],
            stop: None,
            stop_acknowledged: false,
            denials: vec![],
            agent_item: None,
            reasoning_item: None,
            reconnect_item: None,
            trace,
            opts,
            last_usage_emit: 0,
            last_context_tokens: None,
            prior_messages: None,
            final_content: None,
            steers_sent: vec![],
            questions: vec![],
            ctl: None,
            masks: Default::default(),
            lane: Default::default(),
            deltas: Default::default(),
            batching: false,
        }
    }

    fn thread_id(&self) -> String {
        self.s.id.clone()
    }

    fn turn_id(&self) -> String {
        self.s.turns[self.turn_idx].row.id.clone()
    }

    fn notify<N: ServerNotification>(&mut self, n: &N) {
        self.send_deltas();
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
        self.flush_deltas(idx, |_| true);
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
            event: nest_turn_event(event),
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
            context_tokens: self.last_context_tokens,
            context_window_tokens: {
                let row = &self.s.turns[self.turn_idx].row;
                let host = &self.s.shared;
                crate::provider::catalog::context_window(
                    &host.config(),
                    &host.model_catalog,
                    &row.provider,
                    &row.model,
                )
            },
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
                    self.stop_acknowledged = true;
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
                    self.stop_acknowledged = true;
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
                    self.stop_acknowledged = true;
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

    /// Takes a store connection again after a wait (see `run_engine`). When none can be
    /// opened the turn stops: nothing more of it could be persisted.
    fn take_store(&mut self) {
        if let Err((_, message)) = self.s.acquire_store() {
            log::error!("turn of {}: {message}", self.s.id);
            self.stop
                .get_or_insert(Stop::Interrupt(format!("store unavailable: {message}")));
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
        let end = self.run_engine();
        self.settle(&end);
        (end, std::mem::take(&mut self.deferred))
    }

    /// The engine's view of the admitted turn.
    fn request(&self) -> TurnRequest {
        let cfg = self.s.shared.config();
        let agent = cfg.agent();
        let row = &self.s.turns[self.turn_idx].row;
        let input = self.s.turns[self.turn_idx]
            .items
            .first()
            .filter(|i| i.item_type == "user_message")
            .map(|i| UserInput {
                prompt: i.text.clone().unwrap_or_default(),
                images: attachments(i.images.as_deref()),
                files: attachments(i.files.as_deref()),
            })
            .unwrap_or_default();
        TurnRequest {
            thread_id: self.s.id.clone(),
            turn_id: row.id.clone(),
            workspace_root: self.s.shared.opts.workdir.clone(),
            cwd: std::path::PathBuf::from(&self.s.thread.cwd),
            home: self.s.shared.opts.home.clone(),
            provider_id: row.provider.clone(),
            model: row.model.clone(),
            effort: self.s.thread.effort.clone(),
            permission_mode: super::convert::stored_permission_mode(&self.s.thread),
            instructions: cfg.config.instructions.clone(),
            output_schema: self.opts.output_schema.clone(),
            input,
            engine_ref: super::engines::engine_ref(&self.s.thread),
            limits: Limits {
                max_steps: agent.max_steps.unwrap_or(200).max(1),
                bash_timeout_ms: agent.bash_timeout_ms.unwrap_or(120_000),
                output_cap_bytes: agent.output_cap_bytes.unwrap_or(64 * 1024),
                sandbox: crate::tools::sandbox::SandboxSettings {
                    process_ledger: Some(self.s.shared.opts.home.clone()),
                    ..crate::tools::sandbox::SandboxSettings::from_config(&cfg)
                },
                temperature: agent.temperature,
            },
        }
    }

    /// Runs the conversation's engine on its own thread and projects its events here,
    /// serving the mailbox meanwhile.
    fn run_engine(&mut self) -> TurnEnd {
        let mut engine = super::engines::open(self.s);
        let steering = engine.steering();
        let req = self.request();
        let (ev_tx, ev_rx) = crossbeam_channel::bounded(EVENT_CAPACITY);
        // Controls are rare (at most one per request this session serves, and the
        // mailbox is bounded); unbounded so the host never blocks on an engine that
        // itself waits for the host.
        let (ctl_tx, ctl_rx) = crossbeam_channel::unbounded();
        let mailbox = self.s.rx.clone();
        self.ctl = Some(ctl_tx.clone());
        let joined = std::thread::scope(|sc| {
            let spawned = std::thread::Builder::new()
                .name(format!("wuu-engine-{}", engine.id()))
                .spawn_scoped(sc, move || {
                    let sink = EventSink::new(ev_tx);
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        engine.run_turn(req, &sink, &ctl_rx)
                    }));
                    (engine, outcome)
                });
            let handle = match spawned {
                Ok(h) => h,
                Err(e) => return Err(format!("cannot start the engine thread: {e}")),
            };
            let mut stop_sent = false;
            loop {
                let wait = self.deadline_wait();
                if ev_rx.is_empty() && mailbox.is_empty() {
                    // Nothing to do until the engine or a client speaks: the store
                    // connection goes back to the pool meanwhile (issue 15: a streaming
                    // turn needs none, so busy sessions share a few warm ones).
                    self.s.release_store();
                }
                select! {
                    recv(ev_rx) -> ev => match ev {
                        Ok(ev) => self.project_event(ev),
                        Err(_) => break,
                    },
                    recv(mailbox) -> msg => if let Ok(m) = msg {
                        self.take_store();
                        self.on_mailbox(*m)
                    },
                    default(wait) => self.take_store(),
                }
                self.check_deadline();
                if self.stop.is_some() {
                    if !stop_sent {
                        stop_sent = true;
                        let _ = ctl_tx.send(Control::Interrupt);
                    }
                } else if self.s.steer_signal {
                    self.s.steer_signal = false;
                    match steering {
                        Steering::NextStep => {
                            let _ = ctl_tx.send(Control::Steer(None));
                        }
                        Steering::Native => {
                            for steer in self.native_steers() {
                                let _ = ctl_tx.send(Control::Steer(Some(steer)));
                            }
                        }
                    }
                }
            }
            drop(ctl_tx);
            self.ctl = None;
            self.take_store();
            handle
                .join()
                .map_err(|_| "the engine thread failed".to_owned())
        });
        let outcome = match joined {
            Ok((engine, Ok(outcome))) => {
                // An external engine session (and its native host) outlives the turn.
                if engine.id() != crate::engine::BUILTIN {
                    self.s.engine = Some(engine);
                }
                outcome
            }
            Ok((_, Err(_))) | Err(_) => Outcome::Failed(Box::new(TurnError {
                message: "internal error: the engine failed unexpectedly".into(),
                code: Some("internal_error".into()),
                category: Some("local".into()),
                ..Default::default()
            })),
        };
        self.revoke_questions();
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
    /// which becomes the terminal answer.
    fn finish_answer(&mut self) -> String {
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
        self.complete_item(i, "completed");
        self.s.turns[self.turn_idx].row.answer_ready_at_ms = Some(now_ms());
        content
    }

    /// Steers waiting for a native steering engine that it has not been given yet.
    fn native_steers(&mut self) -> Vec<SteerInput> {
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
                let input = super::inputs::input_of(&row);
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

    /// Projects one engine event onto the turn (items, notifications, store rows; a
    /// batch: its events one by one), with a store connection at hand unless the event
    /// never touches the store: deltas and diagnostics are notifications only. (A
    /// session that took a connection keeps it until its queue is empty, which a
    /// streaming session's seldom is; the two diagnostics before every provider request
    /// used to take one, so with 200 turns streaming the pool's few connections were
    /// held by the first streams and the others waited for one before their first
    /// delta; issue 15's stream row went from 223k–299k to 358k–384k deltas/s without
    /// it.)
    fn project_event(&mut self, ev: EngineEvent) {
        if !(ev.is_delta() || matches!(ev, EngineEvent::Diagnostic(_) | EngineEvent::Batch(_))) {
            self.take_store();
        }
        self.project(ev)
    }

    fn project(&mut self, ev: EngineEvent) {
        match ev {
            EngineEvent::Batch(evs) => {
                // The batch's delta frames go to the outbox together; any other event
                // first sends those before it, whatever it sends itself.
                let outer = std::mem::replace(&mut self.batching, true);
                for ev in evs {
                    if !ev.is_delta() {
                        self.send_deltas();
                    }
                    self.project_event(ev);
                }
                self.batching = outer;
                if !outer {
                    self.send_deltas();
                }
            }
            EngineEvent::BeginStep { reply } => {
                if self.stop.is_some() {
                    return; // the dropped reply stops the engine
                }
                self.consume_steers();
                self.step += 1;
                self.agent_item = None;
                self.reasoning_item = None;
                let row = &self.s.turns[self.turn_idx].row;
                let (provider, model) = (row.provider.clone(), row.model.clone());
                let messages = history::to_messages(&self.s.turns, &provider, &model);
                let turn_start_index = match self.prior_messages {
                    Some(n) => n,
                    None => {
                        let n =
                            history::to_messages(&self.s.turns[..self.turn_idx], &provider, &model)
                                .len();
                        self.prior_messages = Some(n);
                        n
                    }
                };
                let _ = reply.send(StepStart {
                    step: self.step,
                    messages,
                    turn_start_index,
                });
            }
            EngineEvent::Step => {
                self.step += 1;
                self.agent_item = None;
                self.reasoning_item = None;
            }
            EngineEvent::AnswerReady { reply } => {
                if self.s.has_pending_steers() {
                    // The user added input before the answer settled: continue.
                    if let Some(i) = self.agent_item.take() {
                        self.complete_item(i, "completed");
                    }
                    let _ = reply.send(true);
                } else {
                    let content = self.finish_answer();
                    self.final_content = Some(content);
                    let _ = reply.send(false);
                }
            }
            EngineEvent::ToolReady {
                call_id,
                at_most_once,
                reply,
            } => {
                let Some(idx) = self.find_call(&call_id) else {
                    let _ = reply.send(false);
                    return;
                };
                self.flush_deltas(idx, |k| *k == DeltaKind::Arguments);
                let item = self.s.turns[self.turn_idx].items[idx].clone();
                let stored = self.persist_item(&item);
                if stored || !at_most_once {
                    // Re-announce the item (upsert, spec §4.3) now that its arguments
                    // are complete: the first `item/started` went out before they
                    // streamed.
                    self.announce_started(idx);
                }
                let _ = reply.send(stored);
            }
            EngineEvent::PersistRef { engine_ref, reply } => {
                let _ = reply.send(super::engines::persist_ref(self.s, &engine_ref));
            }
            EngineEvent::ContentDelta(text) => self.append_text(false, text),
            EngineEvent::ThinkingDelta(text) => self.append_text(true, text),
            EngineEvent::ContentReplace(text) => self.replace_text(false, text),
            EngineEvent::ThinkingReplace(text) => self.replace_text(true, text),
            EngineEvent::MessageDone { final_answer } => {
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
            EngineEvent::ThinkingDone { text, detail } => {
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
            EngineEvent::ToolStart {
                call_id,
                name,
                arguments,
            } => {
                if let Some(i) = self.agent_item.take() {
                    self.complete_item(i, "completed");
                }
                if let Some(i) = self.reasoning_item.take() {
                    self.complete_item(i, "completed");
                }
                let i = self.new_item("tool_call");
                self.item(i).call_id = Some(call_id);
                self.item(i).name = Some(name);
                self.item(i).arguments = Some(arguments.unwrap_or_default());
                self.announce_started(i);
            }
            EngineEvent::ToolArgsDelta { call_id, delta } => {
                if let Some(i) = self.find_call(&call_id) {
                    self.item(i)
                        .arguments
                        .get_or_insert_with(String::new)
                        .push_str(&delta);
                    self.send_delta(i, DeltaKind::Arguments, delta);
                }
            }
            EngineEvent::ToolArgs {
                call_id,
                name,
                arguments,
            } => {
                let i = match self.find_call(&call_id) {
                    Some(i) => i,
                    None => {
                        if let Some(a) = self.agent_item.take() {
                            self.complete_item(a, "completed");
                        }
                        let i = self.new_item("tool_call");
                        self.item(i).call_id = Some(call_id);
                        self.item(i).name = Some(name);
                        self.announce_started(i);
                        i
                    }
                };
                self.flush_deltas(i, |k| *k == DeltaKind::Arguments);
                self.item(i).arguments = Some(arguments);
            }
            EngineEvent::ToolOutput {
                call_id,
                stream,
                text,
            } => {
                if let Some(i) = self.find_call(&call_id) {
                    self.send_delta(i, DeltaKind::Output(stream), text);
                }
            }
            EngineEvent::ToolEnd {
                call_id,
                output,
                detail,
                is_error,
                error,
                permission_denied,
            } => {
                let Some(idx) = self.find_call(&call_id) else {
                    return;
                };
                if permission_denied {
                    let it = &self.s.turns[self.turn_idx].items[idx];
                    self.denials.push(json!({
                        "item_id": it.id, "tool": it.name.clone().unwrap_or_default(),
                        "reason": output.clone().unwrap_or_default(),
                    }));
                }
                let it = self.item(idx);
                if let Some(out) = output {
                    it.result = Some(out);
                    it.result_detail = Some(json!({
                        "structured_content": detail.unwrap_or(Value::Null),
                        "is_error": is_error,
                    }));
                }
                if error.is_some() {
                    it.error = error;
                }
                self.complete_item(idx, if is_error { "failed" } else { "completed" });
            }
            EngineEvent::Usage(u) => self.add_usage(u),
            EngineEvent::StepEnd {
                stop_reason,
                truncated,
                has_calls,
            } => {
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
            EngineEvent::ToolWithdrawn { call_id, reason } => {
                log::info!("tool call {call_id} withdrawn: {reason}");
                if let Some(i) = self.find_call(&call_id) {
                    self.remove_item(i);
                }
            }
            EngineEvent::StreamCut => self.end_at_visible_text(),
            EngineEvent::Reconnecting(r) => {
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
            self.commit_steer(row);
        }
    }

    /// Commits one pending steer as a user item of this turn (same transaction as the
    /// input's consumption). `false` when it was cancelled or edited meanwhile (a stale
    /// input never enters history) or the commit failed.
    fn commit_steer(&mut self, row: wuu_store::InputRow) -> bool {
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

    /// Appends streamed text to this step's open agent-message (or reasoning) item,
    /// opening it first, and announces the delta.
    fn append_text(&mut self, reasoning: bool, text: String) {
        let (idx, opened) = self.open_text_item(reasoning);
        if opened {
            self.item(idx).text = Some(String::new());
            self.announce_started(idx);
        }
        self.item(idx)
            .text
            .get_or_insert_with(String::new)
            .push_str(&text);
        let kind = if reasoning {
            DeltaKind::Reasoning
        } else {
            DeltaKind::Message
        };
        self.send_delta(idx, kind, text);
    }

    /// Announces one delta of item `idx`, masked: a tail that may be the start of a
    /// secret split across deltas is held back (crate::secrets::DeltaStreams) and sent
    /// with the next delta or by [`Self::flush_deltas`]. The deltas sent for a stream
    /// add up to the redacted text of the item.
    fn send_delta(&mut self, idx: usize, kind: DeltaKind, delta: String) {
        let key = (self.s.turns[self.turn_idx].items[idx].id.clone(), kind);
        let delta = self.masks.push(&key, delta);
        if !delta.is_empty() {
            self.notify_delta(key.0, key.1, delta);
        }
    }

    /// Sends the held-back tails of item `idx`'s delta streams that `which` selects
    /// (before the item is announced with its whole text: complete, or arguments done).
    fn flush_deltas(&mut self, idx: usize, which: impl Fn(&DeltaKind) -> bool) {
        if self.masks.is_empty() {
            return;
        }
        let id = self.s.turns[self.turn_idx].items[idx].id.clone();
        for ((item_id, kind), delta) in self.masks.finish(|(i, k)| *i == id && which(k)) {
            self.notify_delta(item_id, kind, delta);
        }
    }

    /// Gathers one delta frame; it is handed to the outbox with the rest of its engine
    /// batch ([`Self::send_deltas`]), at once outside a batch.
    fn notify_delta(&mut self, item_id: String, kind: DeltaKind, delta: String) {
        let (method, stream) = match &kind {
            DeltaKind::Message => (AgentMessageDelta::METHOD, None),
            DeltaKind::Reasoning => (ReasoningDelta::METHOD, None),
            DeltaKind::Arguments => (ToolCallDelta::METHOD, None),
            DeltaKind::Output(stream) => (ToolCallOutputDelta::METHOD, stream.as_deref()),
        };
        let ids = [
            self.s.id.as_str(),
            self.s.turns[self.turn_idx].row.id.as_str(),
            item_id.as_str(),
        ];
        crate::outbound::frames::delta_frame_into(
            self.deltas.next_frame(),
            method,
            ids,
            &delta,
            stream,
        );
        if !self.batching || self.deltas.len() >= crate::outbound::transport::LANE_CHUNK_LINES {
            self.send_deltas();
        }
    }

    /// Hands the gathered delta frames to the outbox (before any other frame of the
    /// turn, so the order is kept).
    fn send_deltas(&mut self) {
        if self.deltas.is_empty() {
            return;
        }
        if let Err(Overflow) = self.s.shared.send_deltas(&self.lane, &mut self.deltas) {
            log::error!("outbox overflow in {}; failing the turn", self.s.id);
            self.stop.get_or_insert(Stop::Overflow);
        }
    }

    fn find_call(&self, call_id: &str) -> Option<usize> {
        self.s.turns[self.turn_idx]
            .items
            .iter()
            .rposition(|i| i.item_type == "tool_call" && i.call_id.as_deref() == Some(call_id))
    }

    fn add_usage(&mut self, u: Usage) {
        self.last_context_tokens =
            Some(u.input_tokens + u.cache_read_tokens + u.cache_creation_tokens);
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
        let id = self.s.id.clone();
        let owner = self.s.shared.owner.clone();
        // One transaction settles the row, records the conversation's activity time and
        // gives the lease back (issue 15: each write transaction queues at the write
        // gate); `running` is cleared once the turn is announced, below.
        let settled = match self.s.persist(|st| {
            st.transaction(|tx| {
                tx.update_turn(&row)?;
                tx.touch_thread(&id, now)?;
                tx.release_lease(&id, &owner)
            })
        }) {
            Ok(()) => true,
            Err((_, e)) => {
                log::error!("persisting turn {} failed: {e}", row.id);
                false
            }
        };
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
        if settled {
            self.s.shared.registry.set_running(&self.s.running, false);
        } else {
            // The lease is still ours: release it on its own.
            super::turn::release(self.s);
        }
        // Issue 6: automatic title after a successful turn (logic in engine/title.rs).
        super::title::after_turn(self.s, matches!(end, TurnEnd::Completed { .. }));
    }
}
