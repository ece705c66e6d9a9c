//! The MCP client (Model Context Protocol, revision 2025-06-18, JSON-RPC 2.0): the
//! configured servers ([`crate::config::mcp`]), their lifecycle, and their tools as model
//! tools. No async runtime: a stdio server is a child process with a reader thread
//! ([`stdio`]); a remote server is spoken to over streamable HTTP with `ureq` ([`http`]).
//! Spec: README § "MCP servers"; protocol shapes in `wuu_protocol::mcp`.
//!
//! Lifecycle: a server starts lazily, when a turn asks for tools ([`Manager::specs`]) or
//! at `mcp/connect`; servers start in parallel, each bounded by its
//! `startup_timeout_ms`. A server that fails to start or dies is `error` (with the
//! reason) until `mcp/refresh` tries again; it never fails a turn that does not call
//! it. A project server (`.mcp.json`) never starts before the user approved it. Every
//! change of a server's status is reported through the status hook
//! (`mcp/status/updated`). `notifications/tools/list_changed` re-reads the tool list.
//! `--safe-mode` starts none.

pub mod http;
pub mod oauth;
pub mod project;
pub mod rpc;
pub mod stdio;
mod tools;

use crate::config::mcp::{Gate, McpEntry};
use crate::config::LoadedConfig;
use parking_lot::{Condvar, Mutex, RwLock};
use rpc::{Event, RpcError, Transport};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use tools::list_tools;
use wuu_protocol::{McpServerStatus, McpToolSummary};

/// The protocol revision we ask for.
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Prefix of every MCP model tool name.
pub const PREFIX: &str = "mcp__";
/// Default `startup_timeout_ms`.
pub const DEFAULT_STARTUP_MS: u64 = 30_000;
/// Default `tool_timeout_ms`.
pub const DEFAULT_TOOL_MS: u64 = 120_000;
/// Most `tools/list` pages read.
const MAX_PAGES: usize = 50;

/// Where a server is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Not started (yet).
    Stopped,
    /// Starting.
    Starting,
    /// Connected; its tools are offered.
    Ready,
    /// Failed to start or died (see the error); retried on refresh.
    Error,
    /// Turned off.
    Disabled,
    /// A project server waiting for the user's approval.
    NeedsApproval,
    /// A remote server that wants authorization.
    AuthRequired,
}

impl Phase {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Stopped => "stopped",
            Phase::Starting => "starting",
            Phase::Ready => "ready",
            Phase::Error => "error",
            Phase::Disabled => "disabled",
            Phase::NeedsApproval => "needs_approval",
            Phase::AuthRequired => "auth_required",
        }
    }
}

/// One tool of a server.
#[derive(Debug, Clone)]
struct Tool {
    name: String,
    model_name: String,
    description: String,
    schema: Value,
    read_only: bool,
}

struct State {
    phase: Phase,
    error: Option<String>,
    conn: Option<Arc<dyn Transport>>,
    tools: Vec<Tool>,
    /// Bumped at every start and stop: late news of an older connection is ignored.
    generation: u64,
    saw_unauthorized: bool,
}

struct Server {
    entry: McpEntry,
    st: Mutex<State>,
    changed: Condvar,
}

/// How a start ended: the connection and its tools, or the phase and why.
type Started = Result<(Arc<dyn Transport>, Vec<Tool>), (Phase, String)>;

/// Called with a server's status whenever it changes.
pub type StatusHook = Arc<dyn Fn(McpServerStatus) + Send + Sync>;

/// The configured MCP servers of one host.
pub struct Manager {
    home: PathBuf,
    workdir: PathBuf,
    safe_mode: bool,
    servers: Mutex<BTreeMap<String, Arc<Server>>>,
    hook: RwLock<Option<StatusHook>>,
    /// Held while tools get their model names and are stored (names stay unique).
    naming: Mutex<()>,
    /// OAuth flows and tokens.
    pub oauth: oauth::OAuth,
    me: Weak<Manager>,
}

fn initial_phase(e: &McpEntry, safe_mode: bool) -> Phase {
    if safe_mode {
        return Phase::Disabled;
    }
    match e.gate {
        Gate::Enabled => Phase::Stopped,
        Gate::Disabled => Phase::Disabled,
        Gate::NeedsApproval => Phase::NeedsApproval,
    }
}

