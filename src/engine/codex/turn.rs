//! The turn loop of the Codex adapter (spec `engines.md` §1.4, §1.9): `turn/start`
//! with the newest user input, then one `select!` over the thread's notifications and
//! server requests and the host's controls (interrupt, steer, answers) until the turn
//! ends; native steering (`turn/steer`) and the interrupt grace live here too.

use super::projection::TurnMap;
use super::rpc::{Inbound, Peer, RpcError};
use super::{failure, CodexEngine, INTERRUPT_GRACE};
use crate::engine::{Control, EngineEvent, EventSink, Outcome, SteerInput, TurnRequest, UserInput};
use crate::tools::PermissionMode;
use crossbeam_channel::{never, select, Receiver, Sender};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The permission mapping (`engines.md` §1.4): thread `sandbox`, `approvalPolicy`,
/// turn `sandboxPolicy`.
pub fn permissions(mode: PermissionMode, root: &Path) -> (&'static str, &'static str, Value) {
    match mode {
        PermissionMode::ReadOnly => ("read-only", "never", json!({"type": "readOnly"})),
        PermissionMode::Unconfined => (
            "danger-full-access",
            "never",
            json!({"type": "dangerFullAccess"}),
        ),
        _ => (
            "workspace-write",
            "on-request",
            json!({"type": "workspaceWrite", "writableRoots": [root.to_string_lossy()]}),
        ),
    }
}

/// The native input of a user message: text plus one `image` per image (data URL).
pub fn native_input(input: &UserInput) -> Vec<Value> {
    let mut out = vec![];
    if !input.prompt.is_empty() {
        out.push(json!({"type": "text", "text": input.prompt, "text_elements": []}));
    }
    for img in &input.images {
        let url = if img.data.starts_with("data:") {
            img.data.clone()
        } else {
            format!(
                "data:{};base64,{}",
                img.media_type.as_deref().unwrap_or("image/png"),
                img.data
            )
        };
        out.push(json!({"type": "image", "url": url}));
    }
    out
}

/// What the turn loop tracks besides the projection: early notifications and the interrupt.
struct TurnWait {
    /// `turn/start` or `thread/compact/start` (named when its request fails).
    method: &'static str,
    /// A compact-only turn: its turn id may come only with `turn/started`.
    compact_only: bool,
    /// Notifications that arrived before the turn id was known.
    early: Vec<(String, Value)>,
    /// When the interrupt came; the turn ends [`INTERRUPT_GRACE`] later at the latest.
    interrupted_at: Option<Instant>,
    /// An interrupt came before the turn id was known: it is sent once the id is.
    pending_interrupt: bool,
    /// The compaction request was answered; its turn id comes with `turn/started`.
    compact_started: bool,
    /// The host's controls channel is disconnected.
    controls_gone: bool,
}

