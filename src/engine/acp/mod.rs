//! ACP agents as external engines: one generic Agent Client Protocol v1 client over
//! stdio, used by the catalogue engines cursor, devin, grok, hermes, pi and antigravity
//! (spec `engines.md` §1.2, §1.6, §1.8).
//!
//! Each conversation keeps its own agent child (started by its first turn, kept by the
//! session between turns, killed with it). The handshake is `initialize`
//! (protocolVersion 1, client file-system capabilities); the first turn opens a native
//! session (`session/new`) and persists its id as the conversation's `engine_ref`
//! before the turn proceeds; a turn on a new child (or after a restart) reopens it with
//! `session/load` when the agent advertises `loadSession` (the replayed history is not
//! projected), else starts a new session. Each turn sends the newest user input
//! (`session/prompt`) and maps the session's `session/update` notifications to engine
//! events until the prompt answers with its `stopReason`. `turn/interrupt` sends
//! `session/cancel`. Agent requests: `session/request_permission` becomes a host
//! approval (accepted without asking in `unconfined`), `fs/read_text_file` /
//! `fs/write_text_file` are served beneath the workspace root ([`fs`]), `terminal/*`
//! run commands in the conversation's sandbox like the `bash` tool ([`terminal`]); any
//! other request is refused (`-32601`). The JSON-RPC peer is the one of the Codex adapter in
//! strict JSON-RPC 2.0 framing.

mod env;
mod fs;
mod models;
mod terminal;
mod turn;

pub use env::{child_env, engine_vars};
pub use models::{discover_models, models_of};

use super::child::Watch;
use super::codex::rpc::Peer;
use super::codex::ChildSettings;
use super::{Control, Engine, EventSink, Outcome, TurnRequest};
use crossbeam_channel::Receiver;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Handshake limit.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit of opening a session (`session/new`, `session/load`).
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(120);
/// Limit of a small control request (`session/set_mode`).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an interrupted turn may take to report its end.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// The launch arguments appended to the binary of catalogue engine `id` (spec §1.2).
pub fn launch_args(id: &str) -> Vec<String> {
    let args: &[&str] = match id {
        "cursor" | "devin" | "hermes" => &["acp"],
        "grok" => &["--no-auto-update", "agent", "--no-leader", "stdio"],
        "antigravity" if cfg!(target_os = "linux") => &["--uid="],
        _ => &[],
    };
    args.iter().map(|s| s.to_string()).collect()
}

/// Whether catalogue engine `id` speaks ACP.
pub fn is_acp(id: &str) -> bool {
    super::catalog::entry(id).is_some_and(|e| e.protocol == "acp")
}

/// A failed turn of category `engine` for engine `id`, with `code`.
fn failure(id: &str, message: impl Into<String>, code: &str) -> Outcome {
    Outcome::engine_failure(id, message, code)
}

/// What the agent said about itself in `initialize`.
#[derive(Debug, Clone, Default)]
pub struct AgentInfo {
    /// `agentCapabilities.loadSession`.
    pub load_session: bool,
    /// `authMethods` as sent (`[{id, name, description?, type?}]`).
    pub auth_methods: Vec<Value>,
}

/// Starts `binary args…` in `cwd` with the built environment of engine `id` and
/// completes the ACP handshake. Errors carry the child's last stderr line.
pub fn start(
    id: &str,
    binary: &Path,
    cwd: &Path,
    settings: &ChildSettings,
    watch: Option<&Watch>,
) -> Result<(Arc<Peer>, AgentInfo), String> {
    let peer = Peer::spawn(
        binary,
        &launch_args(id),
        cwd,
        &child_env(id, binary, settings),
        settings.ledger.as_deref(),
    )?;
    peer.speak_jsonrpc(&format!("the {id} agent"));
    let init = json!({
        "protocolVersion": 1,
        "clientInfo": {"name": "wuu", "title": "Wuu", "version": env!("CARGO_PKG_VERSION")},
        "clientCapabilities": {
            "fs": {"readTextFile": true, "writeTextFile": true},
            "terminal": true,
        },
    });
    let answer = match peer.request_watched("initialize", init, INIT_TIMEOUT, watch) {
        Ok(a) => a,
        Err(e) => {
            let tail = peer.stderr_tail();
            return Err(if tail.is_empty() {
                format!("{id} ACP handshake failed: {e}")
            } else {
                format!("{id} ACP handshake failed: {e} ({tail})")
            });
        }
    };
    match answer.get("protocolVersion").and_then(Value::as_u64) {
        Some(1) => {}
        other => {
            return Err(format!(
                "unsupported ACP version {} (requires version 1)",
                other.map_or_else(|| "none".to_owned(), |v| v.to_string())
            ))
        }
    }
    let info = AgentInfo {
        load_session: answer
            .pointer("/agentCapabilities/loadSession")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        auth_methods: answer
            .get("authMethods")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default(),
    };
    Ok((peer, info))
}

