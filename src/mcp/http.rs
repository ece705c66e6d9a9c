//! The streamable HTTP transport (MCP 2025-06-18 "Streamable HTTP") over `ureq`: every
//! message is a `POST` to the server's one endpoint; the answer is either one JSON body
//! or an SSE stream that carries the response (and any notifications before it). The
//! `Mcp-Session-Id` the server gives at `initialize` goes with every later request, as
//! does `MCP-Protocol-Version`. Each request runs on its own short-lived thread so a
//! caller can give up (deadline, interrupt) without waiting for the socket. The
//! server-initiated `GET` stream is not opened: notifications reach us only inside
//! answers.

use super::rpc::{answer_of, Answer, Event, RpcError, Transport, MAX_MESSAGE};
use crate::util::reply::{reply, ReplyRx};
use parking_lot::Mutex;
use serde_json::{json, Value};
use std::io::{BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How long a request may take end to end on its thread (the caller's own deadline is
/// usually shorter).
const REQUEST_LIMIT: Duration = Duration::from_secs(600);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A streamable HTTP connection.
pub struct Http {
    inner: Arc<Inner>,
}

struct Inner {
    url: String,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
    session: Mutex<Option<String>>,
    protocol: Mutex<Option<String>>,
    next_id: AtomicU64,
    forgotten: Mutex<Vec<u64>>,
    closed: AtomicBool,
    events: Arc<dyn Fn(Event) + Send + Sync>,
}

impl Http {
    /// A connection to `url` sending `headers` with every request.
    pub fn new(
        url: &str,
        headers: Vec<(String, String)>,
        events: Arc<dyn Fn(Event) + Send + Sync>,
    ) -> Http {
        let mut b = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_LIMIT))
            .user_agent(format!("wuu/{}", env!("CARGO_PKG_VERSION")));
        if crate::provider::http::is_loopback(crate::provider::http::host_of(url)) {
            b = b.proxy(None);
        }
        Http {
            inner: Arc::new(Inner {
                url: url.to_owned(),
                headers,
                agent: ureq::Agent::new_with_config(b.build()),
                session: Mutex::new(None),
                protocol: Mutex::new(None),
                next_id: AtomicU64::new(1),
                forgotten: Mutex::new(vec![]),
                closed: AtomicBool::new(false),
                events,
            }),
        }
    }

    /// Sets the negotiated protocol revision (sent as `MCP-Protocol-Version`).
    pub fn set_protocol(&self, v: &str) {
        *self.inner.protocol.lock() = Some(v.to_owned());
    }
}

