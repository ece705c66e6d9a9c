//! The turn lifecycle on the session side: admission of turns (lease, one transaction
//! for the turn and its user item), explicit continue, and the handlers of `turn/start`
//! and `turn/interrupt`. The turn itself is run by [`super::driver`] over the engine
//! seam ([`crate::engine`]). Spec `app-server.md` §3.2–§3.3, §4.3–§4.9.

use super::convert::{turn_wire, TurnState};
use super::driver;
use super::{Session, SessionMsg};
use crate::outbound::Responder;
use crate::provider::Provider;
use crate::session::Host;
use crate::tools::PermissionMode;
use crate::util::{new_id, now_ms, preview};
use base64::Engine as _;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wuu_protocol::*;
use wuu_store::{ItemRow, LeaseOutcome, TurnRow};

/// The provider instance `id` (built once per process and cached).
pub fn provider_for(shared: &Host, id: &str) -> Result<Arc<dyn Provider>, String> {
    shared.providers.get(&shared.config(), id)
}

/// A user input that opens a turn.
#[derive(Debug, Clone, Default)]
pub struct TurnInput {
    /// Prompt text.
    pub prompt: String,
    /// Images.
    pub images: Vec<Attachment>,
    /// Files.
    pub files: Vec<Attachment>,
    /// Accepted content parts.
    pub content_parts: Option<Vec<Value>>,
    /// The client's id (→ `source_id`).
    pub client_id: Option<String>,
    /// `queue` | `steer` | `schema_correction` … for host-made inputs.
    pub origin: Option<String>,
    /// The stored pending/held input this turn consumes: marked consumed in the same
    /// transaction that puts the user message into history.
    pub consume: Option<wuu_store::InputRow>,
    /// Explicit continue of this source turn: the turn opens with a `meta/turn_continue`
    /// marker instead of a user message, and the source is claimed (once, forever) in
    /// the same transaction.
    pub continue_of: Option<String>,
}

type Refusal = (ErrorCode, String);

fn invalid(m: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", m.into()),
    )
}

/// Validates attachments (spec §5.6): images need `image/*` (default `image/png`), files
/// `application/pdf` or `video/*`; data must be base64 or a base64 `data:` URL.
pub fn check_attachments(images: &[Attachment], files: &[Attachment]) -> Result<(), Refusal> {
    let decodes = |d: &str| {
        let payload = match d.strip_prefix("data:") {
            Some(rest) => rest.split_once(";base64,").map(|(_, p)| p),
            None => Some(d),
        };
        payload.is_some_and(|p| {
            base64::engine::general_purpose::STANDARD
                .decode(p.trim())
                .is_ok()
        })
    };
    for (i, a) in images.iter().enumerate() {
        let mt = a.media_type.as_deref().unwrap_or("image/png");
        if !(mt.starts_with("image/") || mt.starts_with("video/")) {
            return Err(invalid(format!(
                "images[{i}].media_type: {mt:?} is not an image type"
            )));
        }
        if !decodes(&a.data) {
            return Err(invalid(format!("images[{i}].data: not valid base64")));
        }
    }
    for (i, a) in files.iter().enumerate() {
        let mt = a
            .media_type
            .as_deref()
            .unwrap_or("application/octet-stream");
        if mt != "application/pdf" && !mt.starts_with("video/") {
            return Err(invalid(format!(
                "files[{i}].media_type: {mt:?} is not accepted (application/pdf or video/*)"
            )));
        }
        if !decodes(&a.data) {
            return Err(invalid(format!("files[{i}].data: not valid base64")));
        }
    }
    Ok(())
}

/// Validates content parts against the prompt (seed: content parts; spec §6 rule 17).
/// See [`crate::engine::content_parts::normalize_content_parts`].
pub fn accept_content_parts(parts: Option<Vec<Value>>, prompt: &str) -> Option<Vec<Value>> {
    crate::engine::content_parts::normalize_content_parts(parts, prompt)
}

