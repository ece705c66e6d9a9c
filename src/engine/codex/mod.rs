//! Codex as an external engine: `codex app-server` as a child process (`engines.md`
//! §1.4, §1.9, §1.10; wire from `codex app-server generate-json-schema`).
//!
//! One host per binary path, shared by every conversation bound to Codex, started
//! lazily by the first turn that needs it and reference-counted (the child is killed
//! when the last engine session holding it goes). A host that dies is replaced by the
//! next turn. Per conversation the first turn creates the native thread
//! (`thread/start`) and persists its id as the conversation's `engine_ref` before the
//! turn proceeds; later turns (and turns after a restart) `thread/resume` it. Each turn
//! sends only the newest user input (`turn/start`); the native notifications of that
//! turn are mapped to engine events (table in the spec).

pub mod rpc;

use super::{
    Answer, ApprovalDecision, ApprovalRequest, Control, Engine, EngineEvent, EventSink, Outcome,
    Question, Reconnecting, SteerInput, Steering, TurnRequest, UserInput,
};
use crate::provider::chat::Usage;
use crate::tools::PermissionMode;
use crossbeam_channel::{never, select, Receiver, Sender};
use parking_lot::Mutex;
use rpc::{Inbound, Peer, RpcError};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};
use wuu_protocol::{EngineModelInfo, TurnError};

/// The engine id.
pub const ID: &str = "codex";
/// Handshake limit.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit of one control request (thread/start, turn/start, …).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an interrupted turn may take to report its end.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// A running, initialized `codex app-server`.
pub struct Host {
    /// The peer.
    pub peer: Arc<Peer>,
    /// Identity of this host process (a new host has a new one).
    pub generation: u64,
}

fn hosts() -> &'static Mutex<HashMap<PathBuf, Weak<Host>>> {
    static HOSTS: OnceLock<Mutex<HashMap<PathBuf, Weak<Host>>>> = OnceLock::new();
    HOSTS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn next_generation() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// How engine children are started: where their process-ledger rows go and which
/// further variables of ours they may see.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChildSettings {
    /// The wuu home whose store records the child (`tools::process`); None = not
    /// recorded.
    pub ledger: Option<PathBuf>,
    /// `agent.shell_env.keep`: variables passed to the child as well.
    pub env_keep: Vec<String>,
}

impl ChildSettings {
    /// The settings of `cfg` for a host whose wuu home is `home`.
    pub fn from_config(cfg: &crate::config::LoadedConfig, home: &Path) -> ChildSettings {
        ChildSettings {
            ledger: Some(home.to_path_buf()),
            env_keep: cfg
                .agent()
                .shell_env
                .and_then(|e| e.keep)
                .unwrap_or_default(),
        }
    }
}

/// Variables of ours a Codex child gets (when set): what any program needs to run as
/// the user (identity, locale, terminal, temp dir, time zone, XDG dirs), to reach the
/// network (proxies, CA bundles), and Codex's own configuration (`CODEX_HOME`, whose
/// `auth.json` holds its login, and `OPENAI_BASE_URL`). `XDG_RUNTIME_DIR` and
/// `DBUS_SESSION_BUS_ADDRESS` stay because Codex can keep its login in the system
/// keyring. `PATH` comes first, with the binary's directory.
pub const CHILD_ENV_BASE: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "CODEX_HOME",
    "OPENAI_BASE_URL",
];

/// The `env_key` variables of the model providers in Codex's `config.toml`
/// (`$CODEX_HOME`, else `~/.codex`): the credentials Codex reads from its environment
/// by its own configuration. Lines `env_key = "NAME"` (NAME of letters, digits and `_`).
fn codex_env_keys() -> Vec<String> {
    let dir = match std::env::var_os("CODEX_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(h) => PathBuf::from(h).join(".codex"),
            None => return Vec::new(),
        },
    };
    let Ok(text) = std::fs::read_to_string(dir.join("config.toml")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            if k.trim() != "env_key" {
                return None;
            }
            let name = v.trim().strip_prefix('"')?.strip_suffix('"')?;
            let ok =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            ok.then(|| name.to_owned())
        })
        .collect()
}