impl Inner {
    fn post(&self, body: &Value, id: Option<u64>) -> Answer {
        if self.closed.load(Ordering::SeqCst) {
            return Err(RpcError::Transport("the connection is closed".into()));
        }
        let mut rb = self
            .agent
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream");
        if let Some(s) = self.session.lock().clone() {
            rb = rb.header("mcp-session-id", s);
        }
        if let Some(p) = self.protocol.lock().clone() {
            rb = rb.header("mcp-protocol-version", p);
        }
        for (k, v) in &self.headers {
            rb = rb.header(k, v);
        }
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let resp = rb
            .send(&bytes[..])
            .map_err(|e| RpcError::Transport(format!("cannot reach the server: {e}")))?;
        let (parts, body) = resp.into_parts();
        let header = |n: &str| {
            parts
                .headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        if let Some(s) = header("mcp-session-id").filter(|s| !s.is_empty() && s.len() < 1024) {
            *self.session.lock() = Some(s);
        }
        let status = parts.status.as_u16();
        let mut reader = body.into_reader();
        if status == 401 || status == 403 {
            return Err(RpcError::Unauthorized(format!(
                "the server refused the request (HTTP {status}): authorization is required"
            )));
        }
        if status == 404 && self.session.lock().is_some() {
            return Err(RpcError::Transport(
                "the server ended the session (HTTP 404); refresh the server to reconnect".into(),
            ));
        }
        if !(200..300).contains(&status) {
            let mut text = Vec::new();
            let _ = (&mut reader).take(2000).read_to_end(&mut text);
            return Err(RpcError::Transport(format!(
                "the server answered HTTP {status}: {}",
                crate::util::clip(String::from_utf8_lossy(&text).trim(), 300)
            )));
        }
        let Some(id) = id else {
            return Ok(Value::Null);
        };
        let ctype = header("content-type").unwrap_or_default();
        if ctype.starts_with("text/event-stream") {
            return self.read_sse(reader, id);
        }
        let mut text = Vec::new();
        (&mut reader)
            .take(MAX_MESSAGE as u64 + 1)
            .read_to_end(&mut text)
            .map_err(|e| RpcError::Transport(format!("reading the answer: {e}")))?;
        if text.len() > MAX_MESSAGE {
            return Err(RpcError::Protocol(format!(
                "the server sent an answer over the limit of {MAX_MESSAGE} bytes; it was dropped"
            )));
        }
        let v: Value = serde_json::from_slice(&text)
            .map_err(|e| RpcError::Protocol(format!("the server sent malformed JSON ({e})")))?;
        self.pick(v, id)
            .unwrap_or_else(|| Err(RpcError::Protocol("the answer did not carry our id".into())))
    }

    /// The answer to `id` in a JSON body (one message or a batch); notifications in it
    /// are delivered.
    fn pick(&self, v: Value, id: u64) -> Option<Answer> {
        let items = match v {
            Value::Array(a) => a,
            v => vec![v],
        };
        let mut out = None;
        for m in items {
            if m.get("id").and_then(Value::as_u64) == Some(id) && m.get("method").is_none() {
                out = Some(answer_of(&m));
            } else if let (None, Some(method)) =
                (m.get("id"), m.get("method").and_then(Value::as_str))
            {
                (self.events)(Event::Notification(method.to_owned()));
            }
        }
        out
    }

    fn read_sse(&self, body: impl Read, id: u64) -> Answer {
        let mut sse = crate::provider::sse::SseReader::new(BufReader::with_capacity(
            64 * 1024,
            body.take(64 * MAX_MESSAGE as u64),
        ));
        loop {
            let ev = match sse.next_event() {
                Ok(Some(ev)) => ev,
                Ok(None) => {
                    return Err(RpcError::Transport(
                        "the server closed the stream before answering".into(),
                    ))
                }
                Err(e) => return Err(RpcError::Transport(format!("reading the stream: {e}"))),
            };
            if ev.data.trim().is_empty() {
                continue;
            }
            if ev.data.len() > MAX_MESSAGE {
                return Err(RpcError::Protocol(format!(
                    "the server sent a message over the limit of {MAX_MESSAGE} bytes; it was dropped"
                )));
            }
            let v: Value = match serde_json::from_str(&ev.data) {
                Ok(v) => v,
                Err(e) => {
                    return Err(RpcError::Protocol(format!(
                        "the server sent malformed JSON ({e})"
                    )))
                }
            };
            if let Some(a) = self.pick(v, id) {
                return a;
            }
        }
    }
}

impl Transport for Http {
    fn start(&self, method: &str, params: Value) -> Result<(u64, ReplyRx<Answer>), RpcError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = reply::<Answer>();
        let inner = self.inner.clone();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        crate::util::spawn("mcp-http".into(), move || {
            let a = inner.post(&body, Some(id));
            let forgotten = {
                let mut f = inner.forgotten.lock();
                let was = f.contains(&id);
                f.retain(|x| *x != id);
                was
            };
            if !forgotten {
                let _ = tx.send(a);
            }
        })
        .map_err(|e| RpcError::Transport(format!("cannot start a request thread: {e}")))?;
        Ok((id, rx))
    }

    fn forget(&self, id: u64) {
        let mut f = self.inner.forgotten.lock();
        if f.len() > 1024 {
            f.clear();
        }
        f.push(id);
    }

    fn notify(&self, method: &str, params: Value) {
        let inner = self.inner.clone();
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        let _ = crate::util::spawn("mcp-http-notify".into(), move || {
            if let Err(e) = inner.post(&body, None) {
                log::debug!("mcp: notification failed: {e}");
            }
        });
    }

    fn close(&self) {
        if self.inner.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        // Ends the session on the server (best effort, off this thread).
        let Some(session) = self.inner.session.lock().clone() else {
            return;
        };
        let inner = self.inner.clone();
        let _ = crate::util::spawn("mcp-http-close".into(), move || {
            let mut rb = inner
                .agent
                .delete(&inner.url)
                .header("mcp-session-id", session);
            for (k, v) in &inner.headers {
                rb = rb.header(k, v);
            }
            let _ = rb.call();
        });
    }
}
