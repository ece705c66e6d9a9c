//! The turn loop of the ACP client (spec `engines.md` §1.6): `session/prompt` with the
//! newest user input, then one `select!` over the session's updates and agent requests
//! and the host's controls until the prompt answers with its `stopReason` (or the child
//! dies, or an interrupt's grace runs out).

use super::terminal::{self, TurnTerminals};
use super::{failure, AcpEngine, INTERRUPT_GRACE};
use crate::engine::codex::rpc::{Inbound, Peer};
use crate::engine::{
    Answer, ApprovalDecision, Control, EngineEvent, EventSink, Outcome, Question, TurnRequest,
};
use crate::provider::chat::Usage;
use crate::tools::terminal::Terminal;
use crate::tools::PermissionMode;
use crossbeam_channel::{never, select, Receiver, Sender};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often the output of terminals shown in running tool calls is streamed.
const TERMINAL_TICK: Duration = Duration::from_millis(100);

/// The state of one turn's projection.
struct Map<'a> {
    id: String,
    sink: &'a EventSink<'a>,
    peer: Arc<Peer>,
    mode: PermissionMode,
    root: std::path::PathBuf,
    message: bool,
    reasoning: bool,
    /// Started tool calls (native id → name).
    tools: HashMap<String, String>,
    /// Open permission requests: host request id → (native id, options).
    open: HashMap<String, (Value, Vec<Value>)>,
    /// The turn's terminals.
    terms: TurnTerminals,
    /// Tool calls that show a terminal (native id → the terminal and the output offset
    /// streamed so far).
    term_calls: HashMap<String, (Arc<Terminal>, u64)>,
}