/// The whole environment of a Codex child, built rather than inherited (our provider
/// keys, other credentials and agent sockets stay with us): `PATH` with the binary's
/// directory first (a GUI launch may not see the directory of `node` and friends), the
/// variables of [`CHILD_ENV_BASE`] and every `LC_*`, the `env_key` variables of Codex's
/// own model providers ([`codex_env_keys`]), and those named in `agent.shell_env.keep`.
/// Codex's login (`codex login`, kept in `$CODEX_HOME/auth.json` or the keyring) needs
/// nothing else; `OPENAI_API_KEY` / `CODEX_API_KEY` reach it only through `keep`.
pub fn child_env(binary: &Path, settings: &ChildSettings) -> Vec<(OsString, OsString)> {
    let mut path = binary
        .parent()
        .map(|d| d.as_os_str().to_owned())
        .unwrap_or_default();
    if let Some(p) = std::env::var_os("PATH") {
        if !path.is_empty() {
            path.push(":");
        }
        path.push(p);
    }
    let wanted: Vec<String> = CHILD_ENV_BASE
        .iter()
        .map(|s| s.to_string())
        .chain(codex_env_keys())
        .chain(settings.env_keep.iter().cloned())
        .collect();
    let mut out: Vec<(OsString, OsString)> = vec![("PATH".into(), path)];
    for (k, v) in std::env::vars_os() {
        let pass = k.to_str().is_some_and(|name| {
            name != "PATH" && (name.starts_with("LC_") || wanted.iter().any(|w| w == name))
        });
        if pass {
            out.push((k, v));
        }
    }
    out
}

/// Starts `codex app-server` in `cwd` and completes the handshake.
pub fn start(binary: &Path, cwd: &Path, settings: &ChildSettings) -> Result<Host, String> {
    let peer = Peer::spawn(
        binary,
        &["app-server".into()],
        cwd,
        &child_env(binary, settings),
        settings.ledger.as_deref(),
    )?;
    let init = json!({
        "clientInfo": {"name": "wuu", "title": "Wuu Desktop", "version": "1"},
        "capabilities": {"experimentalApi": true},
    });
    match peer.request("initialize", init, INIT_TIMEOUT) {
        Ok(_) => {}
        Err(e) => {
            let tail = peer.stderr_tail();
            return Err(if tail.is_empty() {
                format!("codex app-server handshake failed: {e}")
            } else {
                format!("codex app-server handshake failed: {e} ({tail})")
            });
        }
    }
    Ok(Host {
        peer,
        generation: next_generation(),
    })
}

/// The shared host of `binary` (started on first use, with `settings`).
pub fn shared_host(
    binary: &Path,
    root: &Path,
    settings: &ChildSettings,
) -> Result<Arc<Host>, String> {
    let mut map = hosts().lock();
    if let Some(h) = map.get(binary).and_then(Weak::upgrade) {
        if !h.peer.is_dead() {
            return Ok(h);
        }
    }
    let host = Arc::new(start(binary, root, settings)?);
    map.insert(binary.to_path_buf(), Arc::downgrade(&host));
    Ok(host)
}

/// Model discovery: a short-lived host in `cwd`, `model/list` paged by `nextCursor`.
pub fn discover_models(
    binary: &Path,
    cwd: &Path,
    settings: &ChildSettings,
) -> Result<Vec<EngineModelInfo>, String> {
    let host = start(binary, cwd, settings)?;
    let mut out = vec![];
    let mut cursor: Option<String> = None;
    let mut seen = std::collections::HashSet::new();
    loop {
        let page = host
            .peer
            .request(
                "model/list",
                json!({"cursor": cursor, "limit": 100}),
                CALL_TIMEOUT,
            )
            .map_err(|e| format!("model/list: {e}"))?;
        for m in page
            .get("data")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if m.get("hidden").and_then(Value::as_bool) == Some(true) {
                continue;
            }
            if let Some(info) = model_info(m) {
                out.push(info);
            }
        }
        match page.get("nextCursor").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => {
                if !seen.insert(c.to_owned()) {
                    return Err("model/list repeated a cursor".into());
                }
                cursor = Some(c.to_owned());
            }
            _ => return Ok(out),
        }
    }
}

