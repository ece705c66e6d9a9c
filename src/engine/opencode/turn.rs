//! One OpenCode turn (spec `engines.md` §1.7): the native session opened or resumed
//! with the `ask` rule, its events listened for, the prompt posted on a helper thread
//! (its answer is the native turn's end), and the turn loop, one `select!` over the
//! session's events, the prompt's answer and the host's controls. After the answer
//! the session's messages are read once more so nothing still in transit is lost. A
//! failure or an interrupt aborts the native turn (`POST /session/<id>/abort`); a
//! server that does not end its turn within [`INTERRUPT_GRACE`] of the abort is killed.
//! A server that dies fails the turn with its last stderr line.

use super::projection::{error_text, TurnMap};
use super::server::{segment, Server};
use super::{failure, INTERRUPT_GRACE};
use crate::engine::{Control, EngineEvent, EventSink, Outcome, TurnRequest, UserInput};
use crate::tools::PermissionMode;
use crossbeam_channel::{bounded, never, select, Receiver};
use serde_json::{json, Value};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The native message id of our prompt: `msg_` + 12 hex digits of
/// `(unix ms << 12 | 1)` (48 bits) + 14 random hex digits, so it sorts with the native
/// transcript's chronological ids.
pub fn message_id() -> String {
    let ms = u64::try_from(crate::util::now_ms()).unwrap_or(0);
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!(
        "msg_{:012x}{}",
        ((ms << 12) | 1) & 0xffff_ffff_ffff,
        &random[..14]
    )
}

/// The `parts` of a prompt: the text, then one `file` part (data URL) per image or file.
pub fn prompt_parts(input: &UserInput) -> Vec<Value> {
    let mut parts = vec![];
    if !input.prompt.is_empty() {
        parts.push(json!({"type": "text", "text": input.prompt}));
    }
    for a in input.images.iter().chain(&input.files) {
        let url = if a.data.starts_with("data:") {
            a.data.clone()
        } else {
            let mime = a
                .media_type
                .clone()
                .unwrap_or_else(|| "application/octet-stream".into());
            format!("data:{mime};base64,{}", a.data)
        };
        let mime = url
            .strip_prefix("data:")
            .and_then(|r| r.split(';').next())
            .unwrap_or("application/octet-stream")
            .to_owned();
        parts.push(json!({"type": "file", "mime": mime, "url": url}));
    }
    parts
}

/// Opens the native session of `req`: resumes the persisted one (`PATCH`, re-applying
/// the `ask` rule) or creates one (and persists its id before the turn proceeds). A
/// session the server no longer has is replaced, with a notice. Returns the session id.
fn open_session(server: &Server, req: &TurnRequest, sink: &EventSink) -> Result<String, Outcome> {
    let root = &req.workspace_root;
    let rule = json!({"permission": [{"permission": "*", "pattern": "*", "action": "ask"}]});
    let create = || -> Result<String, String> {
        let s = server.call("POST", "/session", Some(&rule), root)?;
        s.get("id")
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty() && id.len() <= 200)
            .map(str::to_owned)
            .ok_or_else(|| "OpenCode POST /session answered without a session id".to_owned())
    };
    let (session, notice) = match req.engine_ref.as_deref() {
        None => (create().map_err(request_failed)?, None),
        Some(r) => {
            match server.call(
                "PATCH",
                &format!("/session/{}", segment(r)),
                Some(&rule),
                root,
            ) {
                Ok(s) if s.get("id").and_then(Value::as_str) == Some(r) => (r.to_owned(), None),
                Ok(_) => {
                    return Err(failure(
                        "OpenCode resumed a different session",
                        "engine_protocol",
                    ))
                }
                Err(e) => {
                    log::warn!("opencode: resuming session {r} failed ({e}); new session");
                    let id = create().map_err(request_failed)?;
                    let notice = format!(
                        "OpenCode could not resume its earlier session ({}); this conversation continues in a new OpenCode session without the earlier context.",
                        crate::util::clip(&e, 200)
                    );
                    (id, Some(notice))
                }
            }
        }
    };
    if req.engine_ref.as_deref() != Some(session.as_str()) {
        match sink.call(|reply| EngineEvent::PersistRef {
            engine_ref: session.clone(),
            reply,
        }) {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(failure(e, "engine_ref_not_stored")),
            None => return Err(Outcome::Interrupted),
        }
    }
    if let Some(n) = notice {
        sink.emit(EngineEvent::ContentDelta(n));
        sink.emit(EngineEvent::MessageDone {
            final_answer: false,
        });
    }
    Ok(session)
}

