//! The JSON-RPC peer of a `codex app-server` child (`engines.md` §1.4).
//!
//! Framing: one JSON object per line, **without** a `jsonrpc` member. A line with `id`
//! and `method` is a server request, `id` only a response, `method` only a
//! notification. One reader thread parses stdout and routes: responses to the waiting
//! caller, notifications and server requests to the subscriber of their `threadId`
//! (a server request nobody handles is answered `-32601`). Stderr is drained by its own
//! thread; its last lines are kept (redacted) for error messages. When stdout closes
//! every waiting caller and subscriber learns it at once.

use crate::engine::child::{recv_watched, Process, Waited, Watch};
use crate::util::reply::{reply, ReplyRx, ReplyTx};
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Longest line read from the child (larger lines are skipped with a log line).
pub const MAX_LINE: usize = 64 * 1024 * 1024;
/// Capacity of a subscriber's inbound channel (the reader blocks when it is full).
pub const INBOUND_CAPACITY: usize = 1024;

/// What a subscriber receives.
#[derive(Debug, Clone)]
pub enum Inbound {
    /// A notification.
    Notification {
        /// Method.
        method: String,
        /// Params.
        params: Value,
    },
    /// A server request; answer with [`Peer::respond`] / [`Peer::respond_error`].
    Request {
        /// The request id (echoed in the answer).
        id: Value,
        /// Method.
        method: String,
        /// Params.
        params: Value,
    },
    /// The answer to a request sent with [`Peer::request_to`].
    Response {
        /// The caller's tag.
        tag: String,
        /// `result`, or the error message.
        result: Result<Value, RpcError>,
    },
    /// The child's stdout closed: the peer is gone.
    Closed(String),
}

/// A failed call.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// JSON-RPC error code (`-32601` method not found, …; `0` = transport).
    pub code: i64,
    /// Message.
    pub message: String,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

enum Waiter {
    Once(ReplyTx<Result<Value, RpcError>>),
    Inbound(Sender<Inbound>, String),
}

struct State {
    pending: HashMap<u64, Waiter>,
    subscribers: Vec<(String, Sender<Inbound>)>,
    closed: Option<String>,
}

/// A running `codex app-server` child.
pub struct Peer {
    /// The child (environment, launcher, ledger entry, stderr tail).
    proc: Process,
    state: Arc<Mutex<State>>,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
    /// Whether outgoing messages carry `"jsonrpc": "2.0"` (ACP agents require it;
    /// Codex omits it).
    jsonrpc: AtomicBool,
    /// What errors call the child: "codex app-server", or the ACP agent's name.
    name: Mutex<String>,
}

impl Peer {
    /// Spawns `binary args…` in `cwd` with exactly the environment `env` (see
    /// [`Process::spawn`]: it dies with this process and is recorded in the process
    /// ledger of `ledger` until [`Peer::kill`]) and starts its reader thread.
    pub fn spawn(
        binary: &Path,
        args: &[String],
        cwd: &Path,
        env: &[(OsString, OsString)],
        ledger: Option<&Path>,
    ) -> Result<Arc<Peer>, String> {
        let (proc, stdout) = Process::spawn("codex", binary, args, cwd, env, ledger)?;
        let peer = Arc::new(Peer {
            proc,
            state: Arc::new(Mutex::new(State {
                pending: HashMap::new(),
                subscribers: vec![],
                closed: None,
            })),
            next_id: AtomicU64::new(1),
            dead: Arc::new(AtomicBool::new(false)),
            jsonrpc: AtomicBool::new(false),
            name: Mutex::new("codex app-server".to_owned()),
        });
        let weak = Arc::downgrade(&peer);
        let state = peer.state.clone();
        let dead = peer.dead.clone();
        crate::util::spawn("codex-reader".into(), move || {
            read_loop(stdout, &weak);
            dead.store(true, Ordering::SeqCst);
            // Give the stderr thread a moment to collect the last words.
            std::thread::sleep(Duration::from_millis(50));
            let peer = weak.upgrade();
            let name = peer
                .as_ref()
                .map_or_else(|| "codex app-server".to_owned(), |p| p.name.lock().clone());
            let why = match peer.and_then(|p| p.proc.last_stderr_line()) {
                Some(line) => format!("{name} exited ({line})"),
                None => format!("{name} exited"),
            };
            close_all(&state, &why);
        })
        .map_err(|e| format!("cannot start the codex reader: {e}"))?;
        Ok(peer)
    }