/// One `model/list` entry → an engine model (`engines.md` §1.4 "Model catalogue").
pub fn model_info(m: &Value) -> Option<EngineModelInfo> {
    let s = |k: &str| m.get(k).and_then(Value::as_str).filter(|s| !s.is_empty());
    let id = s("model").or_else(|| s("id"))?.to_owned();
    let efforts: Vec<String> = m
        .get("supportedReasoningEfforts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            e.get("reasoningEffort")
                .and_then(Value::as_str)
                .or_else(|| e.as_str())
                .map(str::to_owned)
        })
        .collect();
    let tiers: Vec<&str> = m
        .get("serviceTiers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("id").and_then(Value::as_str).or_else(|| t.as_str()))
        .collect();
    let fast = if tiers.is_empty() {
        m.get("additionalSpeedTiers")
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|t| t.as_str() == Some("fast")))
    } else {
        tiers.iter().any(|t| *t == "fast" || *t == "priority")
    };
    let default_fast = matches!(s("defaultServiceTier"), Some("fast" | "priority"));
    Some(EngineModelInfo {
        id,
        display_name: s("displayName").map(str::to_owned),
        default_effort: s("defaultReasoningEffort").map(str::to_owned),
        supported_efforts: (!efforts.is_empty()).then_some(efforts),
        is_default: m.get("isDefault").and_then(Value::as_bool).filter(|d| *d),
        fast_mode: fast.then_some(true),
        default_speed: Some(if default_fast { "fast" } else { "standard" }.into()),
        resolved_model: None,
        options: None,
    })
}

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

fn failure(message: impl Into<String>, code: &str) -> Outcome {
    Outcome::Failed(Box::new(TurnError {
        message: message.into(),
        code: Some(code.into()),
        category: Some("engine".into()),
        provider: Some(ID.into()),
        ..Default::default()
    }))
}

/// A conversation's Codex session: the shared host reference and the native thread.
pub struct CodexEngine {
    binary: PathBuf,
    settings: ChildSettings,
    host: Option<Arc<Host>>,
    /// The native thread id and the host generation it is loaded on.
    loaded: Option<(String, u64)>,
}

impl CodexEngine {
    /// An engine session for `binary` (nothing starts until the first turn; a host it
    /// starts gets `settings`).
    pub fn new(binary: PathBuf, settings: ChildSettings) -> Self {
        CodexEngine {
            binary,
            settings,
            host: None,
            loaded: None,
        }
    }

    fn host(&mut self, root: &Path) -> Result<Arc<Host>, String> {
        if let Some(h) = &self.host {
            if !h.peer.is_dead() {
                return Ok(h.clone());
            }
        }
        self.host = None;
        let h = shared_host(&self.binary, root, &self.settings)?;
        self.host = Some(h.clone());
        Ok(h)
    }
}

/// The per-turn state of the notification mapping.
struct TurnMap<'a> {
    sink: &'a EventSink,
    peer: Arc<Peer>,
    thread_id: String,
    turn_id: String,
    mode: PermissionMode,
    /// Native id of the open assistant message and the text streamed into it.
    message: Option<(String, String)>,
    /// A completed message without `phase`: held until the next item or the turn end.
    held_message: bool,
    reasoning: Option<String>,
    tools: HashMap<String, String>,
    total_tokens: u64,
    reconnecting: bool,
    error: Option<String>,
    /// Native request ids of open questions/approvals by our request id.
    open_requests: HashMap<String, (Value, String)>,
    steers: HashMap<String, SteerInput>,
}

