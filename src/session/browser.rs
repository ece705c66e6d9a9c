//! Browser control through the client's hosted browser (spec `app-server.md` §3.8, §4.8,
//! §6 rule 19; seed "托管浏览器请求"; wire types in `wuu_protocol::browser`).
//!
//! # Tools
//! Offered when the client advertised all six base reverse methods
//! (`features.browser`): `browser_open {url}`, `browser_attach {workspace_tab_id}`,
//! `browser_list_tabs {}`, `browser_screenshot {tab_id?, format?}`,
//! `browser_cdp {tab_id?, method, params?}`, `browser_set_visibility {tab_id, visible}`,
//! `browser_close {tab_id}`; plus `browser_finalize {keep: [{tab_id, status}]}` when
//! `browser/finalize` is advertised too. `tab_id` defaults to the conversation's most
//! recently used tab. Each tool's call is a function in `tools`.
//!
//! # Ownership
//! Tabs belong to a conversation. The server records the owner of every tab it opens or
//! attaches and of every tab `browser/list_tabs` reports for a conversation (popups the
//! client reports inherit their opener's owner). A tool call naming a tab recorded for
//! another conversation is refused before anything is sent. A workspace tab can be
//! attached by one conversation at a time; close (detach), finalize and turn end release
//! the binding (the client keeps the user's page open).
//!
//! # Executions
//! Browser requests of one turn form an execution with an immutable `execution_id`
//! (`exe_…`). When the client advertised `browser/turn_started`, the server sends it
//! before the first browser request of the execution, and every request of the
//! execution carries `turn_id` and `execution_id`. When the turn settles (completed,
//! failed, interrupted) and the client advertised `browser/turn_ended`, the server sends
//! it with the execution's keep records (from `browser_finalize`; `preserve_all: true`
//! when a finalize failed so the records are unknown) from a helper thread; the
//! session never waits for it.
//!
//! # Waiting
//! Each request waits at most `agent.reverse_request_timeout_ms` (default 30 s); a
//! timeout, an interrupt or shutdown ends the wait and emits
//! `browser/request_cancelled {workdir, thread_id, request_id, reason}`.

mod tools;

use super::reverse;
use crate::provider::chat::ToolSpec;
use crate::session::Host;
use crate::tools::ToolOutcome;
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use wuu_protocol::browser::*;

/// Names of the browser tools.
pub const TOOLS: &[&str] = &[
    "browser_open",
    "browser_attach",
    "browser_list_tabs",
    "browser_screenshot",
    "browser_cdp",
    "browser_set_visibility",
    "browser_close",
    "browser_finalize",
];

/// Most text of a CDP result kept inline for the model, bytes.
const CDP_INLINE_CAP: usize = 32 * 1024;

#[derive(Debug, Clone)]
struct Tab {
    owner: String,
    /// A borrowed user page (`workspace_tabs`), released, never closed.
    workspace: bool,
}

#[derive(Debug, Clone)]
struct Execution {
    turn_id: String,
    execution_id: String,
    /// `browser/turn_started` was acknowledged.
    started: bool,
    keep: Vec<BrowserKeep>,
    /// A finalize failed: the keep records are unknown.
    keep_unknown: bool,
}

#[derive(Default)]
struct State {
    tabs: HashMap<String, Tab>,
    /// Conversation → its most recently used tab.
    current: HashMap<String, String>,
    /// Conversation → its current execution.
    executions: HashMap<String, Execution>,
}

/// Tab ownership and executions (one per server).
#[derive(Default)]
pub struct Browser {
    state: Mutex<State>,
}

/// Whether the client serves the six base browser methods.
pub fn enabled(shared: &Host) -> bool {
    BASE_METHODS.iter().all(|m| reverse::advertised(shared, m))
}