impl Manager {
    /// The servers of a host with wuu home `home` and workspace `workdir`;
    /// `safe_mode` starts none.
    pub fn new(home: &Path, workdir: &Path, safe_mode: bool) -> Arc<Manager> {
        Arc::new_cyclic(|me| Manager {
            home: home.to_path_buf(),
            workdir: workdir.to_path_buf(),
            safe_mode,
            servers: Mutex::new(BTreeMap::new()),
            hook: RwLock::new(None),
            naming: Mutex::new(()),
            oauth: oauth::OAuth::new(home),
            me: me.clone(),
        })
    }

    /// Sets the status hook (`mcp/status/updated`).
    pub fn set_hook(&self, hook: StatusHook) {
        *self.hook.write() = Some(hook);
    }

    fn emit(&self, s: &Server) {
        let status = self.status_of(s);
        if let Some(h) = self.hook.read().clone() {
            h(status);
        }
    }

    /// Puts `cfg` in force: new servers join (not started), removed ones stop, changed
    /// ones stop and take their new entry.
    pub fn reconcile(&self, cfg: &LoadedConfig) {
        let entries = crate::config::mcp::entries(cfg);
        let mut changed = vec![];
        let mut stopped = vec![];
        {
            let mut servers = self.servers.lock();
            let names: HashSet<&str> = entries.iter().map(|e| e.name.as_str()).collect();
            let gone: Vec<String> = servers
                .keys()
                .filter(|k| !names.contains(k.as_str()))
                .cloned()
                .collect();
            for k in gone {
                if let Some(s) = servers.remove(&k) {
                    stopped.push(s);
                }
            }
            for e in entries {
                if servers.get(&e.name).is_some_and(|s| s.entry == e) {
                    continue;
                }
                let phase = initial_phase(&e, self.safe_mode);
                let s = Arc::new(Server {
                    entry: e.clone(),
                    st: Mutex::new(State {
                        phase,
                        error: self
                            .safe_mode
                            .then(|| "safe mode: no MCP server is started".to_owned()),
                        conn: None,
                        tools: vec![],
                        generation: 0,
                        saw_unauthorized: false,
                    }),
                    changed: Condvar::new(),
                });
                if let Some(old) = servers.insert(e.name.clone(), s.clone()) {
                    stopped.push(old);
                }
                changed.push(s);
            }
        }
        for s in stopped {
            Self::stop(&s, Phase::Disabled, None);
        }
        for s in changed {
            self.emit(&s);
        }
    }

    fn stop(s: &Server, phase: Phase, error: Option<String>) {
        let conn = {
            let mut st = s.st.lock();
            st.generation += 1;
            st.phase = phase;
            st.error = error;
            st.tools.clear();
            s.changed.notify_all();
            st.conn.take()
        };
        if let Some(c) = conn {
            c.close();
        }
    }

    fn get(&self, name: &str) -> Option<Arc<Server>> {
        self.servers.lock().get(name.trim()).cloned()
    }

    /// Gives `tools` of `me` their model names, unique among the built-in tools and the
    /// other servers' tools. Call with `self.naming` held until the tools are stored.
    fn named(&self, me: &Server, mut tools: Vec<Tool>) -> Vec<Tool> {
        let servers: Vec<Arc<Server>> = self.servers.lock().values().cloned().collect();
        let mut taken: HashSet<String> = crate::tools::TOOL_NAMES
            .iter()
            .map(|s| s.to_string())
            .collect();
        for s in servers.iter().filter(|s| !std::ptr::eq(&***s, me)) {
            taken.extend(s.st.lock().tools.iter().map(|t| t.model_name.clone()));
        }
        for t in tools.iter_mut() {
            t.model_name = project::model_name(&me.entry.name, &t.name, &mut taken);
        }
        tools
    }

    /// The status of one server.
    fn status_of(&self, s: &Server) -> McpServerStatus {
        let st = s.st.lock();
        let c = &s.entry.config;
        let auth_status = c.url.as_ref().map(|url| {
            if c.bearer_token_env.is_some()
                || c.headers
                    .iter()
                    .flatten()
                    .any(|(k, _)| k.eq_ignore_ascii_case("authorization"))
            {
                "bearer_token"
            } else if self.oauth.token(&s.entry.name, url).is_some() {
                "oauth"
            } else if c.oauth.is_some() || st.saw_unauthorized {
                "not_logged_in"
            } else {
                "unsupported"
            }
            .to_owned()
        });
        McpServerStatus {
            name: s.entry.name.clone(),
            state: st.phase.as_str().into(),
            auth_status,
            connected: st.phase == Phase::Ready,
            tool_count: st.tools.len() as u32,
            error: st.error.clone(),
            transport: if c.url.is_some() {
                "streamable_http"
            } else {
                "stdio"
            }
            .into(),
            source: s.entry.source.as_str().into(),
            tools: st
                .tools
                .iter()
                .map(|t| McpToolSummary {
                    name: t.name.clone(),
                    model_name: t.model_name.clone(),
                    description: crate::util::clip(&t.description, 300),
                    read_only: t.read_only,
                })
                .collect(),
        }
    }