impl TurnMap<'_> {
    fn emit(&mut self, ev: EngineEvent) {
        if self.reconnecting && !matches!(ev, EngineEvent::Reconnecting(_)) {
            self.reconnecting = false;
            self.sink.emit(EngineEvent::Connected);
        }
        self.sink.emit(ev);
    }

    fn release_held(&mut self) {
        if self.held_message {
            self.held_message = false;
            self.emit(EngineEvent::MessageDone {
                final_answer: false,
            });
        }
    }

    fn close_message(&mut self) {
        if self.message.take().is_some() {
            self.emit(EngineEvent::MessageDone {
                final_answer: false,
            });
        }
    }

    /// Maps one notification of this turn. Returns the end of the turn, if it ended.
    fn notification(&mut self, method: &str, p: &Value) -> Option<Outcome> {
        let item_id = p.get("itemId").and_then(Value::as_str).unwrap_or("");
        let delta = p.get("delta").and_then(Value::as_str).unwrap_or("");
        match method {
            "item/agentMessage/delta" => {
                if self.message.as_ref().is_some_and(|(id, _)| id != item_id) {
                    self.close_message();
                }
                self.release_held();
                let entry = self
                    .message
                    .get_or_insert_with(|| (item_id.to_owned(), String::new()));
                entry.1.push_str(delta);
                self.emit(EngineEvent::ContentDelta(delta.to_owned()));
            }
            "item/reasoning/textDelta" | "item/reasoning/summaryTextDelta" => {
                self.reasoning = Some(item_id.to_owned());
                self.emit(EngineEvent::ThinkingDelta(delta.to_owned()));
            }
            "item/reasoning/summaryPartAdded"
                if p.get("summaryIndex").and_then(Value::as_u64).unwrap_or(0) > 0 =>
            {
                self.emit(EngineEvent::ThinkingDelta("\n\n".into()));
            }
            "item/commandExecution/outputDelta" | "item/fileChange/outputDelta"
                if self.tools.contains_key(item_id) =>
            {
                self.emit(EngineEvent::ToolOutput {
                    call_id: item_id.to_owned(),
                    stream: Some("stdout".into()),
                    text: delta.to_owned(),
                });
            }
            "item/started" => self.item(p.get("item")?, false),
            "item/completed" => self.item(p.get("item")?, true),
            "turn/plan/updated" => {
                let todos: Vec<Value> = p
                    .get("plan")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|s| {
                        json!({
                            "content": s.get("step").and_then(Value::as_str).unwrap_or(""),
                            "status": match s.get("status").and_then(Value::as_str) {
                                Some("inProgress") => "in_progress",
                                Some("completed") => "completed",
                                _ => "pending",
                            },
                        })
                    })
                    .collect();
                self.emit(EngineEvent::Todo(json!({"todos": todos})));
            }
            "thread/tokenUsage/updated" => {
                self.usage(p.get("tokenUsage")?);
            }
            "error" => {
                let message = p
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("codex reported an error")
                    .to_owned();
                if p.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    self.reconnecting = true;
                    let _ = self.sink.emit(EngineEvent::Reconnecting(Reconnecting {
                        attempt: 1,
                        max_attempts: 1,
                        delay_ms: 0,
                        reason: Some("network".into()),
                        message,
                        discard_step: false,
                    }));
                } else {
                    self.error = Some(message);
                }
            }
            "serverRequest/resolved" => {
                // The native side settled a request itself (e.g. the turn moved on).
                let rid = p.get("requestId").cloned().unwrap_or(Value::Null);
                let ours: Vec<String> = self
                    .open_requests
                    .iter()
                    .filter(|(_, (id, _))| *id == rid)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in ours {
                    self.open_requests.remove(&k);
                    self.sink.emit(EngineEvent::Revoked { request_id: k });
                }
            }
            "turn/completed" => {
                let turn = p.get("turn")?;
                let status = turn.get("status").and_then(Value::as_str).unwrap_or("");
                return Some(match status {
                    "completed" => {
                        if self.held_message {
                            self.held_message = false;
                            self.emit(EngineEvent::MessageDone { final_answer: true });
                        } else if self.message.take().is_some() {
                            self.emit(EngineEvent::MessageDone { final_answer: true });
                        }
                        Outcome::Completed
                    }
                    "interrupted" => Outcome::Interrupted,
                    other => {
                        let message = turn
                            .pointer("/error/message")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                            .or_else(|| self.error.clone())
                            .unwrap_or_else(|| format!("engine turn ended with status {other}"));
                        failure(message, "engine_turn_failed")
                    }
                });
            }
            _ => {}
        }
        None
    }

    fn usage(&mut self, u: &Value) -> Option<()> {
        let total = u.pointer("/total/totalTokens")?.as_u64()?;
        if total <= self.total_tokens {
            return Some(());
        }
        self.total_tokens = total;
        let last = u.get("last")?;
        let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
        let cached = n("cachedInputTokens");
        let write = n("cacheWriteInputTokens");
        self.emit(EngineEvent::Usage(Usage {
            input_tokens: n("inputTokens").saturating_sub(cached + write),
            output_tokens: n("outputTokens"),
            cache_read_tokens: cached,
            cache_creation_tokens: write,
            reasoning_tokens: n("reasoningOutputTokens"),
        }));
        Some(())
    }

    fn item(&mut self, item: &Value, completed: bool) {
        let ty = item.get("type").and_then(Value::as_str).unwrap_or("");
        let id = item
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match ty {
            "agentMessage" => {
                if !completed {
                    return;
                }
                let full = text("text");
                let streamed = match &self.message {
                    Some((mid, t)) if *mid == id => Some(t.clone()),
                    _ => None,
                };
                match streamed {
                    Some(t) if t == full => {}
                    Some(_) => self.emit(EngineEvent::ContentReplace(full)),
                    None => {
                        self.close_message();
                        self.release_held();
                        self.emit(EngineEvent::ContentReplace(full));
                    }
                }
                self.message = None;
                match item.get("phase").and_then(Value::as_str) {
                    Some(phase) => self.emit(EngineEvent::MessageDone {
                        final_answer: phase == "final_answer",
                    }),
                    None => self.held_message = true,
                }
            }
            "reasoning" => {
                let join = |k: &str| {
                    item.get(k)
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().or_else(|| v.get("text")?.as_str()))
                                .collect::<Vec<_>>()
                                .join("\n\n")
                        })
                        .unwrap_or_default()
                };
                let mut t = join("summary");
                if t.is_empty() {
                    t = join("content");
                }
                if !t.is_empty() {
                    self.emit(EngineEvent::ThinkingReplace(t));
                }
                if completed {
                    self.reasoning = None;
                    self.emit(EngineEvent::ThinkingDone {
                        text: None,
                        detail: None,
                    });
                }
            }
            "commandExecution"
            | "mcpToolCall"
            | "dynamicToolCall"
            | "webSearch"
            | "fileChange"
            | "collabAgentToolCall" => {
                if !completed {
                    self.close_message();
                    self.release_held();
                    let (name, args) = tool_of(ty, item);
                    self.tools.insert(id.clone(), name.clone());
                    self.emit(EngineEvent::ToolStart {
                        call_id: id.clone(),
                        name,
                        arguments: Some(args),
                    });
                    let _ = self.sink.call(|reply| EngineEvent::ToolReady {
                        call_id: id.clone(),
                        at_most_once: false,
                        reply,
                    });
                    if ty == "collabAgentToolCall" {
                        self.agents(item);
                    }
                    return;
                }
                if !self.tools.contains_key(&id) {
                    let (name, args) = tool_of(ty, item);
                    self.tools.insert(id.clone(), name.clone());
                    self.emit(EngineEvent::ToolArgs {
                        call_id: id.clone(),
                        name,
                        arguments: args,
                    });
                }
                if ty == "collabAgentToolCall" {
                    self.agents(item);
                }
                let (output, is_error) = result_of(ty, item);
                self.emit(EngineEvent::ToolEnd {
                    call_id: id,
                    error: is_error.then(|| output.clone()),
                    output: Some(output),
                    detail: Some(item.clone()),
                    is_error,
                    permission_denied: false,
                });
            }
            "subAgentActivity" => {
                let path = text("agentPath");
                let label = path.rsplit('/').next().unwrap_or(&path).to_owned();
                self.emit(EngineEvent::AgentActivity(json!({
                    "agent_id": item.get("agentThreadId"),
                    "label": label,
                    "status": item.get("kind"),
                })));
            }
            _ => {}
        }
    }

    fn agents(&mut self, item: &Value) {
        let Some(states) = item.get("agentsStates").and_then(Value::as_object) else {
            return;
        };
        for (agent, st) in states {
            let raw = st
                .get("status")
                .and_then(Value::as_str)
                .or_else(|| st.as_str())
                .unwrap_or("");
            let status = match raw {
                "pendingInit" => "queued",
                "interrupted" => "waiting",
                "completed" | "shutdown" => "completed",
                "errored" | "notFound" => "failed",
                _ => "running",
            };
            self.emit(EngineEvent::AgentActivity(json!({
                "agent_id": agent, "label": agent, "status": status,
            })));
        }
    }
}