fn request_failed(e: String) -> Outcome {
    failure(e, "engine_request_failed")
}

/// Runs one turn of `req` on `server`.
pub(super) fn run(
    server: &Arc<Server>,
    req: TurnRequest,
    sink: &EventSink,
    controls: &Receiver<Control>,
) -> Outcome {
    let session = match open_session(server, &req, sink) {
        Ok(s) => s,
        Err(end) => return end,
    };
    let root = req.workspace_root.clone();
    let events = server.listen(&session, &root);
    let user_id = message_id();
    let mut prompt = json!({"messageID": user_id, "parts": prompt_parts(&req.input)});
    if let Some(i) = req.instructions.as_deref().filter(|i| !i.trim().is_empty()) {
        prompt["system"] = json!(i);
    }
    let model = req.model.trim();
    if !model.is_empty() {
        match model.split_once('/') {
            Some((p, m)) if !p.is_empty() && !m.is_empty() => {
                prompt["model"] = json!({"providerID": p, "modelID": m});
            }
            _ => {
                server.unlisten(&session);
                return failure(
                    format!("OpenCode model {model:?} must use the provider/model form"),
                    "engine_model_invalid",
                );
            }
        }
    }
    let path = format!("/session/{}", segment(&session));
    let (done_tx, done) = bounded(1);
    let (srv, p, r) = (server.clone(), format!("{path}/message"), root.clone());
    let spawned = crate::util::spawn("opencode-prompt".into(), move || {
        let _ = done_tx.send(srv.call_long("POST", &p, Some(&prompt), &r));
    });
    if let Err(e) = spawned {
        server.unlisten(&session);
        return failure(
            format!("cannot start the opencode prompt: {e}"),
            "engine_unavailable",
        );
    }
    let unconfined = req.permission_mode == PermissionMode::Unconfined;
    let mut map = TurnMap::new(sink, server, &session, &user_id, &root, unconfined);
    let outcome = drive(server, &mut map, &path, &root, &events, &done, controls);
    match &outcome {
        Outcome::Completed => map.complete(),
        _ => map.stop(),
    }
    server.unlisten(&session);
    outcome
}

/// Aborts the native turn, on a helper thread (a wedged server does not hold us); the
/// receiver disconnects once the abort was answered (or could not be sent).
fn abort(server: &Arc<Server>, path: &str, root: &Path) -> Receiver<()> {
    let (srv, p, r) = (server.clone(), format!("{path}/abort"), root.to_path_buf());
    let (answered, rx) = crossbeam_channel::bounded::<()>(0);
    let _ = crate::util::spawn("opencode-abort".into(), move || {
        let _answered = answered;
        if let Err(e) = srv.call("POST", &p, None, &r) {
            log::info!("{e}");
        }
    });
    rx
}