    /// Every server's status, by name (after putting `cfg` in force).
    pub fn list(&self, cfg: &LoadedConfig) -> Vec<McpServerStatus> {
        self.reconcile(cfg);
        let servers: Vec<Arc<Server>> = self.servers.lock().values().cloned().collect();
        servers.iter().map(|s| self.status_of(s)).collect()
    }

    /// The status of `name`, `Err` when no such server is configured.
    pub fn status(&self, cfg: &LoadedConfig, name: &str) -> Result<McpServerStatus, String> {
        self.reconcile(cfg);
        self.get(name)
            .map(|s| self.status_of(&s))
            .ok_or_else(|| self.unknown(name))
    }

    fn unknown(&self, name: &str) -> String {
        let names: Vec<String> = self.servers.lock().keys().cloned().collect();
        format!(
            "no MCP server is named {name:?} (configured: {})",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        )
    }

    /// Starts every enabled server not started yet (in parallel) and waits until each
    /// is ready, failed, or its startup timeout passed.
    pub fn ensure_started(&self, cfg: &LoadedConfig) {
        self.reconcile(cfg);
        let servers: Vec<Arc<Server>> = self.servers.lock().values().cloned().collect();
        let mut waiting = vec![];
        for s in servers {
            let phase = s.st.lock().phase;
            match phase {
                Phase::Stopped => {
                    self.begin(&s);
                    waiting.push(s);
                }
                Phase::Starting => waiting.push(s),
                _ => {}
            }
        }
        for s in waiting {
            Self::wait(&s);
        }
    }

    fn wait(s: &Server) {
        let limit = Duration::from_millis(startup_ms(&s.entry) + 1000);
        let until = Instant::now() + limit;
        let mut st = s.st.lock();
        while st.phase == Phase::Starting {
            if s.changed.wait_until(&mut st, until).timed_out() {
                break;
            }
        }
    }

    /// Starts `s` on its own thread (phase `starting`).
    fn begin(&self, s: &Arc<Server>) {
        let gen = {
            let mut st = s.st.lock();
            st.generation += 1;
            st.phase = Phase::Starting;
            st.error = None;
            st.generation
        };
        self.emit(s);
        let Some(me) = self.me.upgrade() else { return };
        let s2 = s.clone();
        let spawned = crate::util::spawn("mcp-start".into(), move || me.connect_now(&s2, gen));
        if let Err(e) = spawned {
            self.finish(s, gen, Err((Phase::Error, format!("cannot start: {e}"))));
        }
    }

    fn finish(&self, s: &Server, gen: u64, r: Started) {
        let _naming = self.naming.lock();
        let r = r.map(|(c, tools)| (c, self.named(s, tools)));
        let mut st = s.st.lock();
        if st.generation != gen {
            drop(st);
            if let Ok((conn, _)) = r {
                conn.close();
            }
            return;
        }
        let closed = match r {
            Ok((conn, tools)) => {
                st.phase = Phase::Ready;
                st.error = None;
                st.tools = tools;
                st.conn.replace(conn)
            }
            Err((phase, e)) => {
                st.phase = phase;
                if phase == Phase::AuthRequired {
                    st.saw_unauthorized = true;
                }
                st.error = Some(crate::secrets::redact_string(e));
                st.tools.clear();
                st.conn.take()
            }
        };
        drop(st);
        drop(_naming);
        self.after_finish(s, closed);
    }

    fn after_finish(&self, s: &Server, closed: Option<Arc<dyn Transport>>) {
        if let Some(c) = closed {
            c.close();
        }
        s.changed.notify_all();
        self.emit(s);
    }

    /// The event hook of a connection of `s` at generation `gen`.
    fn events(&self, s: &Arc<Server>, gen: u64) -> Arc<dyn Fn(Event) + Send + Sync> {
        let me = self.me.clone();
        let server = Arc::downgrade(s);
        Arc::new(move |ev| {
            let (Some(me), Some(s)) = (me.upgrade(), server.upgrade()) else {
                return;
            };
            match ev {
                Event::Closed(why) => {
                    let current = {
                        let st = s.st.lock();
                        st.generation == gen && matches!(st.phase, Phase::Ready | Phase::Starting)
                    };
                    if current {
                        me.finish(&s, gen, Err((Phase::Error, why)));
                    }
                }
                Event::Notification(m) if m == "notifications/tools/list_changed" => {
                    let _ = crate::util::spawn("mcp-relist".into(), move || me.relist(&s, gen));
                }
                Event::Notification(_) => {}
            }
        })
    }