    /// Whether the child's stdout closed.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// The last lines of the child's stderr (redacted).
    pub fn stderr_tail(&self) -> String {
        self.proc.stderr_tail()
    }

    /// Makes every later message carry `"jsonrpc": "2.0"` (strict JSON-RPC 2.0 peers
    /// such as ACP agents) and names the child `name` in error messages.
    pub fn speak_jsonrpc(&self, name: &str) {
        self.jsonrpc.store(true, Ordering::SeqCst);
        *self.name.lock() = name.to_owned();
    }

    /// Sends a notification (no answer expected).
    pub fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        self.write(&json!({"method": method, "params": params}))
    }

    fn write(&self, v: &Value) -> Result<(), RpcError> {
        let line = if self.jsonrpc.load(Ordering::SeqCst) {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.insert("jsonrpc".into(), json!("2.0"));
            }
            serde_json::to_vec(&v).unwrap_or_default()
        } else {
            serde_json::to_vec(v).unwrap_or_default()
        };
        log::debug!("codex <- {}", String::from_utf8_lossy(&line));
        self.proc.write_line(&line).map_err(transport)
    }

    fn register(&self, waiter: Waiter) -> Result<u64, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut st = self.state.lock();
        if let Some(why) = &st.closed {
            return Err(transport(why.clone()));
        }
        st.pending.insert(id, waiter);
        Ok(id)
    }

    /// Sends a request and waits at most `timeout` for its answer.
    pub fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
    ) -> Result<Value, RpcError> {
        self.request_watched(method, params, timeout, None)
    }

    /// [`Peer::request`] that also watches a turn's controls while it waits (see
    /// [`Watch`]): an interrupt, or the host going away, abandons the wait at once with
    /// a transport error and marks the watch interrupted.
    pub fn request_watched(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        watch: Option<&Watch>,
    ) -> Result<Value, RpcError> {
        let (tx, rx) = reply();
        let id = self.register(Waiter::Once(tx))?;
        if let Err(e) = self.write(&json!({"id": id, "method": method, "params": params})) {
            self.state.lock().pending.remove(&id);
            return Err(e);
        }
        let fail = |e: String| {
            self.state.lock().pending.remove(&id);
            Err(transport(e))
        };
        match recv_watched(rx.receiver(), Instant::now() + timeout, watch) {
            Waited::Message(b) => ReplyRx::open(b)
                .unwrap_or_else(|_| fail(format!("{method}: a reply of another type"))),
            Waited::Disconnected => fail(format!("{} exited", self.name.lock())),
            Waited::Interrupted => fail(format!("interrupted while waiting for {method}")),
            Waited::TimedOut => fail(format!(
                "{} did not answer {method} within {} s",
                self.name.lock(),
                timeout.as_secs()
            )),
        }
    }

    /// Sends a request whose answer arrives as [`Inbound::Response`] with `tag` on
    /// `to` (so the caller can keep reading notifications meanwhile).
    pub fn request_to(
        &self,
        method: &str,
        params: Value,
        to: &Sender<Inbound>,
        tag: &str,
    ) -> Result<(), RpcError> {
        let id = self.register(Waiter::Inbound(to.clone(), tag.to_owned()))?;
        self.write(&json!({"id": id, "method": method, "params": params}))
            .inspect_err(|_| {
                self.state.lock().pending.remove(&id);
            })
    }

    /// Answers a server request.
    pub fn respond(&self, id: &Value, result: Value) {
        if let Err(e) = self.write(&json!({"id": id, "result": result})) {
            log::warn!("answering codex request {id}: {e}");
        }
    }

    /// Answers a server request with an error.
    pub fn respond_error(&self, id: &Value, code: i64, message: &str) {
        if let Err(e) = self.write(&json!({"id": id, "error": {"code": code, "message": message}}))
        {
            log::warn!("answering codex request {id}: {e}");
        }
    }

    /// Receives the notifications and server requests of native thread `thread_id`
    /// until the returned receiver is dropped (or [`Peer::unsubscribe`]).
    pub fn subscribe(&self, thread_id: &str) -> (Sender<Inbound>, Receiver<Inbound>) {
        let (tx, rx) = bounded(INBOUND_CAPACITY);
        let mut st = self.state.lock();
        if let Some(why) = &st.closed {
            let _ = tx.try_send(Inbound::Closed(why.clone()));
        } else {
            st.subscribers.push((thread_id.to_owned(), tx.clone()));
        }
        (tx, rx)
    }

    /// Stops delivering `thread_id`'s traffic to `tx`.
    pub fn unsubscribe(&self, tx: &Sender<Inbound>) {
        self.state
            .lock()
            .subscribers
            .retain(|(_, s)| !s.same_channel(tx));
    }

    /// Ends the child and everything it started ([`Process::kill`]).
    pub fn kill(&self) {
        self.proc.kill();
    }
}