fn tool_of(ty: &str, item: &Value) -> (String, String) {
    let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let (name, args) = match ty {
        "commandExecution" => (
            "exec".to_owned(),
            json!({"command": item.get("command"), "cwd": item.get("cwd"),
                   "commandActions": item.get("commandActions")}),
        ),
        "mcpToolCall" => (
            format!("mcp:{}:{}", s("server"), s("tool")),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        ),
        "dynamicToolCall" => {
            let ns = s("namespace");
            let name = if ns.is_empty() {
                format!("dynamic:{}", s("tool"))
            } else {
                format!("dynamic:{ns}:{}", s("tool"))
            };
            (name, item.get("arguments").cloned().unwrap_or(Value::Null))
        }
        "webSearch" => (
            "web_search".to_owned(),
            json!({"query": item.get("query"), "action": item.get("action")}),
        ),
        "fileChange" => (
            "apply_patch".to_owned(),
            json!({"changes": item.get("changes")}),
        ),
        _ => (
            format!("codex_collab_{}", s("tool")),
            json!({"prompt": item.get("prompt"), "receiverThreadIds": item.get("receiverThreadIds")}),
        ),
    };
    (name, args.to_string())
}

fn result_of(ty: &str, item: &Value) -> (String, bool) {
    let failed = item.get("status").and_then(Value::as_str) == Some("failed")
        || item.get("status").and_then(Value::as_str) == Some("declined");
    match ty {
        "commandExecution" => {
            let out = item
                .get("aggregatedOutput")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            let code = item.get("exitCode").and_then(Value::as_i64);
            let failed = failed || code.is_some_and(|c| c != 0);
            (
                out.unwrap_or_else(|| format!("Exit {}", code.unwrap_or(0))),
                failed,
            )
        }
        "mcpToolCall" => match item.get("error").filter(|e| !e.is_null()) {
            Some(e) => (e.to_string(), true),
            None => (
                item.get("result")
                    .cloned()
                    .unwrap_or(Value::Null)
                    .to_string(),
                failed,
            ),
        },
        "dynamicToolCall" => (
            item.get("contentItems")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
            failed || item.get("success").and_then(Value::as_bool) == Some(false),
        ),
        "webSearch" => ("done".into(), failed),
        "fileChange" => (
            item.get("changes")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
            failed,
        ),
        _ => (
            item.get("agentsStates")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
            failed,
        ),
    }
}