impl Map<'_> {
    fn close_reasoning(&mut self) {
        if std::mem::take(&mut self.reasoning) {
            self.sink.emit(EngineEvent::ThinkingDone {
                text: None,
                detail: None,
            });
        }
    }

    fn close_message(&mut self, final_answer: bool) {
        if std::mem::take(&mut self.message) {
            self.sink.emit(EngineEvent::MessageDone { final_answer });
        }
    }

    /// Maps one `session/update`.
    fn update(&mut self, u: &Value) {
        let kind = u.get("sessionUpdate").and_then(Value::as_str).unwrap_or("");
        let text = || {
            u.pointer("/content/text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match kind {
            "agent_message_chunk" => {
                let t = text();
                if t.is_empty() {
                    return;
                }
                self.close_reasoning();
                self.message = true;
                self.sink.emit(EngineEvent::ContentDelta(t));
            }
            "agent_thought_chunk" => {
                let t = text();
                if t.is_empty() {
                    return;
                }
                self.close_message(false);
                self.reasoning = true;
                self.sink.emit(EngineEvent::ThinkingDelta(t));
            }
            "tool_call" | "tool_call_update" => self.tool(u),
            "plan" => {
                let todos: Vec<Value> = u
                    .get("entries")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|e| {
                        json!({
                            "content": e.get("content").and_then(Value::as_str).unwrap_or(""),
                            "status": e.get("status").and_then(Value::as_str).unwrap_or("pending"),
                            "priority": e.get("priority"),
                        })
                    })
                    .collect();
                self.sink.emit(EngineEvent::Todo(json!({"todos": todos})));
            }
            _ => {}
        }
    }

    fn tool(&mut self, u: &Value) {
        let Some(call_id) = u.get("toolCallId").and_then(Value::as_str) else {
            return;
        };
        let call_id = call_id.to_owned();
        let status = u.get("status").and_then(Value::as_str).unwrap_or("");
        let title = u.get("title").and_then(Value::as_str);
        let shown = terminal::embedded(u)
            .find_map(|t| self.terms.created.get(t).cloned())
            .filter(|t| {
                self.term_calls
                    .get(&call_id)
                    .is_none_or(|(old, _)| old.id() != t.id())
            });
        if let Some(t) = &shown {
            self.term_calls.insert(call_id.clone(), (t.clone(), 0));
        }
        if !self.tools.contains_key(&call_id) {
            self.close_reasoning();
            self.close_message(false);
            let (name, args) = match &shown {
                Some(t) => ("exec".to_owned(), terminal::exec_args(t, title)),
                None => tool_of(u),
            };
            self.tools.insert(call_id.clone(), name.clone());
            self.sink.emit(EngineEvent::ToolStart {
                call_id: call_id.clone(),
                name,
                arguments: Some(args),
            });
            let _ = self.sink.call(|reply| EngineEvent::ToolReady {
                call_id: call_id.clone(),
                at_most_once: false,
                reply,
            });
        } else if let Some(t) = &shown {
            // The agent embedded a terminal in a call it had already started.
            self.sink.emit(EngineEvent::ToolArgs {
                call_id: call_id.clone(),
                name: "exec".to_owned(),
                arguments: terminal::exec_args(t, title),
            });
        }
        if matches!(status, "completed" | "failed") {
            let failed = status == "failed";
            let mut detail = u.clone();
            self.stream_terminals();
            let term = self.term_calls.remove(&call_id).map(|(t, _)| t.snapshot());
            let output = match (output_of(u), &term) {
                (Some(o), _) => o,
                (None, Some(s)) => s.output.clone(),
                (None, None) => status.to_owned(),
            };
            if let Some(s) = term {
                detail["terminal"] = json!({
                    "truncated": s.truncated,
                    "exitStatus": s.exit.as_ref().map(terminal::exit_json),
                });
            }
            self.tools.remove(&call_id);
            self.sink.emit(EngineEvent::ToolEnd {
                call_id,
                error: failed.then(|| output.clone()),
                output: Some(output),
                detail: Some(detail),
                is_error: failed,
                permission_denied: false,
            });
        }
    }

    /// Streams the new output of every terminal a running tool call shows
    /// (`ToolOutput` on its call).
    fn stream_terminals(&mut self) {
        for (call_id, (t, offset)) in &mut self.term_calls {
            let (text, next) = t.since(*offset);
            *offset = next;
            if !text.is_empty() {
                self.sink.emit(EngineEvent::ToolOutput {
                    call_id: call_id.clone(),
                    stream: Some("stdout".into()),
                    text,
                });
            }
        }
    }

    /// Answers or relays one agent request.
    fn request(&mut self, id: Value, method: &str, p: &Value) {
        match method {
            "session/request_permission" => self.permission(id, p),
            "fs/read_text_file" | "fs/write_text_file" => {
                match super::fs::serve(method, p, &self.root, self.mode) {
                    Ok(v) => self.peer.respond(&id, v),
                    Err((code, m)) => self.peer.respond_error(&id, code, &m),
                }
            }
            m if m.starts_with("terminal/") => self.terms.serve(&self.peer, id, m, p),
            other => self.peer.respond_error(
                &id,
                -32601,
                &format!("unsupported engine request: {other}"),
            ),
        }
    }

    fn permission(&mut self, id: Value, p: &Value) {
        let options: Vec<Value> = p
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if self.mode == PermissionMode::Unconfined {
            return self
                .peer
                .respond(&id, select(&options, ApprovalDecision::Accept));
        }
        let tc = p.get("toolCall").cloned().unwrap_or(Value::Null);
        let s = |k: &str| tc.get(k).and_then(Value::as_str).map(str::to_owned);
        let raw = tc.get("rawInput").cloned().unwrap_or(Value::Null);
        let command = match raw.get("command") {
            Some(Value::String(c)) => Some(c.clone()),
            Some(Value::Array(a)) => Some(
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(" "),
            ),
            _ => None,
        };
        let title = s("title").unwrap_or_else(|| "a tool call".into());
        let question = match &command {
            Some(c) => format!("{} wants to run: {c}", self.id),
            None => format!("{} asks for permission: {title}", self.id),
        };
        // Approvals never become persistent rules: `allow_always` is not offered.
        let choices: Vec<(String, String)> = options
            .iter()
            .filter(|o| o.get("kind").and_then(Value::as_str) != Some("allow_always"))
            .filter_map(|o| {
                let name = o.get("name").and_then(Value::as_str)?;
                Some((
                    name.to_owned(),
                    o.get("kind")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                ))
            })
            .collect();
        let request_id = format!("{}-{}", self.id, uuid::Uuid::new_v4().simple());
        self.open.insert(request_id.clone(), (id, options));
        self.sink.emit(EngineEvent::Question {
            request_id,
            call_id: s("toolCallId").unwrap_or_default(),
            questions: vec![Question {
                id: "permission".into(),
                header: "Permission".into(),
                question,
                is_other: false,
                options: choices,
            }],
            blocking: true,
        });
    }

    fn answer(&mut self, request_id: &str, answer: Answer) {
        let Some((id, options)) = self.open.remove(request_id) else {
            return;
        };
        let chosen = match answer {
            Answer::Approval(d) => return self.peer.respond(&id, select(&options, d)),
            Answer::Question(a) => a
                .unwrap_or_default()
                .into_iter()
                .find(|q| q.id == "permission")
                .and_then(|q| q.selected.into_iter().next()),
        };
        // The option the client chose by name; no answer (no client, expired,
        // cancelled) refuses.
        let option = chosen.and_then(|label| {
            options
                .iter()
                .find(|o| o.get("name").and_then(Value::as_str) == Some(label.as_str()))
                .filter(|o| o.get("kind").and_then(Value::as_str) != Some("allow_always"))
                .and_then(|o| o.get("optionId").cloned())
        });
        match option {
            Some(o) => self.peer.respond(
                &id,
                json!({"outcome": {"outcome": "selected", "optionId": o}}),
            ),
            None => self
                .peer
                .respond(&id, select(&options, ApprovalDecision::Decline)),
        }
    }

    /// Revokes every open permission request (answered `cancelled`).
    fn revoke_all(&mut self) {
        for (k, (id, _)) in std::mem::take(&mut self.open) {
            self.peer
                .respond(&id, json!({"outcome": {"outcome": "cancelled"}}));
            self.sink.emit(EngineEvent::Revoked { request_id: k });
        }
    }
}

