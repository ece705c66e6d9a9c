//! Pending input: `turn/queue`, `turn/update-queued`, `turn/dequeue`, `turn/steer`,
//! `turn/unsteer` (seed: 排队输入与崩溃恢复 "queued input and crash recovery";
//! spec `app-server.md` §3.2, §4.4, §5.5, §6 rules 6–10).
//!
//! Every accepted input, edit and cancel is committed to the store before its success
//! response. An input row is keyed by its `client_id` (or a generated id) and remembers
//! consumed and cancelled ids, so retries are safe:
//! - a repeated queue returns the original entry and changes nothing;
//! - a consumed id is refused by every input method;
//! - a cancel blocks retries in the same mode; an explicit switch between queue and
//!   steer supersedes the earlier mode's cancel record.
//!
//! `pending` inputs are managed by this process; `held` inputs never dispatch by
//! themselves (what pending inputs become after a restart or an interrupt).

use super::Session;
use crate::outbound::Responder;
use crate::session::turn::{self as engine, TurnInput};
use crate::util::{new_id, now_ms, preview};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use wuu_protocol::*;
use wuu_store::{input_mode, input_state, InputRow};

type Refusal = (ErrorCode, String);

fn refuse(m: impl Into<String>) -> Refusal {
    (ErrorCode::Error, m.into())
}

/// The body stored for an input.
fn body_of(input: &TurnInput, active_document: Option<Value>) -> Value {
    json!({
        "prompt": input.prompt,
        "images": input.images,
        "files": input.files,
        "content_parts": input.content_parts,
        "active_document": active_document,
    })
}

/// Rebuilds the turn input of a stored row.
pub fn input_of(row: &InputRow) -> TurnInput {
    let b = &row.body;
    TurnInput {
        prompt: b["prompt"].as_str().unwrap_or("").to_owned(),
        images: serde_json::from_value(b["images"].clone()).unwrap_or_default(),
        files: serde_json::from_value(b["files"].clone()).unwrap_or_default(),
        content_parts: serde_json::from_value(b["content_parts"].clone()).unwrap_or_default(),
        client_id: Some(row.id.clone()),
        origin: Some(row.mode.clone()),
        consume: Some(row.clone()),
        continue_of: None,
    }
}

/// Whether an entry's native delivery is unconfirmed: it may have reached the engine,
/// so it is never edited, withdrawn, requeued or resent (seed: 排队输入与崩溃恢复).
pub fn frozen(row: &InputRow) -> bool {
    row.body["delivery_unconfirmed"].as_bool() == Some(true)
}

fn frozen_refusal(id: &str) -> String {
    format!(
        "input {id:?} may already have reached the engine (delivery_unconfirmed): it cannot be edited, withdrawn, requeued or resent; check the native conversation before sending a replacement"
    )
}

/// The wire form of a stored input.
pub fn message_of(row: &InputRow) -> HeldUserMessage {
    let b = &row.body;
    let nonempty =
        |v: &Value| (!v.is_null() && v.as_array().is_none_or(|a| !a.is_empty())).then(|| v.clone());
    HeldUserMessage {
        id: row.id.clone(),
        thread_id: row.thread_id.clone(),
        origin: row.mode.clone(),
        prompt: b["prompt"].as_str().map(str::to_owned),
        images: nonempty(&b["images"]).and_then(|v| serde_json::from_value(v).ok()),
        files: nonempty(&b["files"]).and_then(|v| serde_json::from_value(v).ok()),
        content_parts: nonempty(&b["content_parts"]).and_then(|v| serde_json::from_value(v).ok()),
        active_document: nonempty(&b["active_document"]),
        delivery_unconfirmed: b["delivery_unconfirmed"].as_bool().filter(|b| *b),
    }
}

fn queued_of(row: &InputRow) -> QueuedTurn {
    let m = message_of(row);
    QueuedTurn {
        id: row.id.clone(),
        thread_id: row.thread_id.clone(),
        preview: m.prompt.as_deref().map(|p| preview(p, 120)),
        image_count: m.images.as_ref().map(|v| v.len() as u32).filter(|n| *n > 0),
        file_count: m.files.as_ref().map(|v| v.len() as u32).filter(|n| *n > 0),
    }
}