/// Reads `features.default_mode_request_user_input` of the native config: `false` only
/// when the user disabled it explicitly.
fn questions_disabled(peer: &Peer, cwd: &Path) -> bool {
    match peer.request(
        "config/read",
        json!({"cwd": cwd.to_string_lossy(), "includeLayers": false}),
        CALL_TIMEOUT,
    ) {
        Ok(v) => {
            v.pointer("/config/features/default_mode_request_user_input")
                .and_then(Value::as_bool)
                == Some(false)
        }
        Err(_) => false,
    }
}

impl Engine for CodexEngine {
    fn id(&self) -> &str {
        ID
    }

    fn steering(&self) -> Steering {
        Steering::Native
    }

    fn run_turn(
        &mut self,
        req: TurnRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Outcome {
        let host = match self.host(&req.workspace_root) {
            Ok(h) => h,
            Err(e) => return failure(e, "engine_unavailable"),
        };
        let peer = host.peer.clone();
        let (sandbox, approval, sandbox_policy) =
            permissions(req.permission_mode, &req.workspace_root);
        let cwd = req.cwd.to_string_lossy().into_owned();
        // Open (or reopen on this host) the native thread.
        let loaded = self
            .loaded
            .as_ref()
            .filter(|(t, g)| *g == host.generation && Some(t) == req.engine_ref.as_ref())
            .map(|(t, _)| t.clone());
        let thread_id = match loaded {
            Some(t) => t,
            None => {
                let mut config = json!({});
                if !questions_disabled(&peer, &req.cwd) {
                    config = json!({"features": {"default_mode_request_user_input": true}});
                }
                let mut params = json!({
                    "cwd": cwd,
                    "approvalPolicy": approval,
                    "sandbox": sandbox,
                    "config": config,
                });
                if !req.model.is_empty() {
                    params["model"] = json!(req.model);
                }
                if let Some(i) = req.instructions.as_deref().filter(|i| !i.is_empty()) {
                    params["developerInstructions"] = json!(i);
                }
                let (method, created) = match &req.engine_ref {
                    Some(r) => {
                        params["threadId"] = json!(r);
                        ("thread/resume", false)
                    }
                    None => ("thread/start", true),
                };
                let answer = match peer.request(method, params, CALL_TIMEOUT) {
                    Ok(a) => a,
                    Err(e) => return self.rpc_failure(method, e),
                };
                let Some(id) = answer
                    .pointer("/thread/id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                else {
                    return failure(
                        format!("codex {method} answered without a thread id"),
                        "engine_protocol",
                    );
                };
                if created || req.engine_ref.as_deref() != Some(id.as_str()) {
                    match sink.call(|reply| EngineEvent::PersistRef {
                        engine_ref: id.clone(),
                        reply,
                    }) {
                        Some(Ok(())) => {}
                        Some(Err(e)) => return failure(e, "engine_ref_not_stored"),
                        None => return Outcome::Interrupted,
                    }
                }
                self.loaded = Some((id.clone(), host.generation));
                id
            }
        };
        let (inbox_tx, inbox) = peer.subscribe(&thread_id);
        let outcome = self.drive(
            &req,
            &thread_id,
            &peer,
            &inbox_tx,
            &inbox,
            sink,
            controls,
            sandbox_policy,
        );
        peer.unsubscribe(&inbox_tx);
        if peer.is_dead() {
            self.host = None;
            self.loaded = None;
        }
        outcome
    }
}

impl CodexEngine {
    fn rpc_failure(&mut self, method: &str, e: RpcError) -> Outcome {
        if self.host.as_ref().is_some_and(|h| h.peer.is_dead()) {
            self.host = None;
            self.loaded = None;
        }
        failure(
            format!("codex {method} failed: {e}"),
            "engine_request_failed",
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn drive(
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
        if let Err(e) = peer.request_to("turn/start", params, inbox_tx, "turn/start") {
            return self.rpc_failure("turn/start", e);
        }
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
        // Notifications that arrived before the turn id was known.
        let mut early: Vec<(String, Value)> = vec![];
        let mut interrupted_at: Option<Instant> = None;
        let mut pending_interrupt = false;
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
                recv(inbox) -> msg => {
                    let Ok(msg) = msg else {
                        return failure("codex turn stream closed before completion", "engine_stream_closed");
                    };
                    match msg {
                        Inbound::Response { tag, result } => {
                            if tag == "turn/start" {
                                match result {
                                    Ok(v) => {
                                        map.turn_id = v.pointer("/turn/id").and_then(Value::as_str).unwrap_or("").to_owned();
                                        if pending_interrupt {
                                            self.interrupt(peer, thread_id, &map.turn_id);
                                        }
                                        for (m, p) in std::mem::take(&mut early) {
                                            if let Some(end) = map.notification(&m, &p) {
                                                return self.finish(&mut map, end);
                                            }
                                        }
                                    }
                                    Err(e) => return self.rpc_failure("turn/start", e),
                                }
                            } else if let Some(input_id) = tag.strip_prefix("steer:") {
                                self.steer_answer(&mut map, input_id, result);
                            }
                        }
                        Inbound::Notification { method, params } => {
                            let turn = params.get("turnId").and_then(Value::as_str)
                                .or_else(|| params.pointer("/turn/id").and_then(Value::as_str));
                            if map.turn_id.is_empty() {
                                early.push((method, params));
                                continue;
                            }
                            if turn.is_some_and(|t| t != map.turn_id) {
                                continue;
                            }
                            if let Some(end) = map.notification(&method, &params) {
                                return self.finish(&mut map, end);
                            }
                        }
                        Inbound::Request { id, method, params } => {
                            self.server_request(&mut map, id, &method, &params);
                        }
                        Inbound::Closed(why) => {
                            self.host = None;
                            self.loaded = None;
                            return failure(
                                format!("the codex engine stopped during the turn: {why}; the next turn starts a new codex app-server"),
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
                            if map.turn_id.is_empty() {
                                pending_interrupt = true;
                            } else {
                                self.interrupt(peer, thread_id, &map.turn_id);
                            }
                        }
                    }
                    Ok(Control::Steer(Some(steer))) => self.steer(&mut map, steer, inbox_tx),
                    Ok(Control::Steer(None)) => {}
                    Ok(Control::Answer { request_id, answer }) => self.answer(&mut map, &request_id, answer),
                },
                default(wait) => {
                    if interrupted_at.is_some() {
                        return Outcome::Interrupted;
                    }
                }
            }
        }
    }

    fn interrupt(&self, peer: &Peer, thread_id: &str, turn_id: &str) {
        let _ = peer.request_to(
            "turn/interrupt",
            json!({"threadId": thread_id, "turnId": turn_id}),
            &crossbeam_channel::bounded(1).0,
            "turn/interrupt",
        );
    }

    fn finish(&mut self, map: &mut TurnMap, end: Outcome) -> Outcome {
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

    fn steer(&mut self, map: &mut TurnMap, steer: SteerInput, inbox_tx: &Sender<Inbound>) {
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

    fn steer_answer(&mut self, map: &mut TurnMap, input_id: &str, result: Result<Value, RpcError>) {
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

    fn server_request(&mut self, map: &mut TurnMap, id: Value, method: &str, p: &Value) {
        let request_id = format!("codex-{}-{}", map.thread_id, id);
        let s = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
        match method {
            "item/commandExecution/requestApproval"
            | "item/fileChange/requestApproval"
            | "item/permissions/requestApproval" => {
                let kind = match method {
                    "item/commandExecution/requestApproval" => "command_execution",
                    "item/fileChange/requestApproval" => "file_change",
                    _ => "permissions",
                };
                let command = match p.get("command") {
                    Some(Value::String(c)) => Some(c.clone()),
                    Some(Value::Array(a)) => Some(
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    _ => None,
                };
                // Modes that never ask (read_only, unconfined) have approvalPolicy never;
                // a request anyway is declined without asking.
                if map.mode != PermissionMode::Standard {
                    return answer_approval(&map.peer, &id, kind, ApprovalDecision::Decline, p);
                }
                map.open_requests
                    .insert(request_id.clone(), (id, kind.to_owned()));
                map.sink.emit(EngineEvent::Approval {
                    request_id,
                    request: ApprovalRequest {
                        kind: kind.into(),
                        item_id: s("itemId").unwrap_or_default(),
                        command,
                        cwd: s("cwd"),
                        file_path: s("filePath"),
                        reason: s("reason"),
                    },
                });
            }
            "item/tool/requestUserInput" => {
                let qs: Vec<&Value> = p
                    .get("questions")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().collect())
                    .unwrap_or_default();
                if qs
                    .iter()
                    .any(|q| q.get("isSecret").and_then(Value::as_bool) == Some(true))
                {
                    // Secret input is not supported: "no answer".
                    map.peer.respond(&id, json!({"answers": {}}));
                    return;
                }
                let questions = qs
                    .iter()
                    .map(|q| Question {
                        id: q.get("id").and_then(Value::as_str).unwrap_or("").to_owned(),
                        header: q
                            .get("header")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        question: q
                            .get("question")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        is_other: q.get("isOther").and_then(Value::as_bool).unwrap_or(false),
                        options: q
                            .get("options")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .map(|o| {
                                (
                                    o.get("label")
                                        .and_then(Value::as_str)
                                        .unwrap_or("")
                                        .to_owned(),
                                    o.get("description")
                                        .and_then(Value::as_str)
                                        .unwrap_or("")
                                        .to_owned(),
                                )
                            })
                            .collect(),
                    })
                    .collect();
                map.open_requests
                    .insert(request_id.clone(), (id, "question".into()));
                map.sink.emit(EngineEvent::Question {
                    request_id,
                    call_id: s("itemId").unwrap_or_default(),
                    questions,
                    blocking: p.get("isBlocking").and_then(Value::as_bool) != Some(false),
                });
            }
            other => {
                map.peer
                    .respond_error(&id, -32601, &format!("no handler registered for {other}"))
            }
        }
    }

    fn answer(&mut self, map: &mut TurnMap, request_id: &str, answer: Answer) {
        let Some((id, kind)) = map.open_requests.remove(request_id) else {
            return;
        };
        match answer {
            Answer::Question(answers) => {
                let mut out = serde_json::Map::new();
                for a in answers.unwrap_or_default() {
                    let mut vals = a.selected.clone();
                    if let Some(c) = a.custom.filter(|c| !c.trim().is_empty()) {
                        vals.push(c);
                    }
                    out.insert(a.id, json!({"answers": vals}));
                }
                map.peer.respond(&id, json!({"answers": out}));
            }
            Answer::Approval(d) => answer_approval(&map.peer, &id, &kind, d, &Value::Null),
        }
    }
}

fn answer_approval(peer: &Peer, id: &Value, kind: &str, d: ApprovalDecision, p: &Value) {
    if kind == "permissions" {
        let accepted = matches!(
            d,
            ApprovalDecision::Accept | ApprovalDecision::AcceptForSession
        );
        let body = if accepted {
            json!({"permissions": p.get("permissions").cloned().unwrap_or(json!({})),
                   "scope": if d == ApprovalDecision::AcceptForSession { "session" } else { "turn" }})
        } else {
            json!({"permissions": {}, "scope": "turn"})
        };
        return peer.respond(id, body);
    }
    let decision = match d {
        ApprovalDecision::Accept => "accept",
        ApprovalDecision::AcceptForSession => "acceptForSession",
        ApprovalDecision::Decline => "decline",
        ApprovalDecision::Cancel => "cancel",
    };
    peer.respond(id, json!({"decision": decision}));
}