/// The permission outcome for decision `d` among the agent's `options`: the option of
/// kind `allow_once` (accept) or `reject_once` (decline); never `allow_always`
/// (approvals do not become persistent rules). Cancel, or no such option → cancelled.
fn select(options: &[Value], d: ApprovalDecision) -> Value {
    let want = match d {
        ApprovalDecision::Accept | ApprovalDecision::AcceptForSession => "allow_once",
        ApprovalDecision::Decline => "reject_once",
        ApprovalDecision::Cancel => "",
    };
    let found = options
        .iter()
        .find(|o| o.get("kind").and_then(Value::as_str) == Some(want))
        .and_then(|o| o.get("optionId").cloned());
    match found {
        Some(option) => json!({"outcome": {"outcome": "selected", "optionId": option}}),
        None => json!({"outcome": {"outcome": "cancelled"}}),
    }
}

/// Tool name and arguments of a `tool_call`: `exec` with `{command}` for kind
/// `execute`, `apply_patch` for edits, else the title (`tool` when absent).
fn tool_of(u: &Value) -> (String, String) {
    let kind = u.get("kind").and_then(Value::as_str).unwrap_or("");
    let title = u
        .get("title")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("tool");
    let raw = u.get("rawInput").cloned().unwrap_or(Value::Null);
    let name = match kind {
        "execute" => "exec".to_owned(),
        "edit" | "delete" | "move" => "apply_patch".to_owned(),
        _ => title.to_owned(),
    };
    let args = match kind {
        "execute" => {
            let command = raw.get("command").cloned().unwrap_or_else(|| json!(title));
            json!({"command": command, "cwd": raw.get("cwd"), "title": title})
        }
        _ => json!({"title": title, "kind": kind, "input": raw, "locations": u.get("locations")}),
    };
    (name, args.to_string())
}

/// The result text of a finished tool call: `rawOutput` (string, or its `output` /
/// `stdout` member, or its JSON), else the joined text content.
fn output_of(u: &Value) -> Option<String> {
    match u.get("rawOutput") {
        Some(Value::String(s)) => return Some(s.clone()),
        Some(Value::Null) | None => {}
        Some(v) => {
            for k in ["formatted_output", "aggregated_output", "output", "stdout"] {
                if let Some(s) = v.get(k).and_then(Value::as_str) {
                    return Some(s.to_owned());
                }
            }
            return Some(v.to_string());
        }
    }
    let texts: Vec<&str> = u
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.pointer("/content/text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n"))
}

/// The prompt blocks of a turn: the instructions (as a first text block) and the
/// user's text, then images as `image` blocks.
fn prompt_blocks(req: &TurnRequest) -> Vec<Value> {
    let mut out = vec![];
    if let Some(i) = req.instructions.as_deref().filter(|i| !i.trim().is_empty()) {
        out.push(json!({"type": "text",
            "text": format!("Session instructions supplied by the host:\n{i}")}));
    }
    if !req.input.prompt.is_empty() {
        out.push(json!({"type": "text", "text": req.input.prompt}));
    }
    for img in &req.input.images {
        let (mime, data) = match img
            .data
            .strip_prefix("data:")
            .and_then(|r| r.split_once(";base64,"))
        {
            Some((m, d)) => (m.to_owned(), d.to_owned()),
            None => (
                img.media_type.clone().unwrap_or_else(|| "image/png".into()),
                img.data.clone(),
            ),
        };
        out.push(json!({"type": "image", "mimeType": mime, "data": data}));
    }
    if out.is_empty() {
        out.push(json!({"type": "text", "text": ""}));
    }
    out
}

/// Token usage of a prompt answer (`usage` with `inputTokens`, `outputTokens`,
/// `cachedReadTokens`, `cachedWriteTokens`, `thoughtTokens`), if reported.
fn usage_of(v: &Value) -> Option<Usage> {
    let u = v.get("usage").filter(|u| u.is_object())?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input_tokens: n("inputTokens").saturating_sub(n("cachedReadTokens")),
        output_tokens: n("outputTokens"),
        cache_read_tokens: n("cachedReadTokens"),
        cache_creation_tokens: n("cachedWriteTokens"),
        reasoning_tokens: n("thoughtTokens"),
    })
}