impl Session {
    /// One stored input of this conversation.
    pub fn input_get(&self, id: &str) -> Option<InputRow> {
        match &self.store {
            Some(st) => st.get_input(&self.id, id).ok().flatten(),
            None => self.mem_inputs.iter().find(|r| r.id == id).cloned(),
        }
    }

    /// Stored inputs in the given states, oldest first.
    pub fn inputs_in(&self, states: &[&str]) -> Vec<InputRow> {
        match &self.store {
            // A read that met a lost database connection is read again (the next call
            // reconnects): an empty answer would let a pending input escape a hold.
            Some(st) => st
                .list_inputs(&self.id, states)
                .or_else(|_| st.list_inputs(&self.id, states))
                .unwrap_or_else(|e| {
                    log::error!("reading the inputs of {}: {e}", self.id);
                    vec![]
                }),
            None => self
                .mem_inputs
                .iter()
                .filter(|r| states.contains(&r.state.as_str()))
                .cloned()
                .collect(),
        }
    }

    /// Commits an input row (before any success response).
    pub fn input_put(&mut self, mut row: InputRow) -> Result<(), Refusal> {
        row.updated_at_ms = now_ms();
        if self.store.is_none() {
            match self.mem_inputs.iter_mut().find(|r| r.id == row.id) {
                Some(slot) => *slot = row,
                None => self.mem_inputs.push(row),
            }
            return Ok(());
        }
        self.persist(|st| st.upsert_input(&row))
    }

    /// Held messages (durable, never auto-run).
    pub fn held_messages(&self) -> Vec<HeldUserMessage> {
        self.inputs_in(&[input_state::HELD])
            .iter()
            .map(message_of)
            .collect()
    }

    /// Pending messages this process manages.
    pub fn pending_messages(&self) -> Vec<HeldUserMessage> {
        self.inputs_in(&[input_state::PENDING])
            .iter()
            .map(message_of)
            .collect()
    }

    /// Announces the complete held list (after an engine changed an entry).
    pub(crate) fn announce_held(&self) {
        self.notify_held(None);
    }

    fn notify_held(&self, error: Option<String>) {
        let _ = self.shared.outbox.notify(&TurnHeld {
            thread_id: self.id.clone(),
            messages: self.held_messages(),
            error,
        });
    }

    /// After a restart (or a revival), inputs left `pending` by a previous process come
    /// back as held: they are never run automatically.
    /// Workers' results stay pending: they are delivered, not held.
    pub fn hold_leftover_pending(&mut self) {
        for mut row in self.inputs_in(&[input_state::PENDING]) {
            if row
                .id
                .starts_with(crate::session::agents::RESULT_INPUT_PREFIX)
            {
                continue;
            }
            row.state = input_state::HELD.into();
            let _ = self.input_put(row);
        }
    }

    /// Interrupt: every pending queued and steered input becomes held; announces the
    /// complete held list.
    pub fn hold_all_pending(&mut self) {
        let pending = self.inputs_in(&[input_state::PENDING]);
        if pending.is_empty() {
            return;
        }
        for mut row in pending {
            row.state = input_state::HELD.into();
            if let Err((_, e)) = self.input_put(row) {
                log::error!("holding input: {e}");
            }
        }
        self.notify_held(None);
    }

    fn active_turn_id(&self) -> Option<String> {
        if !self.running.load(Ordering::SeqCst) {
            return None;
        }
        self.turns
            .last()
            .filter(|t| t.row.status == "in_progress")
            .map(|t| t.row.id.clone())
    }

    /// Whether steers wait for the next model step.
    pub fn has_pending_steers(&self) -> bool {
        !self
            .inputs_in(&[input_state::PENDING])
            .iter()
            .all(|r| r.mode != input_mode::STEER)
    }