/// A conversation's ACP session: its agent child and the loaded native session.
pub struct AcpEngine {
    id: String,
    binary: PathBuf,
    settings: ChildSettings,
    peer: Option<(Arc<Peer>, AgentInfo)>,
    /// The native session id loaded on the current child.
    loaded: Option<String>,
    /// The `modes` of the loaded session and the mode id last set on it.
    modes: (Value, Option<String>),
    /// The session's client terminals (`terminal/*`); all killed when a turn ends.
    terminals: Arc<crate::tools::terminal::Terminals>,
}

impl AcpEngine {
    /// An engine session of catalogue engine `id` run from `binary` (nothing starts
    /// until the first turn).
    pub fn new(id: &str, binary: PathBuf, settings: ChildSettings) -> Self {
        AcpEngine {
            id: id.to_owned(),
            binary,
            settings,
            peer: None,
            loaded: None,
            modes: (Value::Null, None),
            terminals: Arc::default(),
        }
    }

    fn peer(&mut self, root: &Path, watch: &Watch) -> Result<(Arc<Peer>, AgentInfo), String> {
        if let Some((p, i)) = &self.peer {
            if !p.is_dead() {
                return Ok((p.clone(), i.clone()));
            }
        }
        self.peer = None;
        self.loaded = None;
        let (p, i) = start(&self.id, &self.binary, root, &self.settings, Some(watch))?;
        self.peer = Some((p.clone(), i.clone()));
        Ok((p, i))
    }

    fn fail(&self, message: impl Into<String>, code: &str) -> Outcome {
        failure(&self.id, message, code)
    }

