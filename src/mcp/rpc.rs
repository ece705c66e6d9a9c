//! JSON-RPC 2.0 over an MCP transport: the [`Transport`] seam both transports fill
//! (stdio: [`super::stdio`], streamable HTTP: [`super::http`]) and [`call`], which waits
//! for an answer with a deadline and a cancel flag and tells the server when it gave up
//! (`notifications/cancelled`).

use crate::util::reply::ReplyRx;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Largest JSON-RPC message accepted from a server, in bytes (8 MiB). A larger one
/// fails the calls waiting on it with a clear error; the connection stays up.
pub const MAX_MESSAGE: usize = 8 * 1024 * 1024;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq)]
pub enum RpcError {
    /// The server answered with a JSON-RPC error.
    Remote {
        /// JSON-RPC error code.
        code: i64,
        /// Its message.
        message: String,
    },
    /// The connection failed or closed (the server is gone or unreachable).
    Transport(String),
    /// The server broke the protocol for this call (malformed or oversized message);
    /// the connection stays up.
    Protocol(String),
    /// The server wants authorization (HTTP 401).
    Unauthorized(String),
    /// No answer in time.
    Timeout(String),
    /// The caller gave up (interrupt).
    Cancelled,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Remote { code, message } => write!(f, "{message} (error {code})"),
            RpcError::Transport(m)
            | RpcError::Protocol(m)
            | RpcError::Unauthorized(m)
            | RpcError::Timeout(m) => f.write_str(m),
            RpcError::Cancelled => f.write_str("cancelled"),
        }
    }
}

/// The answer to one request: `result`, or why there is none.
pub type Answer = Result<Value, RpcError>;

/// What a transport reports besides answers.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A server notification (e.g. `notifications/tools/list_changed`).
    Notification(String),
    /// The connection is gone (the process exited, …), with why.
    Closed(String),
}

/// A connection to one MCP server.
pub trait Transport: Send + Sync {
    /// Sends a request; its answer arrives on the returned channel (exactly once).
    fn start(&self, method: &str, params: Value) -> Result<(u64, ReplyRx<Answer>), RpcError>;
    /// Stops waiting for request `id` (its late answer is dropped).
    fn forget(&self, id: u64);
    /// Sends a notification (best effort).
    fn notify(&self, method: &str, params: Value);
    /// Ends the connection (and the process of a stdio server).
    fn close(&self);
}

/// Calls `method` and waits at most `timeout` (and while `cancel` is unset) for its
/// answer. On timeout or cancel the server gets `notifications/cancelled`.
pub fn call(
    t: &dyn Transport,
    method: &str,
    params: Value,
    timeout: Duration,
    cancel: Option<&AtomicBool>,
) -> Answer {
    let (id, rx) = t.start(method, params)?;
    let deadline = Instant::now() + timeout;
    loop {
        let now = Instant::now();
        if now >= deadline {
            t.forget(id);
            t.notify(
                "notifications/cancelled",
                json!({"requestId": id, "reason": "timed out"}),
            );
            return Err(RpcError::Timeout(format!(
                "the server did not answer {method} within {} ms",
                timeout.as_millis()
            )));
        }
        if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            t.forget(id);
            t.notify(
                "notifications/cancelled",
                json!({"requestId": id, "reason": "interrupted"}),
            );
            return Err(RpcError::Cancelled);
        }
        let slice = (deadline - now).min(Duration::from_millis(100));
        match rx.recv_timeout(slice) {
            Ok(a) => return a,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(RpcError::Transport("the connection closed".into()))
            }
        }
    }
}

/// Decodes a JSON-RPC response object into an answer.
pub fn answer_of(v: &Value) -> Answer {
    match v.get("error") {
        Some(e) if !e.is_null() => Err(RpcError::Remote {
            code: e.get("code").and_then(Value::as_i64).unwrap_or(-32603),
            message: crate::util::clip(
                e.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("request failed"),
                2000,
            ),
        }),
        _ => Ok(v.get("result").cloned().unwrap_or(Value::Null)),
    }
}