    /// `turn/queue`.
    pub(crate) fn queue(&mut self, p: TurnQueueParams, reply: Responder) {
        let input = match engine::input_from(
            self,
            p.input.prompt,
            p.input.images,
            p.input.files,
            p.input.content_parts,
            p.input.client_id.clone(),
            p.input.permission_mode,
        ) {
            Ok(i) => i,
            Err((c, m)) => return reply.err(c, m),
        };
        let id = input.client_id.clone().unwrap_or_else(|| new_id("q"));
        if let Some(existing) = self.input_get(&id) {
            if frozen(&existing) {
                return reply.err(ErrorCode::Error, frozen_refusal(&id));
            }
            match (existing.mode.as_str(), existing.state.as_str()) {
                (_, input_state::CONSUMED) => {
                    return reply.err(
                        ErrorCode::Error,
                        format!("client_id {id:?} was already consumed"),
                    )
                }
                (input_mode::QUEUE, input_state::PENDING | input_state::HELD) => {
                    return reply.ok(&TurnQueueResult {
                        queued: queued_of(&existing),
                    })
                }
                (input_mode::STEER, input_state::PENDING | input_state::HELD) => {
                    return reply.err(
                        ErrorCode::Error,
                        "client_id is already pending as steering input",
                    )
                }
                (input_mode::QUEUE, input_state::CANCELLED) => {
                    return reply.err(
                        ErrorCode::Error,
                        "queue submission was cancelled before arrival",
                    )
                }
                _ => {} // a steer's cancel record is superseded by this explicit queue
            }
        }
        let hold = p.hold.unwrap_or(false);
        let now = now_ms();
        let row = InputRow {
            thread_id: self.id.clone(),
            id: id.clone(),
            mode: input_mode::QUEUE.into(),
            state: if hold {
                input_state::HELD
            } else {
                input_state::PENDING
            }
            .into(),
            body: body_of(&input, p.active_document),
            created_at_ms: now,
            updated_at_ms: now,
        };
        if let Err((c, m)) = self.input_put(row.clone()) {
            return reply.err(c, m);
        }
        reply.ok(&TurnQueueResult {
            queued: queued_of(&row),
        });
        if hold {
            self.notify_held(None);
        } else {
            let _ = self.shared.outbox.notify(&TurnQueued {
                queued: queued_of(&row),
                message: message_of(&row),
            });
            self.drain_queue();
        }
    }

    /// `turn/update-queued`.
    pub(crate) fn update_queued(&mut self, p: TurnUpdateQueuedParams, reply: Responder) {
        let Some(mut row) = self
            .input_get(p.queue_id.trim())
            .filter(|r| r.state == input_state::PENDING || r.state == input_state::HELD)
        else {
            return reply.ok(&TurnUpdateQueuedResult {
                ok: false,
                queued: None,
            });
        };
        if frozen(&row) {
            return reply.err(ErrorCode::Error, frozen_refusal(&row.id));
        }
        let mut input = input_of(&row);
        if let Some(prompt) = p.prompt {
            input.prompt = prompt;
        }
        if let Some(i) = p.images {
            input.images = i;
        }
        if let Some(f) = p.files {
            input.files = f;
        }
        if input.prompt.trim().is_empty() && input.images.is_empty() && input.files.is_empty() {
            return reply.err(
                ErrorCode::InvalidParams,
                "invalid params: prompt or attachment is required",
            );
        }
        if let Err((c, m)) = engine::check_attachments(&input.images, &input.files) {
            return reply.err(c, m);
        }
        input.content_parts = engine::accept_content_parts(p.content_parts, &input.prompt);
        let doc = row.body["active_document"].clone();
        row.body = body_of(&input, Some(doc).filter(|d| !d.is_null()));
        if let Err((c, m)) = self.input_put(row.clone()) {
            return reply.err(c, m);
        }
        reply.ok(&TurnUpdateQueuedResult {
            ok: true,
            queued: Some(queued_of(&row)),
        });
        if row.state == input_state::HELD {
            self.notify_held(None);
        }
    }

    /// `turn/dequeue`.
    pub(crate) fn dequeue(&mut self, p: TurnDequeueParams, reply: Responder) {
        let id = p.queue_id.trim().to_owned();
        let now = now_ms();
        if self.input_get(&id).is_some_and(|r| frozen(&r)) {
            return reply.err(ErrorCode::Error, frozen_refusal(&id));
        }
        match self.input_get(&id) {
            Some(mut row)
                if row.mode == input_mode::QUEUE
                    && (row.state == input_state::PENDING || row.state == input_state::HELD) =>
            {
                let was_held = row.state == input_state::HELD;
                row.state = input_state::CANCELLED.into();
                if let Err((c, m)) = self.input_put(row) {
                    return reply.err(c, m);
                }
                reply.ok(&OkResult { ok: true });
                let _ = self.shared.outbox.notify(&TurnDequeued {
                    thread_id: self.id.clone(),
                    queue_id: id,
                });
                if was_held {
                    self.notify_held(None);
                }
            }
            Some(_) => reply.ok(&OkResult { ok: false }),
            None => {
                // Cancel before arrival: a tombstone refuses a later queue with this id.
                let row = InputRow {
                    thread_id: self.id.clone(),
                    id,
                    mode: input_mode::QUEUE.into(),
                    state: input_state::CANCELLED.into(),
                    body: json!({}),
                    created_at_ms: now,
                    updated_at_ms: now,
                };
                if let Err((c, m)) = self.input_put(row) {
                    return reply.err(c, m);
                }
                reply.ok(&OkResult { ok: false })
            }
        }
    }