/// Admits a new turn: refuses when busy (here or under another process's lease),
/// persists the turn and its user item in one transaction (before any answer), and
/// makes it the active turn. The caller answers and announces it.
///
/// Not refused during shutdown: a request in a session's mailbox was read before the
/// shutdown began (the router refuses later ones), and the shutdown message queued
/// behind it interrupts the turn it starts, which settles as `interrupted` with its
/// input stored. Refusing it would make the answer to a script's last `turn/start`
/// before end of input depend on a race. Continuations the host starts by itself
/// (queued inputs, schema corrections) check [`crate::session::Host::is_closing`]
/// first.
pub fn admit(s: &mut Session, input: TurnInput, kind: &str) -> Result<(), Refusal> {
    if s.running.load(Ordering::SeqCst) {
        return Err((
            ErrorCode::ThreadBusy,
            format!("thread {:?} already has a running turn", s.id),
        ));
    }
    let owner = s.shared.owner.clone();
    let now = now_ms();
    let turn_id = new_id("turn");
    let mut row = TurnRow::new(&s.id, &turn_id, kind, now);
    row.provider = s.thread.provider.clone();
    row.model = s.thread.model.clone();
    let mut user = opening_item(&turn_id, &input);
    if s.thread.preview.is_empty() && !input.prompt.trim().is_empty() {
        s.thread.preview = preview(&input.prompt, 120);
    }
    let seen_at = s.thread.updated_at_ms;
    s.thread.updated_at_ms = now;
    let rows = AdmissionRows {
        turn: row.clone(),
        item: ItemRow {
            thread_id: s.id.clone(),
            turn_id: turn_id.clone(),
            id: user.id.clone(),
            item_type: user.item_type.clone(),
            status: user.status.clone(),
            seq: 0,
            body: serde_json::to_value(&user).unwrap_or_default(),
        },
        thread: s.thread.clone(),
        seen_at,
    };
    if s.store.is_none() {
        if let Some(c) = &input.consume {
            let mut done = c.clone();
            done.state = wuu_store::input_state::CONSUMED.into();
            s.input_put(done)?;
        }
    }
    let committed = match s.store.as_mut() {
        None => Ok(Admission::Admitted {
            seq: 0,
            reload: false,
        }),
        Some(st) => commit_admission(st, &owner, &input, &rows, now),
    };
    s.shared.threads_changed();
    let admitted = committed.map_err(|e| match e {
        wuu_store::StoreError::Invalid(m) => (ErrorCode::Error, m),
        e => crate::session::host::store_error(&s.shared, &e),
    });
    match admitted {
        Ok(Admission::Busy(o)) => {
            return Err((
                ErrorCode::ThreadBusy,
                format!(
                    "thread {:?} is executing in another wuu process (pid {} on {})",
                    s.id, o.pid, o.host
                ),
            ))
        }
        Ok(Admission::Admitted { seq, reload }) => {
            if s.store.is_some() {
                user.seq = Some(seq);
            }
            install_turn(s, row, user, reload);
        }
        // Rolled back: the lease is as it was before (a busy store is not waited for a
        // second time to give back a lease never taken).
        Err(e) => return Err(e),
    }
    s.shared.registry.set_running(&s.running, true);
    Ok(())
}

/// The item a turn opens with: the user message of `input`, or for an explicit
/// continue a `meta/turn_continue` display marker (never sent to the model).
fn opening_item(turn_id: &str, input: &TurnInput) -> ThreadItem {
    let mut user = ThreadItem::new(format!("{turn_id}-item-0001"), "user_message");
    user.status = Some("completed".into());
    user.role = Some("user".into());
    user.text = Some(input.prompt.clone());
    user.source_id = input.client_id.clone();
    user.origin = input.origin.clone();
    if !input.images.is_empty() {
        user.images = Some(
            input
                .images
                .iter()
                .filter_map(|a| serde_json::to_value(a).ok())
                .collect(),
        );
    }
    if !input.files.is_empty() {
        user.files = Some(
            input
                .files
                .iter()
                .filter_map(|a| serde_json::to_value(a).ok())
                .collect(),
        );
    }
    user.content_parts = input.content_parts.clone();
    if let Some(source) = &input.continue_of {
        // A display marker, never sent to the model.
        user.item_type = "meta".into();
        user.role = None;
        user.cause = Some("meta/turn_continue".into());
        user.text = Some(source.clone());
    }
    user
}

/// The rows an admission writes: the new turn, its opening item and the conversation.
struct AdmissionRows {
    turn: TurnRow,
    item: ItemRow,
    thread: wuu_store::ThreadRow,
    /// The conversation's `updated_at_ms` as this session last read it.
    seen_at: i64,
}