/// An interrupted turn ends once its abort was answered (at most until `deadline`): an
/// abort still in flight would otherwise reach the conversation's next prompt.
fn interrupted(abort: Option<&Receiver<()>>, deadline: Instant) -> Outcome {
    if let Some(rx) = abort {
        let _ = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
    Outcome::Interrupted
}

fn drive(
    server: &Arc<Server>,
    map: &mut TurnMap,
    path: &str,
    root: &Path,
    events: &Receiver<Value>,
    done: &Receiver<Result<Value, String>>,
    controls: &Receiver<Control>,
) -> Outcome {
    let mut interrupted_at: Option<Instant> = None;
    let mut aborting: Option<Receiver<()>> = None;
    let mut controls_gone = false;
    loop {
        let ctl = if controls_gone {
            never()
        } else {
            controls.clone()
        };
        let wait = match interrupted_at {
            Some(t) => INTERRUPT_GRACE.saturating_sub(t.elapsed()),
            None => Duration::from_secs(3600),
        };
        select! {
            recv(events) -> ev => match ev {
                Ok(ev) => {
                    if let Err(e) = map.event(&ev) {
                        if interrupted_at.is_some() {
                            continue;
                        }
                        abort(server, path, root);
                        return failure(e, "engine_turn_failed");
                    }
                }
                Err(_) => {
                    if let Some(t) = interrupted_at {
                        return interrupted(aborting.as_ref(), t + INTERRUPT_GRACE);
                    }
                    return failure(
                        server.explain("OpenCode exited before completing the turn"),
                        "engine_exited",
                    );
                }
            },
            recv(done) -> r => {
                if let Some(t) = interrupted_at {
                    return interrupted(aborting.as_ref(), t + INTERRUPT_GRACE);
                }
                return match r {
                    Ok(Ok(last)) => finish(server, map, path, root, &last),
                    _ if dies(server) => failure(
                        server.explain("OpenCode exited before completing the turn"),
                        "engine_exited",
                    ),
                    Ok(Err(e)) => {
                        abort(server, path, root);
                        failure(e, "engine_request_failed")
                    }
                    Err(_) => failure(
                        "the OpenCode prompt ended without an answer",
                        "engine_request_failed",
                    ),
                };
            },
            recv(ctl) -> c => match c {
                Ok(Control::Interrupt) | Err(_) => {
                    if c.is_err() {
                        controls_gone = true;
                    }
                    if interrupted_at.is_none() {
                        interrupted_at = Some(Instant::now());
                        aborting = Some(abort(server, path, root));
                        map.revoke_all();
                    }
                }
                Ok(Control::Steer(_)) => {}
                Ok(Control::Answer { request_id, answer }) => map.answer(&request_id, answer),
            },
            default(wait) => {
                if interrupted_at.is_some() {
                    log::info!(
                        "opencode did not end its turn within {} s of the abort; ending the server",
                        INTERRUPT_GRACE.as_secs()
                    );
                    server.kill();
                    return Outcome::Interrupted;
                }
            }
        }
    }
}

/// Whether the server is dead or dies within a moment (a failed request of a dying
/// server comes before its output ends).
fn dies(server: &Server) -> bool {
    let until = Instant::now() + Duration::from_millis(1500);
    while Instant::now() < until {
        if server.is_dead() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    server.is_dead()
}

/// The prompt answered with the last assistant message: the session's messages are
/// read once more (what was still in transit is projected), then the answer is checked.
fn finish(
    server: &Arc<Server>,
    map: &mut TurnMap,
    path: &str,
    root: &Path,
    last: &Value,
) -> Outcome {
    let info = last.get("info").unwrap_or(&Value::Null);
    match server.call("GET", &format!("{path}/message"), None, root) {
        Ok(Value::Array(messages)) => {
            for m in &messages {
                let parts = m
                    .get("parts")
                    .and_then(Value::as_array)
                    .map(Vec::as_slice)
                    .unwrap_or(&[]);
                if let Err(e) = map.message(m.get("info").unwrap_or(&Value::Null), parts) {
                    return failure(e, "engine_turn_failed");
                }
            }
        }
        Ok(_) => log::warn!("opencode: the message list is not an array"),
        Err(e) => return failure(e, "engine_request_failed"),
    }
    let parts = last
        .get("parts")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if let Err(e) = map.message(info, parts) {
        return failure(e, "engine_turn_failed");
    }
    if let Some(e) = info.get("error").filter(|e| !e.is_null()) {
        return failure(error_text(e), "engine_turn_failed");
    }
    let finish = info.get("finish").and_then(Value::as_str).unwrap_or("");
    let completed = info
        .pointer("/time/completed")
        .is_some_and(|t| !t.is_null());
    // A refused permission ends OpenCode's loop after that step: the turn is done.
    let refused = finish == "tool-calls" && map.refused();
    if !completed || finish.is_empty() || (finish == "tool-calls" && !refused) {
        return failure(
            format!("OpenCode's turn did not complete normally (finish {finish:?})"),
            "engine_turn_failed",
        );
    }
    Outcome::Completed
}