/// The browser tool specs for what the client advertised (empty when not [`enabled`]).
pub fn specs(shared: &Host) -> Vec<ToolSpec> {
    if !enabled(shared) {
        return vec![];
    }
    let mut out = vec![
        spec(
            "browser_open",
            "Open a new browser tab at a URL in the user's hosted browser. Returns the tab id.",
            r#"{"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]}"#,
        ),
        spec(
            "browser_attach",
            "Attach a page the user already has open (a workspace tab from browser_list_tabs). \
             The page is borrowed: closing or finishing releases it without closing it.",
            r#"{"type": "object", "properties": {"workspace_tab_id": {"type": "string"}}, "required": ["workspace_tab_id"]}"#,
        ),
        spec(
            "browser_list_tabs",
            "List this conversation's browser tabs and the user's attachable workspace tabs.",
            r#"{"type": "object", "properties": {}}"#,
        ),
        spec(
            "browser_screenshot",
            "Take a screenshot of a tab; returns the image file path and size.",
            r#"{"type": "object", "properties": {"tab_id": {"type": "string", "description": "Tab id (default: the tab used last)."}, "format": {"type": "string", "enum": ["png", "jpeg"]}}}"#,
        ),
        spec(
            "browser_cdp",
            "Run one Chrome DevTools Protocol command on a tab (e.g. Runtime.evaluate, \
             Page.navigate, Input.dispatchMouseEvent).",
            r#"{"type": "object", "properties": {"tab_id": {"type": "string", "description": "Tab id (default: the tab used last)."}, "method": {"type": "string"}, "params": {"type": "object"}}, "required": ["method"]}"#,
        ),
        spec(
            "browser_set_visibility",
            "Show or hide a tab in the user's browser preview.",
            r#"{"type": "object", "properties": {"tab_id": {"type": "string"}, "visible": {"type": "boolean"}}, "required": ["tab_id", "visible"]}"#,
        ),
        spec(
            "browser_close",
            "Close a tab (an attached workspace tab is released, not closed).",
            r#"{"type": "object", "properties": {"tab_id": {"type": "string"}}, "required": ["tab_id"]}"#,
        ),
    ];
    if reverse::advertised(shared, "browser/finalize") {
        let mut finalize = spec(
            "browser_finalize",
            "Decide which tabs to keep when you are done with the browser: each kept tab gets \
             a status (persistent: stays open for later; handoff: the user takes over; \
             deliverable: the result to show). Other temporary tabs are closed.",
            r#"{"type": "object", "properties": {"keep": {"type": "array", "items": {
                "type": "object",
                "properties": {"tab_id": {"type": "string"}, "status": {"type": "string", "enum": []}},
                "required": ["tab_id", "status"]}}}, "required": ["keep"]}"#,
        );
        finalize.parameters["properties"]["keep"]["items"]["properties"]["status"]["enum"] =
            KEEP_STATUSES.iter().map(|s| Value::from(*s)).collect();
        out.push(finalize);
    }
    out
}

/// A tool spec whose parameter schema is JSON text ([`crate::util::static_json`]).
fn spec(name: &str, description: &str, parameters: &'static str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        parameters: crate::util::static_json(parameters),
    }
}

fn error(msg: impl Into<String>) -> ToolOutcome {
    ToolOutcome {
        output: msg.into(),
        is_error: true,
        ..Default::default()
    }
}

fn ok(output: String, detail: Value) -> ToolOutcome {
    ToolOutcome {
        output,
        is_error: false,
        permission_denied: false,
        detail,
    }
}

/// One browser tool call's identity.
pub struct CallCtx<'a> {
    /// Server state.
    pub shared: &'a Host,
    /// The conversation.
    pub thread_id: &'a str,
    /// The turn.
    pub turn_id: &'a str,
    /// Set on interrupt.
    pub cancel: &'a AtomicBool,
}

impl Browser {
    /// Refuses a tab recorded for another conversation.
    fn check_owner(&self, thread_id: &str, tab_id: &str) -> Result<(), String> {
        match self.state.lock().tabs.get(tab_id) {
            Some(t) if t.owner != thread_id => Err(format!(
                "refused: tab {tab_id:?} belongs to another conversation"
            )),
            _ => Ok(()),
        }
    }

    /// The tab a call acts on: the given one (ownership checked) or the last used one.
    fn resolve_tab(&self, thread_id: &str, tab_id: Option<&str>) -> Result<String, String> {
        match tab_id.map(str::trim).filter(|s| !s.is_empty()) {
            Some(t) => {
                self.check_owner(thread_id, t)?;
                Ok(t.to_owned())
            }
            None => self
                .state
                .lock()
                .current
                .get(thread_id)
                .cloned()
                .ok_or_else(|| "no tab: open one with browser_open first (or pass tab_id)".into()),
        }
    }