/// The admission transaction: takes the conversation's lease, claims the continued
/// turn and consumes the stored input the turn takes (refused when another request
/// got there first), and stores the turn with its opening item. One transaction,
/// because every write transaction queues at the process's write gate.
fn commit_admission(
    st: &mut wuu_store::Store,
    owner: &wuu_store::LeaseOwner,
    input: &TurnInput,
    rows: &AdmissionRows,
    now: i64,
) -> Result<Admission, wuu_store::StoreError> {
    let thread_id = rows.turn.thread_id.as_str();
    st.transaction(|tx| {
        let reload = match tx.acquire_lease(thread_id, owner)? {
            LeaseOutcome::Busy(o) => return Ok(Admission::Busy(o)),
            // History is reloaded when a dead owner's turn was settled as interrupted,
            // or when another host or process changed the conversation since this
            // session last read it (its commit may land after the check before this
            // request), so the model gets the whole history.
            LeaseOutcome::Acquired { settled, .. } => {
                !settled.interrupted_turns.is_empty()
                    || tx
                        .get_thread(thread_id)?
                        .is_some_and(|t| t.updated_at_ms != rows.seen_at)
            }
            LeaseOutcome::AlreadyHeld => false,
        };
        if let Some(source) = &input.continue_of {
            if !tx.claim_continue_source(thread_id, source)? {
                return Err(wuu_store::StoreError::Invalid(format!(
                    "turn {source:?} was already continued"
                )));
            }
        }
        if let Some(c) = &input.consume {
            // A concurrent edit or cancel keeps a stale input out of history.
            let live = tx.get_input(&c.thread_id, &c.id)?.filter(|f| {
                f.state == wuu_store::input_state::PENDING
                    || f.state == wuu_store::input_state::HELD
            });
            let Some(mut done) = live else {
                return Err(wuu_store::StoreError::Invalid(format!(
                    "input {:?} was cancelled or already consumed",
                    c.id
                )));
            };
            done.state = wuu_store::input_state::CONSUMED.into();
            done.updated_at_ms = now;
            tx.upsert_input(&done)?;
        }
        tx.insert_turn(&rows.turn)?;
        let seq = tx.upsert_item(&rows.item)?;
        tx.update_thread(&rows.thread)?;
        Ok(Admission::Admitted { seq, reload })
    })
}

/// Makes the admitted turn the active one: after a dead owner's turns were settled or
/// another host changed the conversation (`reload`) the stored conversation and history
/// are read again (they hold the other turns and the new one), else the turn is appended.
fn install_turn(s: &mut Session, row: TurnRow, user: ThreadItem, reload: bool) {
    let reloaded = if reload {
        match crate::session::lifecycle::load(&s.shared, &s.id) {
            Ok(Some((_, thread, turns))) => Some((thread, turns)),
            _ => None,
        }
    } else {
        None
    };
    match reloaded {
        Some((thread, turns)) if turns.last().is_some_and(|t| t.row.id == row.id) => {
            s.thread = thread;
            s.turns = turns;
        }
        _ => s.turns.push(TurnState {
            row,
            items: vec![user],
        }),
    }
}

/// What the admission transaction found.
enum Admission {
    /// Another live process holds the conversation's lease (the turn was not stored).
    Busy(wuu_store::LeaseOwner),
    /// The turn and its user item are stored (`seq`: the item's); `reload`: a dead
    /// owner's turns were settled by taking the lease, or another host changed the
    /// conversation, so history must be read again.
    Admitted { seq: u64, reload: bool },
}

/// Ends the active execution: clears `running` and releases the lease.
pub fn release(s: &mut Session) {
    s.shared.registry.set_running(&s.running, false);
    let owner = s.shared.owner.clone();
    let id = s.id.clone();
    if let Some(store) = s.store.as_mut() {
        if let Err(e) = store.release_lease(&id, &owner) {
            log::warn!("releasing the lease of {id}: {e}");
        }
    }
}

/// The current turn as a wire turn.
pub fn current_turn(s: &Session) -> Turn {
    turn_wire(s.turns.last().expect("a turn"))
}

/// Validates a `turn/start` / `run/start` input against the conversation.
pub fn input_from(
    s: &Session,
    prompt: Option<String>,
    images: Option<Vec<Attachment>>,
    files: Option<Vec<Attachment>>,
    content_parts: Option<Vec<Value>>,
    client_id: Option<String>,
    permission_mode: Option<String>,
) -> Result<TurnInput, Refusal> {
    let prompt = prompt.unwrap_or_default();
    let images = images.unwrap_or_default();
    let files = files.unwrap_or_default();
    if prompt.trim().is_empty() && images.is_empty() && files.is_empty() {
        return Err(invalid("prompt or attachment is required"));
    }
    if let Some(m) = permission_mode.as_deref().filter(|m| !m.is_empty()) {
        if PermissionMode::parse(m).is_none() {
            return Err(invalid(format!("permission_mode: unknown mode {m:?}")));
        }
        if m != s.thread.permission_mode {
            return Err(invalid(format!(
                "permission_mode: {m:?} differs from the conversation's mode {:?}; change it with config/model/update",
                s.thread.permission_mode
            )));
        }
    }
    check_attachments(&images, &files)?;
    let content_parts = accept_content_parts(content_parts, &prompt);
    Ok(TurnInput {
        prompt,
        images,
        files,
        content_parts,
        client_id: client_id.filter(|c| !c.trim().is_empty()),
        origin: None,
        consume: None,
        continue_of: None,
    })
}