    /// `turn/unsteer`.
    pub(crate) fn unsteer(&mut self, p: TurnUnsteerParams, reply: Responder) {
        let id = p.steer_id.trim().to_owned();
        let now = now_ms();
        if self.input_get(&id).is_some_and(|r| frozen(&r)) {
            return reply.err(ErrorCode::Error, frozen_refusal(&id));
        }
        match self.input_get(&id) {
            Some(mut row)
                if row.mode == input_mode::STEER
                    && (row.state == input_state::PENDING || row.state == input_state::HELD) =>
            {
                let was_held = row.state == input_state::HELD;
                row.state = input_state::CANCELLED.into();
                if let Err((c, m)) = self.input_put(row) {
                    return reply.err(c, m);
                }
                if was_held {
                    self.notify_held(None);
                }
                let _ = self.shared.outbox.notify(&TurnUnsteered {
                    thread_id: self.id.clone(),
                    steer_id: id,
                });
                reply.ok(&OkResult { ok: true })
            }
            Some(_) => reply.ok(&OkResult { ok: false }),
            None => {
                let row = InputRow {
                    thread_id: self.id.clone(),
                    id,
                    mode: input_mode::STEER.into(),
                    state: input_state::CANCELLED.into(),
                    body: json!({}),
                    created_at_ms: now,
                    updated_at_ms: now,
                };
                if let Err((c, m)) = self.input_put(row) {
                    return reply.err(c, m);
                }
                reply.ok(&OkResult { ok: false })
            }
        }
    }

    /// `turn/requeue`: a pending (or held) steer becomes a queued turn of the same
    /// content and id, run after the current turn (`turn/unsteered`, then `turn/queued`
    /// or `turn/held`, after the response). A steer the running turn already took
    /// answers `{ok: false, state: "consumed"}`.
    pub(crate) fn requeue(&mut self, p: TurnRequeueParams, reply: Responder) {
        let id = p.steer_id.trim().to_owned();
        match self.input_get(&id) {
            Some(mut row)
                if row.mode == input_mode::STEER
                    && (row.state == input_state::PENDING || row.state == input_state::HELD) =>
            {
                let held = row.state == input_state::HELD;
                row.mode = input_mode::QUEUE.into();
                if let Err((c, m)) = self.input_put(row.clone()) {
                    return reply.err(c, m);
                }
                reply.ok(&TurnRequeueResult {
                    ok: true,
                    state: "queued".into(),
                    queued: Some(queued_of(&row)),
                });
                let _ = self.shared.outbox.notify(&TurnUnsteered {
                    thread_id: self.id.clone(),
                    steer_id: id,
                });
                if held {
                    self.notify_held(None);
                } else {
                    let _ = self.shared.outbox.notify(&TurnQueued {
                        queued: queued_of(&row),
                        message: message_of(&row),
                    });
                    self.drain_queue();
                }
            }
            Some(row) if row.mode == input_mode::STEER && row.state == input_state::CONSUMED => {
                reply.ok(&TurnRequeueResult {
                    ok: false,
                    state: "consumed".into(),
                    queued: None,
                })
            }
            _ => reply.err(
                ErrorCode::Error,
                format!(
                    "no pending steer {:?} (it was removed or never arrived)",
                    crate::util::clip(&id, 60)
                ),
            ),
        }
    }