    fn relist(&self, s: &Server, gen: u64) {
        let conn = {
            let st = s.st.lock();
            if st.generation != gen || st.phase != Phase::Ready {
                return;
            }
            st.conn.clone()
        };
        let Some(conn) = conn else { return };
        match list_tools(&*conn, &s.entry, startup_ms(&s.entry)) {
            Ok(tools) => {
                {
                    let _naming = self.naming.lock();
                    let tools = self.named(s, tools);
                    let mut st = s.st.lock();
                    if st.generation != gen {
                        return;
                    }
                    st.tools = tools;
                }
                self.emit(s);
            }
            Err(e) => log::warn!("mcp {}: re-reading the tools failed: {e}", s.entry.name),
        }
    }

    fn connect_now(&self, s: &Arc<Server>, gen: u64) {
        let r = self.connect(s, gen);
        self.finish(s, gen, r);
    }

    fn connect(&self, s: &Arc<Server>, gen: u64) -> Started {
        let e = &s.entry;
        let c = &e.config;
        let budget = startup_ms(e);
        let started = Instant::now();
        let events = self.events(s, gen);
        let err = |m: String| (Phase::Error, m);
        let (conn, http): (Arc<dyn Transport>, Option<Arc<http::Http>>) = match (&c.command, &c.url)
        {
            (Some(cmd), None) => {
                let root = &self.workdir;
                let cwd = match c.cwd.as_deref() {
                    Some(d) if Path::new(d).is_absolute() => PathBuf::from(d),
                    Some(d) => root.join(d),
                    None => root.clone(),
                };
                let env = server_env(c);
                let conn = stdio::Stdio::spawn(
                    stdio::Launch {
                        name: &e.name,
                        program: cmd,
                        args: c.args.as_deref().unwrap_or(&[]),
                        cwd: &cwd,
                        env: &env,
                        ledger: Some(self.home.clone()),
                    },
                    events,
                )
                .map_err(err)?;
                (conn as Arc<dyn Transport>, None)
            }
            (None, Some(url)) => {
                let mut headers: Vec<(String, String)> = c
                    .headers
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                if let Some(var) = &c.bearer_token_env {
                    match std::env::var(var).ok().filter(|v| !v.trim().is_empty()) {
                        Some(v) => {
                            crate::secrets::add(v.trim());
                            headers.push(("authorization".into(), format!("Bearer {}", v.trim())))
                        }
                        None => {
                            return Err(err(format!(
                                "bearer_token_env: environment variable {var} is not set"
                            )))
                        }
                    }
                } else if let Some(t) = self.oauth.token(&e.name, url) {
                    headers.push(("authorization".into(), format!("Bearer {}", t.access_token)));
                }
                let h = Arc::new(http::Http::new(url, headers, events));
                (h.clone() as Arc<dyn Transport>, Some(h))
            }
            _ => {
                return Err(err(
                    "the entry must name either `command` (stdio) or `url` (streamable HTTP)"
                        .into(),
                ))
            }
        };
        let left =
            |started: Instant| Duration::from_millis(budget).saturating_sub(started.elapsed());
        let classify = |e: RpcError, what: &str| match e {
            RpcError::Unauthorized(m) => (
                Phase::AuthRequired,
                format!("{m}; authorize it with mcp/auth/start"),
            ),
            e => (Phase::Error, format!("{what}: {e}")),
        };
        let init = rpc::call(
            &*conn,
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "wuu", "version": env!("CARGO_PKG_VERSION")},
            }),
            left(started),
            None,
        );
        let init = match init {
            Ok(v) => v,
            Err(e) => {
                conn.close();
                return Err(classify(e, "initialize failed"));
            }
        };
        let version = init
            .get("protocolVersion")
            .and_then(Value::as_str)
            .unwrap_or(PROTOCOL_VERSION)
            .to_owned();
        if let Some(h) = &http {
            h.set_protocol(&version);
        }
        conn.notify("notifications/initialized", json!({}));
        let has_tools = init
            .get("capabilities")
            .and_then(|c| c.get("tools"))
            .is_some();
        let tools = if has_tools {
            match list_tools(&*conn, e, left(started).as_millis() as u64) {
                Ok(t) => t,
                Err(er) => {
                    conn.close();
                    return Err(classify(er, "tools/list failed"));
                }
            }
        } else {
            vec![]
        };
        log::info!(
            "mcp {}: ready (protocol {version}, {} tools)",
            e.name,
            tools.len()
        );
        Ok((conn, tools))
    }

    /// `mcp/connect`: starts the server (when not ready) and waits for the outcome.
    pub fn connect_server(
        &self,
        cfg: &LoadedConfig,
        name: &str,
    ) -> Result<McpServerStatus, String> {
        self.reconcile(cfg);
        let s = self.get(name).ok_or_else(|| self.unknown(name))?;
        let phase = s.st.lock().phase;
        match phase {
            Phase::Disabled if self.safe_mode => {
                return Err("safe mode: MCP servers are not started".into())
            }
            Phase::Disabled => {
                return Err(format!(
                    "MCP server {name:?} is disabled; enable it with config/general/update {{mcp_enabled_toggles}}"
                ))
            }
            Phase::NeedsApproval => {
                return Err(format!(
                    "MCP server {name:?} comes from the project's .mcp.json and needs approval first: config/general/update {{mcp_enabled_toggles: {{{name:?}: true}}}}"
                ))
            }
            Phase::Ready | Phase::Starting => {}
            _ => self.begin(&s),
        }
        Self::wait(&s);
        Ok(self.status_of(&s))
    }

    /// `mcp/disconnect`: stops the server (it stays configured; `connect` or the next
    /// turn needing tools starts it again).
    pub fn disconnect_server(
        &self,
        cfg: &LoadedConfig,
        name: &str,
    ) -> Result<McpServerStatus, String> {
        self.reconcile(cfg);
        let s = self.get(name).ok_or_else(|| self.unknown(name))?;
        let phase = s.st.lock().phase;
        if matches!(
            phase,
            Phase::Ready | Phase::Starting | Phase::Error | Phase::AuthRequired
        ) {
            Self::stop(&s, Phase::Stopped, None);
            self.emit(&s);
        }
        Ok(self.status_of(&s))
    }

    /// `mcp/refresh`: restarts the server (retrying one that failed) and waits.
    pub fn refresh_server(
        &self,
        cfg: &LoadedConfig,
        name: &str,
    ) -> Result<McpServerStatus, String> {
        self.reconcile(cfg);
        let s = self.get(name).ok_or_else(|| self.unknown(name))?;
        let phase = s.st.lock().phase;
        if matches!(
            phase,
            Phase::Ready | Phase::Starting | Phase::Error | Phase::AuthRequired
        ) {
            Self::stop(&s, Phase::Stopped, None);
        }
        self.connect_server(cfg, name)
    }

    /// The entry of `name`.
    pub fn entry(&self, cfg: &LoadedConfig, name: &str) -> Result<McpEntry, String> {
        self.reconcile(cfg);
        self.get(name)
            .map(|s| s.entry.clone())
            .ok_or_else(|| self.unknown(name))
    }

    /// Stops every server (at shutdown).
    pub fn shutdown(&self) {
        let servers: Vec<Arc<Server>> = std::mem::take(&mut *self.servers.lock())
            .into_values()
            .collect();
        for s in servers {
            Self::stop(&s, Phase::Stopped, None);
        }
    }
}

fn startup_ms(e: &McpEntry) -> u64 {
    e.config
        .startup_timeout_ms
        .unwrap_or(DEFAULT_STARTUP_MS)
        .max(1)
}

/// The environment of a stdio server: the host's without secret-looking variables,
/// provider keys and credential-agent sockets (as for commands, see
/// [`crate::tools::sandbox::command_env`]), plus the entry's own `env`.
fn server_env(c: &crate::config::McpServerConfig) -> Vec<(std::ffi::OsString, std::ffi::OsString)> {
    use crate::tools::sandbox::{looks_secret, AGENT_VARS};
    let mut out: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            !(looks_secret(&name)
                || AGENT_VARS.contains(&name.as_ref())
                || name == crate::tools::process::TOKEN_VAR)
        })
        .collect();
    for (k, v) in c.env.iter().flatten() {
        out.retain(|(ok, _)| ok.to_str() != Some(k.as_str()));
        out.push((k.into(), v.into()));
    }
    out
}

/// Whether `name` is an MCP model tool name.
pub fn is_mcp_tool(name: &str) -> bool {
    name.starts_with(PREFIX)
}