/// `turn/start`: admit, answer `{turn}`, announce `turn/started`, run the turn.
pub fn turn_start(s: &mut Session, p: TurnStartParams, reply: Responder) {
    if let Some(source) = p
        .resume_after_turn_id
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let has_input = p
            .input
            .prompt
            .as_deref()
            .is_some_and(|t| !t.trim().is_empty())
            || p.input.images.as_ref().is_some_and(|v| !v.is_empty())
            || p.input.files.as_ref().is_some_and(|v| !v.is_empty())
            || p.input
                .content_parts
                .as_ref()
                .is_some_and(|v| !v.is_empty());
        if has_input {
            return reply.err(
                ErrorCode::InvalidParams,
                "invalid params: resume_after_turn_id takes no prompt or attachments",
            );
        }
        return match continue_turn(s, source) {
            Err((c, m)) => reply.err(c, m),
            Ok(()) => {
                let turn = current_turn(s);
                reply.ok(&TurnResult { turn: turn.clone() });
                let _ = s.shared.outbox.notify(&TurnStarted {
                    thread_id: s.id.clone(),
                    turn,
                    queue_id: None,
                    run_id: None,
                });
                run_admitted(s);
            }
        };
    }
    let input = match input_from(
        s,
        p.input.prompt,
        p.input.images,
        p.input.files,
        p.input.content_parts,
        p.input.client_id,
        p.input.permission_mode,
    ) {
        Ok(i) => i,
        Err((c, m)) => return reply.err(c, m),
    };
    let kind = if is_compact_command(&input.prompt) {
        if let Err((c, m)) = compaction_supported(s) {
            return reply.err(c, m);
        }
        "compact"
    } else {
        "user"
    };
    if let Err((c, m)) = admit(s, input, kind) {
        return reply.err(c, m);
    }
    if kind == "user" {
        // A frozen worker tree is folded into this user turn (its held results arrive
        // as steers before the first model request); a compact turn takes no steers, so
        // they wait for the next user turn.
        super::agents::unfreeze(s);
    }
    let turn = current_turn(s);
    reply.ok(&TurnResult { turn: turn.clone() });
    let _ = s.shared.outbox.notify(&TurnStarted {
        thread_id: s.id.clone(),
        turn,
        queue_id: None,
        run_id: None,
    });
    run_admitted(s);
}

/// Whether a prompt is the manual compaction command (`/compact`, optionally followed
/// by text).
pub fn is_compact_command(prompt: &str) -> bool {
    let p = prompt.trim();
    p == "/compact"
        || p.strip_prefix("/compact")
            .is_some_and(|r| r.starts_with(char::is_whitespace))
}

/// Whether the conversation's engine can compact: the built-in engine compacts
/// itself, Codex natively (`thread/compact/start`); others answer `unsupported`.
pub fn compaction_supported(s: &Session) -> Result<(), Refusal> {
    match s.thread.engine_id.as_str() {
        "" | crate::engine::BUILTIN | crate::engine::codex::ID => Ok(()),
        other => Err((
            ErrorCode::Error,
            format!("unsupported: engine {other:?} has no context compaction"),
        )),
    }
}

/// `thread/compact/start`: on an idle conversation, admits a compact-only turn (its
/// opening item is the `/compact` command), answers `{turn}`, announces
/// `turn/started` and runs it; the turn holds one `context_compaction` item. A busy
/// conversation is refused (`thread_busy`), as is an engine that cannot compact.
pub fn compact_start(s: &mut Session, reply: Responder) {
    if let Err((c, m)) = compaction_supported(s) {
        return reply.err(c, m);
    }
    let input = TurnInput {
        prompt: "/compact".into(),
        origin: Some("compact".into()),
        ..Default::default()
    };
    if let Err((c, m)) = admit(s, input, "compact") {
        return reply.err(c, m);
    }
    let turn = current_turn(s);
    reply.ok(&TurnResult { turn: turn.clone() });
    let _ = s.shared.outbox.notify(&TurnStarted {
        thread_id: s.id.clone(),
        turn,
        queue_id: None,
        run_id: None,
    });
    run_admitted(s);
}