    fn touch(&self, thread_id: &str, tab_id: &str) {
        self.state
            .lock()
            .current
            .insert(thread_id.to_owned(), tab_id.to_owned());
    }

    fn forget_tab(&self, tab_id: &str) {
        let mut st = self.state.lock();
        st.tabs.remove(tab_id);
        st.current.retain(|_, t| t != tab_id);
    }

    /// The execution of `turn_id` (a new one, with a new id, when the conversation's
    /// current execution belongs to another turn).
    fn execution(&self, thread_id: &str, turn_id: &str) -> Execution {
        let mut st = self.state.lock();
        let fresh = || Execution {
            turn_id: turn_id.to_owned(),
            execution_id: crate::util::new_id("exe"),
            started: false,
            keep: vec![],
            keep_unknown: false,
        };
        let e = st
            .executions
            .entry(thread_id.to_owned())
            .or_insert_with(fresh);
        if e.turn_id != turn_id {
            *e = fresh();
        }
        e.clone()
    }

    fn update_execution(
        &self,
        thread_id: &str,
        execution_id: &str,
        f: impl FnOnce(&mut Execution),
    ) {
        if let Some(e) = self.state.lock().executions.get_mut(thread_id) {
            if e.execution_id == execution_id {
                f(e);
            }
        }
    }

    /// Turn end: takes the turn's execution and releases the conversation's workspace
    /// bindings. Returns the execution when one ran in this turn.
    fn end_turn(&self, thread_id: &str, turn_id: &str) -> Option<Execution> {
        let mut st = self.state.lock();
        let exec = match st.executions.get(thread_id) {
            Some(e) if e.turn_id == turn_id => st.executions.remove(thread_id),
            _ => None,
        };
        if exec.is_some() {
            let released: Vec<String> = st
                .tabs
                .iter()
                .filter(|(_, t)| t.workspace && t.owner == thread_id)
                .map(|(id, _)| id.clone())
                .collect();
            for id in released {
                st.tabs.remove(&id);
                st.current.retain(|_, t| *t != id);
            }
        }
        exec
    }

    /// Applies a finalize / turn_ended result: closed tabs and released bindings are
    /// forgotten (unless the client said the request was stale).
    fn apply_cleanup(&self, thread_id: &str, r: &BrowserCleanupResult) {
        if r.stale {
            return;
        }
        let mut st = self.state.lock();
        for id in &r.closed {
            if st.tabs.get(id).is_some_and(|t| t.owner == thread_id) {
                st.tabs.remove(id);
                st.current.retain(|_, t| t != id);
            }
        }
    }
}

/// Scope fields of one request.
struct Scope {
    workdir: String,
    thread_id: String,
    turn_id: Option<String>,
    execution_id: Option<String>,
}

impl Scope {
    fn params(&self, request_id: &str, extra: Value) -> Value {
        let mut v = json!({
            "workdir": self.workdir,
            "thread_id": self.thread_id,
            "request_id": request_id,
        });
        if let Some(t) = &self.turn_id {
            v["turn_id"] = json!(t);
        }
        if let Some(e) = &self.execution_id {
            v["execution_id"] = json!(e);
        }
        if let (Value::Object(m), Value::Object(x)) = (&mut v, extra) {
            m.extend(x);
        }
        v
    }
}

fn workdir(shared: &Host) -> String {
    shared.opts.workdir.to_string_lossy().into_owned()
}