    /// `turn/steer`.
    pub(crate) fn steer(&mut self, p: TurnSteerParams, reply: Responder) {
        match self.steer_inner(p) {
            Err((c, m)) => reply.err(c, m),
            Ok(Steered::Active(turn_id)) => reply.ok(&TurnSteerResult {
                turn_id,
                delivery: Some("active_turn".into()),
            }),
            Ok(Steered::Queued(turn_id)) => reply.ok(&TurnSteerResult {
                turn_id,
                delivery: Some("queued".into()),
            }),
            Ok(Steered::NewTurn(input)) => {
                // Sending a held message while idle starts a new turn from it.
                self.run_input_turn(*input, reply, None);
            }
        }
    }

    fn steer_inner(&mut self, p: TurnSteerParams) -> Result<Steered, Refusal> {
        let id = p
            .client_id
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let existing = id.as_deref().and_then(|i| self.input_get(i));
        if let Some(ex) = existing.as_ref().filter(|r| frozen(r)) {
            return Err(refuse(frozen_refusal(&ex.id)));
        }
        let active = self.active_turn_id();
        let mut from_entry: Option<InputRow> = None;
        if let Some(ex) = &existing {
            match (ex.mode.as_str(), ex.state.as_str()) {
                (_, input_state::CONSUMED) => {
                    return Err(refuse(format!(
                        "client_id {:?} was already consumed",
                        ex.id
                    )))
                }
                (input_mode::STEER, input_state::PENDING) => {
                    // A retry of a pending steer: same answer, nothing new.
                    return Ok(Steered::Active(active.unwrap_or_default()));
                }
                (input_mode::STEER, input_state::CANCELLED) => {
                    return Err(refuse("steer submission was cancelled before arrival"))
                }
                (_, input_state::HELD) | (input_mode::QUEUE, input_state::PENDING) => {
                    from_entry = Some(ex.clone());
                }
                _ => {} // a queue cancel record is superseded by this explicit steer
            }
        }
        let has_own = p.prompt.as_deref().is_some_and(|s| !s.trim().is_empty())
            || p.images.as_ref().is_some_and(|v| !v.is_empty())
            || p.files.as_ref().is_some_and(|v| !v.is_empty());
        let input = match (&from_entry, has_own) {
            (Some(row), false) => input_of(row),
            _ => engine::input_from(
                self,
                p.prompt,
                p.images,
                p.files,
                p.content_parts,
                id.clone(),
                None,
            )?,
        };
        let Some(active) = active else {
            // Idle: only a held or queued entry can be sent (as a new turn).
            let Some(row) = from_entry else {
                return Err(refuse("no active turn to steer"));
            };
            let was_held = row.state == input_state::HELD;
            if was_held {
                // Announce before the answer (spec §6 rule 1): the entry leaves the held list.
            }
            let mut input = input;
            input.consume = Some(row.clone());
            input.origin = Some(row.mode.clone());
            input.client_id = Some(row.id.clone());
            if row.mode == input_mode::QUEUE && row.state == input_state::PENDING {
                let _ = self.shared.outbox.notify(&TurnDequeued {
                    thread_id: self.id.clone(),
                    queue_id: row.id.clone(),
                });
            }
            return Ok(Steered::NewTurn(Box::new(input)));
        };
        if let Some(expected) = p.expected_turn_id.as_deref().filter(|e| !e.is_empty()) {
            if expected != active {
                return Err(refuse(format!(
                    "expected active turn id `{expected}` but found `{active}`"
                )));
            }
        } else {
            return Err((
                ErrorCode::InvalidParams,
                "invalid params: expected_turn_id is required to steer a running turn".into(),
            ));
        }
        if self.turns.last().is_some_and(|t| t.row.kind == "compact") {
            return Err(refuse("cannot steer a compact turn"));
        }
        let id = id.unwrap_or_else(|| new_id("s"));
        let now = now_ms();
        if crate::session::engines::steering(&self.thread) == crate::engine::Steering::Queued {
            return self.steer_queued(id, input, p.active_document, from_entry, active);
        }
        let row = InputRow {
            thread_id: self.id.clone(),
            id: id.clone(),
            mode: input_mode::STEER.into(),
            state: input_state::PENDING.into(),
            body: body_of(&input, p.active_document),
            created_at_ms: from_entry.as_ref().map(|r| r.created_at_ms).unwrap_or(now),
            updated_at_ms: now,
        };
        self.input_put(row.clone())?;
        if let Some(entry) = &from_entry {
            if entry.state == input_state::HELD {
                self.notify_held(None);
            } else {
                let _ = self.shared.outbox.notify(&TurnDequeued {
                    thread_id: self.id.clone(),
                    queue_id: entry.id.clone(),
                });
            }
        }
        let _ = self.shared.outbox.notify(&TurnSteered {
            message: message_of(&row),
        });
        self.steer_signal = true;
        Ok(Steered::Active(active))
    }