fn transport(m: impl Into<String>) -> RpcError {
    RpcError {
        code: 0,
        message: m.into(),
    }
}

fn close_all(state: &Mutex<State>, why: &str) {
    let (pending, subs) = {
        let mut st = state.lock();
        st.closed = Some(why.to_owned());
        (
            std::mem::take(&mut st.pending),
            std::mem::take(&mut st.subscribers),
        )
    };
    for (_, w) in pending {
        match w {
            Waiter::Once(tx) => {
                let _ = tx.send(Err(transport(why)));
            }
            Waiter::Inbound(tx, tag) => {
                let _ = tx.send(Inbound::Response {
                    tag,
                    result: Err(transport(why)),
                });
            }
        }
    }
    for (_, tx) in subs {
        let _ = tx.send(Inbound::Closed(why.to_owned()));
    }
}

fn read_loop(stdout: impl Read, peer: &std::sync::Weak<Peer>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)
        {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if n > MAX_LINE && buf.last() != Some(&b'\n') {
            log::warn!("codex app-server sent a line over {MAX_LINE} bytes; skipped");
            // Skip the rest of that line.
            let mut rest = Vec::new();
            if reader.read_until(b'\n', &mut rest).is_err() {
                return;
            }
            continue;
        }
        let Some(peer) = peer.upgrade() else { return };
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) => {
                // Streamed pieces are not logged: a secret split across deltas would
                // pass the log redactor piece by piece (they reach clients masked,
                // through the session's delta redactor).
                match v.get("method").and_then(Value::as_str) {
                    Some(m) if m.ends_with("elta") => {
                        log::debug!("codex -> {m} ({} bytes)", line.len())
                    }
                    _ => log::debug!("codex -> {}", crate::util::clip(line, 2000)),
                }
                route(&peer, v)
            }
            Err(e) => log::warn!(
                "codex app-server sent a line that is not JSON ({} bytes): {e}",
                line.len()
            ),
        }
    }
}

fn thread_of(params: &Value) -> Option<&str> {
    params
        .get("threadId")
        .or_else(|| params.get("conversationId"))
        .or_else(|| params.get("sessionId"))
        .and_then(Value::as_str)
}

fn route(peer: &Peer, v: Value) {
    let id = v.get("id").cloned().filter(|i| !i.is_null());
    let method = v.get("method").and_then(Value::as_str).map(str::to_owned);
    match (id, method) {
        (Some(id), Some(method)) => {
            let params = v.get("params").cloned().unwrap_or(Value::Null);
            let target = subscriber_for(peer, thread_of(&params));
            let delivered = target.is_some_and(|tx| {
                tx.send(Inbound::Request {
                    id: id.clone(),
                    method: method.clone(),
                    params,
                })
                .is_ok()
            });
            if !delivered {
                peer.respond_error(&id, -32601, &format!("no handler registered for {method}"));
            }
        }
        (Some(id), None) => {
            let Some(n) = id.as_u64() else {
                log::warn!("codex answered an id we never sent: {id}");
                return;
            };
            let waiter = peer.state.lock().pending.remove(&n);
            let result = match v.get("error") {
                Some(e) if !e.is_null() => Err(RpcError {
                    code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
                    message: e
                        .get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("codex request failed")
                        .to_owned(),
                }),
                _ => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
            };
            match waiter {
                Some(Waiter::Once(tx)) => {
                    let _ = tx.send(result);
                }
                Some(Waiter::Inbound(tx, tag)) => {
                    let _ = tx.send(Inbound::Response { tag, result });
                }
                None => log::debug!("late codex answer to request {n}"),
            }
        }
        (None, Some(method)) => {
            let params = v.get("params").cloned().unwrap_or(Value::Null);
            if let Some(tx) = subscriber_for(peer, thread_of(&params)) {
                if tx.send(Inbound::Notification { method, params }).is_err() {
                    peer.unsubscribe(&tx);
                }
            }
        }
        (None, None) => log::warn!("codex app-server sent a line that is no message"),
    }
}

fn subscriber_for(peer: &Peer, thread: Option<&str>) -> Option<Sender<Inbound>> {
    let thread = thread?;
    peer.state
        .lock()
        .subscribers
        .iter()
        .find(|(t, _)| t == thread)
        .map(|(_, tx)| tx.clone())
}