impl AcpEngine {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn drive(
        &mut self,
        req: &TurnRequest,
        session: &str,
        peer: &Arc<Peer>,
        inbox_tx: &Sender<Inbound>,
        inbox: &Receiver<Inbound>,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Outcome {
        sink.emit(EngineEvent::Step);
        let params = json!({"sessionId": session, "prompt": prompt_blocks(req)});
        if let Err(e) = peer.request_to("session/prompt", params, inbox_tx, "prompt") {
            return self.rpc_failure(peer, "session/prompt", &e.message);
        }
        let mut map = Map {
            id: self.id.clone(),
            sink,
            peer: peer.clone(),
            mode: req.permission_mode,
            root: req.workspace_root.clone(),
            message: false,
            reasoning: false,
            tools: HashMap::new(),
            open: HashMap::new(),
            terms: TurnTerminals {
                table: self.terminals.clone(),
                ctx: terminal::tool_context(req),
                created: HashMap::new(),
            },
            term_calls: HashMap::new(),
        };
        let mut interrupted_at: Option<Instant> = None;
        let mut controls_gone = false;
        let end = loop {
            let ctl = if controls_gone {
                never()
            } else {
                controls.clone()
            };
            let mut wait = match interrupted_at {
                Some(t) => INTERRUPT_GRACE.saturating_sub(t.elapsed()),
                None => Duration::from_secs(3600),
            };
            if !map.term_calls.is_empty() {
                wait = wait.min(TERMINAL_TICK);
            }
            select! {
                recv(inbox) -> msg => {
                    let Ok(msg) = msg else {
                        break failure(&self.id, format!("{} closed the session stream", self.id), "engine_stream_closed");
                    };
                    match msg {
                        Inbound::Notification { method, params } => {
                            if method == "session/update" {
                                if let Some(u) = params.get("update") {
                                    map.update(u);
                                }
                            }
                        }
                        Inbound::Request { id, method, params } => map.request(id, &method, &params),
                        Inbound::Response { tag, result } if tag == "prompt" => {
                            break match result {
                                Ok(v) => {
                                    if let Some(u) = usage_of(&v) {
                                        sink.emit(EngineEvent::Usage(u));
                                    }
                                    let reason = v.get("stopReason").and_then(Value::as_str).unwrap_or("end_turn");
                                    self.stop(&mut map, reason, interrupted_at.is_some())
                                }
                                Err(e) => {
                                    if interrupted_at.is_some() && !peer.is_dead() {
                                        Outcome::Interrupted
                                    } else {
                                        self.rpc_failure(peer, "session/prompt", &e.message)
                                    }
                                }
                            };
                        }
                        Inbound::Response { .. } => {}
                        Inbound::Closed(why) => {
                            self.peer = None;
                            self.loaded = None;
                            break failure(
                                &self.id,
                                format!("the {} agent stopped during the turn: {why}; the next turn starts it again", self.id),
                                "engine_exited",
                            );
                        }
                    }
                }
                recv(ctl) -> c => match c {
                    Ok(Control::Interrupt) | Err(_) => {
                        if c.is_err() { controls_gone = true; }
                        if interrupted_at.is_none() {
                            interrupted_at = Some(Instant::now());
                            map.revoke_all();
                            let _ = peer.notify("session/cancel", json!({"sessionId": session}));
                        }
                    }
                    // No native steering: input waits for the next turn.
                    Ok(Control::Steer(Some(s))) => {
                        sink.emit(EngineEvent::SteerDeferred { input_id: s.input_id });
                    }
                    Ok(Control::Steer(None)) => {}
                    Ok(Control::Answer { request_id, answer }) => map.answer(&request_id, answer),
                },
                default(wait) => {
                    map.stream_terminals();
                    if interrupted_at.is_some_and(|t| t.elapsed() >= INTERRUPT_GRACE) {
                        // The agent did not settle the cancelled prompt: a new child
                        // serves the next turn.
                        self.peer = None;
                        self.loaded = None;
                        break Outcome::Interrupted;
                    }
                }
            }
        };
        map.revoke_all();
        // Terminals die with the turn.
        self.terminals.release_all();
        end
    }

    /// The outcome of a prompt that answered with `reason`.
    fn stop(&mut self, map: &mut Map, reason: &str, interrupted: bool) -> Outcome {
        map.close_reasoning();
        match reason {
            "end_turn" if !interrupted => {
                map.close_message(true);
                Outcome::Completed
            }
            "cancelled" | "end_turn" => {
                map.close_message(false);
                Outcome::Interrupted
            }
            other => {
                map.close_message(false);
                let code = if other.is_empty() {
                    "engine_stopped"
                } else {
                    other
                };
                failure(&self.id, format!("{} stopped: {other}", self.id), code)
            }
        }
    }
}