    /// Opens the native session of `req` on `peer`: reuses the loaded one, loads the
    /// persisted one, or creates one (and persists its id before the turn proceeds).
    fn open_session(
        &mut self,
        req: &TurnRequest,
        peer: &Peer,
        info: &AgentInfo,
        sink: &EventSink,
        watch: &Watch,
    ) -> Result<String, Outcome> {
        if let Some(id) = self
            .loaded
            .clone()
            .filter(|l| Some(l) == req.engine_ref.as_ref())
        {
            self.set_mode(req, peer, &id, watch)?;
            return Ok(id);
        }
        let cwd = req.cwd.to_string_lossy().into_owned();
        let mut opened = None;
        if let Some(r) = req.engine_ref.as_ref().filter(|_| info.load_session) {
            // Updates replaying the history arrive before the answer and reach no
            // subscriber: they are not projected again.
            match peer.request_watched(
                "session/load",
                json!({"sessionId": r, "cwd": cwd, "mcpServers": []}),
                SESSION_TIMEOUT,
                Some(watch),
            ) {
                Ok(a) => opened = Some((r.clone(), a)),
                Err(_) if watch.interrupted() => return Err(Outcome::Interrupted),
                Err(e) => log::warn!("{}: session/load {r} failed ({e}); new session", self.id),
            }
        }
        let (session, answer) = match opened {
            Some(o) => o,
            None => {
                let a = match peer.request_watched(
                    "session/new",
                    json!({"cwd": cwd, "mcpServers": []}),
                    SESSION_TIMEOUT,
                    Some(watch),
                ) {
                    Ok(a) => a,
                    Err(_) if watch.interrupted() => return Err(Outcome::Interrupted),
                    Err(e) => return Err(self.rpc_failure(peer, "session/new", &e.message)),
                };
                let Some(sid) = a
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    return Err(self.fail(
                        format!("{} session/new answered without a sessionId", self.id),
                        "engine_protocol",
                    ));
                };
                match sink.call(|reply| super::EngineEvent::PersistRef {
                    engine_ref: sid.clone(),
                    reply,
                }) {
                    Some(Ok(())) => {}
                    Some(Err(e)) => return Err(self.fail(e, "engine_ref_not_stored")),
                    None => return Err(Outcome::Interrupted),
                }
                (sid, a)
            }
        };
        self.modes = (answer.get("modes").cloned().unwrap_or(Value::Null), None);
        self.loaded = Some(session.clone());
        self.set_mode(req, peer, &session, watch)?;
        Ok(session)
    }

    /// Sets the native mode of our permission mode when the session offers one
    /// (`session/set_mode`); `read_only` without a native read-only mode is refused,
    /// since the agent would not keep that boundary.
    fn set_mode(
        &mut self,
        req: &TurnRequest,
        peer: &Peer,
        session: &str,
        watch: &Watch,
    ) -> Result<(), Outcome> {
        let wrapped = json!({"modes": self.modes.0});
        let current = self.modes.1.clone().or_else(|| {
            self.modes
                .0
                .get("currentModeId")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        let Some(mode) = pick_mode(&wrapped, req.permission_mode) else {
            if req.permission_mode == crate::tools::PermissionMode::ReadOnly {
                return Err(self.fail(
                    format!(
                        "{} has no native read-only mode and does not enforce Wuu's read-only boundary",
                        self.id
                    ),
                    "permission_mode_unsupported",
                ));
            }
            return Ok(());
        };
        if current.as_deref() == Some(mode.as_str()) {
            return Ok(());
        }
        match peer.request_watched(
            "session/set_mode",
            json!({"sessionId": session, "modeId": mode}),
            CALL_TIMEOUT,
            Some(watch),
        ) {
            Ok(_) => self.modes.1 = Some(mode),
            Err(_) if watch.interrupted() => return Err(Outcome::Interrupted),
            Err(e) => log::warn!("{}: session/set_mode {mode} failed: {e}", self.id),
        }
        Ok(())
    }

    fn rpc_failure(&mut self, peer: &Peer, method: &str, e: &str) -> Outcome {
        let dead = peer.is_dead();
        let tail = peer.stderr_tail();
        if dead {
            self.peer = None;
            self.loaded = None;
        }
        let msg = if tail.is_empty() || e.contains(&tail) {
            format!("{} {method} failed: {e}", self.id)
        } else {
            format!("{} {method} failed: {e} ({tail})", self.id)
        };
        self.fail(msg, "engine_request_failed")
    }
}

/// The native mode for our permission mode among the session's `modes`
/// (`availableModes[].id`), spec §1.8; `None` = leave the agent's current mode.
pub fn pick_mode(answer: &Value, mode: crate::tools::PermissionMode) -> Option<String> {
    use crate::tools::PermissionMode;
    let ids: Vec<&str> = answer
        .pointer("/modes/availableModes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("id").and_then(Value::as_str))
        .collect();
    let wanted: &[&str] = match mode {
        PermissionMode::Unconfined => &[
            "bypassPermissions",
            "bypass_permissions",
            "bypass",
            "yolo",
            "agent-full-access",
            "danger-full-access",
            "full-access",
        ],
        PermissionMode::ReadOnly => &["read-only", "read_only", "readonly", "plan"],
        _ => &["agent", "default", "ask", "dontAsk", "dont_ask", "auto"],
    };
    wanted
        .iter()
        .find(|w| ids.contains(w))
        .map(|w| w.to_string())
}

impl Engine for AcpEngine {
    fn id(&self) -> &str {
        &self.id
    }

    fn run_turn(
        &mut self,
        req: TurnRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Outcome {
        // Until the prompt is sent the turn waits for the agent (starting, opening
        // the session): an interrupt ends that wait at once.
        let watch = Watch::new(controls, sink);
        let (peer, info) = match self.peer(&req.workspace_root, &watch) {
            Ok(p) => p,
            // The half-started child was dropped, which killed it.
            Err(_) if watch.interrupted() => return Outcome::Interrupted,
            Err(e) => return self.fail(e, "engine_unavailable"),
        };
        let session = match self.open_session(&req, &peer, &info, sink, &watch) {
            Ok(s) => s,
            Err(end) => return end,
        };
        let (inbox_tx, inbox) = peer.subscribe(&session);
        let outcome = self.drive(&req, &session, &peer, &inbox_tx, &inbox, sink, controls);
        peer.unsubscribe(&inbox_tx);
        if peer.is_dead() {
            self.peer = None;
            self.loaded = None;
        }
        outcome
    }
}