    /// A steer for an engine that takes no input during its turn
    /// ([`crate::engine::Steering::Queued`]): it becomes a queued entry of the same id,
    /// run as the next turn (`turn/queued` after the answer, `delivery: "queued"`).
    fn steer_queued(
        &mut self,
        id: String,
        input: TurnInput,
        active_document: Option<Value>,
        from_entry: Option<InputRow>,
        active: String,
    ) -> Result<Steered, Refusal> {
        let now = now_ms();
        let row = InputRow {
            thread_id: self.id.clone(),
            id,
            mode: input_mode::QUEUE.into(),
            state: input_state::PENDING.into(),
            body: body_of(&input, active_document),
            created_at_ms: from_entry.as_ref().map(|r| r.created_at_ms).unwrap_or(now),
            updated_at_ms: now,
        };
        self.input_put(row.clone())?;
        if from_entry.is_some_and(|e| e.state == input_state::HELD) {
            self.notify_held(None);
        }
        let _ = self.shared.outbox.notify(&TurnQueued {
            queued: queued_of(&row),
            message: message_of(&row),
        });
        Ok(Steered::Queued(active))
    }

    /// Admits and runs a turn from an input (a queued entry or a held message sent
    /// while idle), answering `reply` (if any) with `{turn_id}`.
    fn run_input_turn(&mut self, input: TurnInput, reply: Responder, queue_id: Option<String>) {
        let consumed = input.consume.clone();
        match engine::admit(self, input, "user") {
            Err((c, m)) => reply.err(c, m),
            Ok(()) => {
                let turn = engine::current_turn(self);
                if consumed
                    .as_ref()
                    .is_some_and(|r| r.state == input_state::HELD)
                {
                    self.notify_held(None);
                }
                reply.ok(&TurnSteerResult {
                    turn_id: turn.id.clone(),
                    delivery: Some("active_turn".into()),
                });
                let _ = self.shared.outbox.notify(&TurnStarted {
                    thread_id: self.id.clone(),
                    turn,
                    queue_id,
                    run_id: None,
                });
                engine::run_admitted(self);
            }
        }
    }

    /// Runs pending queued inputs one after another while idle (queued input runs after
    /// the whole task, never after an intermediate step). A failed admission moves the
    /// entry to held and says why.
    pub fn drain_queue(&mut self) {
        while !self.running.load(Ordering::SeqCst) && !self.shared.is_closing() && !self.exit {
            let Some(row) = self
                .inputs_in(&[input_state::PENDING])
                .into_iter()
                .find(|r| {
                    r.mode == input_mode::QUEUE
                        // A process exit that came too late for the turn it steered.
                        || (r.mode == input_mode::STEER
                            && r.id.starts_with(super::background::INPUT_PREFIX))
                })
            else {
                return;
            };
            let queue_id = row.id.clone();
            let input = input_of(&row);
            match engine::admit(self, input, "user") {
                Err((code, m)) => {
                    // Another host that took this conversation over runs (or ran) it: the
                    // row is theirs, never overwritten here.
                    let still_pending = self
                        .input_get(&queue_id)
                        .is_some_and(|r| r.state == input_state::PENDING);
                    if code == ErrorCode::ThreadBusy || !still_pending {
                        log::info!("queued input {queue_id} not run here: {m}");
                        return;
                    }
                    let mut held = row;
                    held.state = input_state::HELD.into();
                    let _ = self.input_put(held);
                    self.notify_held(Some(m));
                    return;
                }
                Ok(()) => {
                    let turn = engine::current_turn(self);
                    let _ = self.shared.outbox.notify(&TurnStarted {
                        thread_id: self.id.clone(),
                        turn,
                        queue_id: Some(queue_id),
                        run_id: None,
                    });
                    engine::run_admitted(self);
                }
            }
        }
    }
}

enum Steered {
    Active(String),
    /// Queued for the next turn (the engine takes no input during its turn).
    Queued(String),
    NewTurn(Box<TurnInput>),
}