/// Runs the admitted (current) turn, then the messages that waited for it, then any
/// queued input.
pub fn run_admitted(s: &mut Session) {
    super::agents::before_turn(s);
    let (end, deferred) = driver::Driver::new(s, Default::default()).run();
    super::agents::after_turn(s, &end);
    process_deferred(s, deferred);
    s.drain_queue();
    s.release_turn_memory();
}

/// Explicit continue without a user message (seed: 不增加用户消息的显式继续): on an
/// idle built-in-engine conversation, take the lease, reload history from the store and
/// compare the source turn. Refused when the id is not the latest turn, the conversation
/// is running, read-only, empty, bound to another engine, or an at-most-once tool of the
/// source turn has an unknown outcome; a source id is accepted once, forever (restarts
/// included). Success is a new turn whose only item is a `meta/turn_continue` marker
/// (never sent to the model).
pub fn continue_turn(s: &mut Session, source: &str) -> Result<(), Refusal> {
    if s.running.load(Ordering::SeqCst) {
        return Err((
            ErrorCode::ThreadBusy,
            format!("thread {:?} already has a running turn", s.id),
        ));
    }
    if s.thread.engine_id != "wuu" {
        return Err((
            ErrorCode::Error,
            format!(
                "explicit continue needs the built-in engine (thread uses {:?})",
                s.thread.engine_id
            ),
        ));
    }
    if super::convert::stored_permission_mode(&s.thread) == PermissionMode::ReadOnly {
        return Err((
            ErrorCode::Error,
            "cannot continue a read-only conversation".into(),
        ));
    }
    // Reload persisted history (another process may have moved on).
    if s.store.is_some() {
        if let Ok(Some((_, thread, turns))) = crate::session::lifecycle::load(&s.shared, &s.id) {
            s.thread = thread;
            s.turns = turns;
        }
    }
    let Some(latest) = s.turns.last() else {
        return Err((
            ErrorCode::Error,
            "the conversation has no history to continue".into(),
        ));
    };
    if latest.row.id != source {
        return Err((
            ErrorCode::Error,
            format!(
                "turn {source:?} is not the latest turn (latest is {:?}); reread the conversation",
                latest.row.id
            ),
        ));
    }
    if latest.row.status == "in_progress" {
        return Err((
            ErrorCode::ThreadBusy,
            format!("turn {source:?} is still running"),
        ));
    }
    let unknown = latest.items.iter().any(|i| {
        i.item_type == "tool_call"
            && crate::tools::is_at_most_once(i.name.as_deref().unwrap_or(""))
            && i.result.is_none()
    });
    if unknown {
        return Err((
            ErrorCode::Error,
            "an at-most-once tool call of that turn has an unknown outcome; check the workspace and send a new message instead".into(),
        ));
    }
    if s.store.is_none() {
        // Ephemeral: the claim lives with the conversation in memory.
        let key = format!("continued:{source}");
        if s.thread.extra.get(&key).is_some() {
            return Err((
                ErrorCode::Error,
                format!("turn {source:?} was already continued"),
            ));
        }
        s.thread.extra[&key] = serde_json::json!(true);
    }
    admit(
        s,
        TurnInput {
            origin: Some("continue".into()),
            continue_of: Some(source.to_owned()),
            ..Default::default()
        },
        "continue",
    )
}

/// Handles messages that waited for the turn to settle, in order. A shutdown that
/// arrived before a forced archive was committed cancels that archive (`server_closed`);
/// committed changes are never rolled back.
pub fn process_deferred(s: &mut Session, deferred: Vec<SessionMsg>) {
    let shutting_down = deferred
        .iter()
        .any(|m| matches!(m, SessionMsg::Shutdown { .. }));
    for msg in deferred {
        match msg {
            SessionMsg::Request {
                req: ClientRequest::ThreadArchive(_),
                reply,
            } if shutting_down => reply.err(
                ErrorCode::ServerClosed,
                "the server shut down before the archive was committed; nothing was archived",
            ),
            other => s.handle(other),
        }
    }
}

/// `turn/interrupt` when no turn runs (during a turn the driver answers it).
pub fn turn_interrupt(s: &mut Session, _p: TurnInterruptParams, reply: Responder) {
    // No turn runs but workers do: only the tree freezes (spec `subagents.md` §1.8).
    if super::agents::freeze(&s.shared, &s.id) {
        s.hold_all_pending();
        return reply.ok(&OkResult { ok: true });
    }
    reply.err(
        ErrorCode::NoActiveTurn,
        format!("thread {:?} has no active turn", s.id),
    );
}