impl CodexEngine {
    /// Runs one native turn: starts it, then serves codex messages and host controls to its end.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn drive(
        &mut self,
        req: &TurnRequest,
        thread_id: &str,
        peer: &Arc<Peer>,
        inbox_tx: &Sender<Inbound>,
        inbox: &Receiver<Inbound>,
        sink: &EventSink,
        controls: &Receiver<Control>,
        sandbox_policy: Value,
    ) -> Outcome {
        sink.emit(EngineEvent::Step);
        let method = match self.start_turn(req, thread_id, peer, inbox_tx, sandbox_policy) {
            Ok(method) => method,
            Err(end) => return end,
        };
        let mut map = TurnMap {
            sink,
            peer: peer.clone(),
            thread_id: thread_id.to_owned(),
            turn_id: String::new(),
            mode: req.permission_mode,
            message: None,
            held_message: false,
            reasoning: None,
            tools: HashMap::new(),
            total_tokens: 0,
            reconnecting: false,
            error: None,
            open_requests: HashMap::new(),
            steers: HashMap::new(),
        };
        let mut wait = TurnWait {
            method,
            compact_only: req.compact_only,
            early: vec![],
            interrupted_at: None,
            pending_interrupt: false,
            compact_started: false,
            controls_gone: false,
        };
        loop {
            let ctl = if wait.controls_gone {
                never()
            } else {
                controls.clone()
            };
            let grace = match wait.interrupted_at {
                Some(t) => INTERRUPT_GRACE.saturating_sub(t.elapsed()),
                None => Duration::from_secs(3600),
            };
            select! {
                recv(inbox) -> msg => {
                    let Ok(msg) = msg else {
                        return failure("codex turn stream closed before completion", "engine_stream_closed");
                    };
                    if let Some(end) = self.on_inbound(msg, peer, thread_id, &mut map, &mut wait) {
                        return end;
                    }
                }
                recv(ctl) -> c => {
                    self.on_control(c, peer, thread_id, inbox_tx, &mut map, &mut wait);
                }
                default(grace) => {
                    if wait.interrupted_at.is_some() {
                        return Outcome::Interrupted;
                    }
                }
            }
        }
    }

    /// Sends `turn/start` (or `thread/compact/start` for a compact-only turn); returns the method.
    fn start_turn(
        &mut self,
        req: &TurnRequest,
        thread_id: &str,
        peer: &Arc<Peer>,
        inbox_tx: &Sender<Inbound>,
        sandbox_policy: Value,
    ) -> Result<&'static str, Outcome> {
        let (_, approval, _) = permissions(req.permission_mode, &req.workspace_root);
        let mut params = json!({
            "threadId": thread_id,
            "input": native_input(&req.input),
            "approvalPolicy": approval,
            "sandboxPolicy": sandbox_policy,
        });
        if !req.model.is_empty() {
            params["model"] = json!(req.model);
        }
        if !req.effort.is_empty() {
            params["effort"] = json!(req.effort);
        }
        if let Some(schema) = &req.output_schema {
            params["outputSchema"] = schema.clone();
        }
        // A compact-only turn is Codex's native compaction: `thread/compact/start`
        // answers `{}` and the turn it runs is announced by `turn/started`.
        let (method, params) = if req.compact_only {
            ("thread/compact/start", json!({"threadId": thread_id}))
        } else {
            ("turn/start", params)
        };
        if let Err(e) = peer.request_to(method, params, inbox_tx, "turn/start") {
            return Err(self.rpc_failure(method, e));
        }
        Ok(method)
    }

    /// Handles one message from codex; returns how the turn ended when it did.
    fn on_inbound(
        &mut self,
        msg: Inbound,
        peer: &Peer,
        thread_id: &str,
        map: &mut TurnMap,
        wait: &mut TurnWait,
    ) -> Option<Outcome> {
        match msg {
            Inbound::Response { tag, result } => {
                if tag == "turn/start" {
                    return self.turn_start_answer(result, peer, thread_id, map, wait);
                } else if let Some(input_id) = tag.strip_prefix("steer:") {
                    self.steer_answer(map, input_id, result);
                }
            }
            Inbound::Notification { method, params } => {
                let turn = params
                    .get("turnId")
                    .and_then(Value::as_str)
                    .or_else(|| params.pointer("/turn/id").and_then(Value::as_str));
                if map.turn_id.is_empty() {
                    match turn.filter(|_| wait.compact_started && method == "turn/started") {
                        Some(t) => map.turn_id = t.to_owned(),
                        None => {
                            wait.early.push((method, params));
                            return None;
                        }
                    }
                }
                if turn.is_some_and(|t| t != map.turn_id) {
                    return None;
                }
                if let Some(end) = map.notification(&method, &params) {
                    return Some(self.finish(map, end));
                }
            }
            Inbound::Request { id, method, params } => {
                self.server_request(map, id, &method, &params);
            }
            Inbound::Closed(why) => {
                self.host = None;
                self.loaded = None;
                return Some(failure(
                    format!("the codex engine stopped during the turn: {why}; the next turn starts a new codex app-server"),
                    "engine_exited",
                ));
            }
        }
        None
    }

    /// The `turn/start` answer: sets the turn id, sends a held interrupt, replays early messages.
    fn turn_start_answer(
        &mut self,
        result: Result<Value, RpcError>,
        peer: &Peer,
        thread_id: &str,
        map: &mut TurnMap,
        wait: &mut TurnWait,
    ) -> Option<Outcome> {
        let v = match result {
            Ok(v) => v,
            Err(e) => return Some(self.rpc_failure(wait.method, e)),
        };
        map.turn_id = v
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if map.turn_id.is_empty() && wait.compact_only {
            map.turn_id = wait
                .early
                .iter()
                .find(|(m, _)| m == "turn/started")
                .and_then(|(_, p)| p.pointer("/turn/id").and_then(Value::as_str))
                .unwrap_or("")
                .to_owned();
            wait.compact_started = true;
        }
        if wait.pending_interrupt {
            self.interrupt(peer, thread_id, &map.turn_id);
        }
        for (m, p) in std::mem::take(&mut wait.early) {
            if let Some(end) = map.notification(&m, &p) {
                return Some(self.finish(map, end));
            }
        }
        None
    }

    /// Applies a host control: an interrupt (held until the turn id is known), a steer, an answer.
    fn on_control(
        &mut self,
        c: Result<Control, crossbeam_channel::RecvError>,
        peer: &Peer,
        thread_id: &str,
        inbox_tx: &Sender<Inbound>,
        map: &mut TurnMap,
        wait: &mut TurnWait,
    ) {
        match c {
            Ok(Control::Interrupt) | Err(_) => {
                if c.is_err() {
                    wait.controls_gone = true;
                }
                if wait.interrupted_at.is_none() {
                    wait.interrupted_at = Some(Instant::now());
                    if map.turn_id.is_empty() {
                        wait.pending_interrupt = true;
                    } else {
                        self.interrupt(peer, thread_id, &map.turn_id);
                    }
                }
            }
            Ok(Control::Steer(Some(steer))) => self.steer(map, steer, inbox_tx),
            Ok(Control::Steer(None)) => {}
            Ok(Control::Answer { request_id, answer }) => self.answer(map, &request_id, answer),
        }
    }

    pub(super) fn interrupt(&self, peer: &Peer, thread_id: &str, turn_id: &str) {
        let _ = peer.request_to(
            "turn/interrupt",
            json!({"threadId": thread_id, "turnId": turn_id}),
            &crossbeam_channel::bounded(1).0,
            "turn/interrupt",
        );
    }

    pub(super) fn finish(&mut self, map: &mut TurnMap, end: Outcome) -> Outcome {
        // Questions and approvals still open are revoked; steers not acknowledged stay
        // pending for the next turn.
        for (k, (id, _)) in std::mem::take(&mut map.open_requests) {
            map.peer.respond_error(&id, -32000, "the turn ended");
            map.sink.emit(EngineEvent::Revoked { request_id: k });
        }
        for (input_id, _) in std::mem::take(&mut map.steers) {
            map.sink.emit(EngineEvent::SteerUnconfirmed { input_id });
        }
        end
    }

    pub(super) fn steer(
        &mut self,
        map: &mut TurnMap,
        steer: SteerInput,
        inbox_tx: &Sender<Inbound>,
    ) {
        if map.turn_id.is_empty() {
            map.sink.emit(EngineEvent::SteerDeferred {
                input_id: steer.input_id,
            });
            return;
        }
        let params = json!({
            "threadId": map.thread_id,
            "expectedTurnId": map.turn_id,
            "input": native_input(&steer.input),
            "clientUserMessageId": steer.input_id,
        });
        let tag = format!("steer:{}", steer.input_id);
        match map.peer.request_to("turn/steer", params, inbox_tx, &tag) {
            Ok(()) => {
                map.steers.insert(steer.input_id.clone(), steer);
            }
            Err(_) => {
                map.sink.emit(EngineEvent::SteerDeferred {
                    input_id: steer.input_id,
                });
            }
        }
    }

    pub(super) fn steer_answer(
        &mut self,
        map: &mut TurnMap,
        input_id: &str,
        result: Result<Value, RpcError>,
    ) {
        if map.steers.remove(input_id).is_none() {
            return;
        }
        let input_id = input_id.to_owned();
        let ev = match result {
            Ok(v) if v.get("turnId").and_then(Value::as_str) == Some(map.turn_id.as_str()) => {
                EngineEvent::SteerAccepted { input_id }
            }
            Ok(_) => EngineEvent::SteerRefused {
                input_id,
                message: "codex acknowledged the steer for another turn".into(),
            },
            // Method not supported: fall back to next-turn queueing.
            Err(e) if e.code == -32601 => EngineEvent::SteerDeferred { input_id },
            // The ack was lost (transport): unknown whether the native turn took it.
            Err(e) if e.code == 0 => EngineEvent::SteerUnconfirmed { input_id },
            Err(e) => EngineEvent::SteerRefused {
                input_id,
                message: e.message,
            },
        };
        map.sink.emit(ev);
    }
}