/// Sends one request under the conversation's browser activity lease and waits; on a
/// stopped wait emits `browser/request_cancelled` (reason `takeover` when the user took
/// control meanwhile). Refused without sending while the user holds control.
fn request(
    shared: &Host,
    cancel: &AtomicBool,
    scope: &Scope,
    method: &str,
    extra: Value,
) -> Result<Value, String> {
    let grant = shared.activities.acquire(shared, &scope.thread_id)?;
    let tab = extra
        .get("tab_id")
        .and_then(|t| t.as_str())
        .map(str::to_owned);
    let request_id = uuid::Uuid::new_v4().simple().to_string();
    let mut params = scope.params(&request_id, extra);
    params["activity_id"] = json!(grant.activity_id);
    params["lease_token"] = json!(grant.lease_token);
    let r = shared.reverse.call_watching(
        shared,
        method,
        params,
        reverse::timeout(shared),
        cancel,
        &grant.revoked,
    );
    let revoked = grant.revoked.load(std::sync::atomic::Ordering::SeqCst);
    match r {
        Ok(v) if !revoked => {
            shared.activities.acted(shared, &grant, tab.as_deref());
            Ok(v)
        }
        Ok(_) => Err(format!(
            "{method}: control revoked: the user took over the browser; the action may have \
             partly run, do not replay it"
        )),
        Err(e) if revoked && e == reverse::CallError::Interrupted => {
            let _ = shared.outbox.notify(&BrowserRequestCancelled {
                workdir: scope.workdir.clone(),
                thread_id: scope.thread_id.clone(),
                request_id,
                reason: Some("takeover".into()),
            });
            Err(format!(
                "{method}: control revoked: the user took over the browser"
            ))
        }
        Err(e) => {
            if let Some(reason) = e.cancel_reason() {
                let _ = shared.outbox.notify(&BrowserRequestCancelled {
                    workdir: scope.workdir.clone(),
                    thread_id: scope.thread_id.clone(),
                    request_id,
                    reason: Some(reason.into()),
                });
            }
            Err(e.describe(method))
        }
    }
}

/// The scope of a request in `ctx`'s execution, sending `browser/turn_started` first
/// when negotiated and not yet acknowledged.
fn scope(ctx: &CallCtx) -> Result<Scope, String> {
    let b = &ctx.shared.browser;
    let exec = b.execution(ctx.thread_id, ctx.turn_id);
    let negotiated = reverse::advertised(ctx.shared, "browser/turn_started");
    let scope = Scope {
        workdir: workdir(ctx.shared),
        thread_id: ctx.thread_id.to_owned(),
        turn_id: negotiated.then(|| exec.turn_id.clone()),
        execution_id: negotiated.then(|| exec.execution_id.clone()),
    };
    if negotiated && !exec.started {
        request(
            ctx.shared,
            ctx.cancel,
            &scope,
            "browser/turn_started",
            json!({}),
        )?;
        b.update_execution(ctx.thread_id, &exec.execution_id, |e| e.started = true);
    }
    Ok(scope)
}

/// Runs one browser tool call on the calling (helper) thread.
pub fn run_tool(ctx: &CallCtx, name: &str, args: &str) -> ToolOutcome {
    if !enabled(ctx.shared) {
        return error(
            "browser control is unavailable: the connected client does not serve browser \
             requests",
        );
    }
    match tools::run(ctx, name, args) {
        Ok(o) => o,
        Err(o) => o,
    }
}

/// Turn end: releases the conversation's workspace bindings and, when negotiated, sends
/// `browser/turn_ended` for the turn's execution from a helper thread.
pub fn turn_ended(shared: &Arc<Host>, thread_id: &str, turn_id: &str) {
    let Some(exec) = shared.browser.end_turn(thread_id, turn_id) else {
        return;
    };
    if !reverse::advertised(shared, "browser/turn_ended") || shared.is_closing() {
        return;
    }
    let shared = shared.clone();
    let thread_id = thread_id.to_owned();
    let spawned = crate::util::spawn("browser-turn-ended".into(), move || {
        let scope = Scope {
            workdir: workdir(&shared),
            thread_id: thread_id.clone(),
            turn_id: Some(exec.turn_id.clone()),
            execution_id: Some(exec.execution_id.clone()),
        };
        let mut extra = json!({"keep": exec.keep});
        if exec.keep_unknown {
            extra["preserve_all"] = json!(true);
        }
        let never = AtomicBool::new(false);
        match request(&shared, &never, &scope, "browser/turn_ended", extra) {
            Ok(v) => match serde_json::from_value::<BrowserCleanupResult>(v) {
                Ok(r) => shared.browser.apply_cleanup(&thread_id, &r),
                Err(e) => log::warn!("browser/turn_ended: bad result: {e}"),
            },
            Err(e) => log::warn!("{e}"),
        }
    });
    if let Err(e) = spawned {
        log::error!("cannot start the browser/turn_ended thread: {e}");
    }
}

/// Whether a tool name is a browser tool.
pub fn is_tool(name: &str) -> bool {
    TOOLS.contains(&name)
}
