//! Requests from the server to the client (reverse RPC, spec `app-server.md` §1.5):
//! server-minted ids `srv-<n>`, replies routed back by the reader thread.
//!
//! A caller (a client-served tool's helper thread, never the reader or a session thread)
//! uses [`Pending::call`]: it writes `{"id":"srv-<n>","method","params"}` to the outbox
//! and waits for the reply, its cancel flag (an interrupt), the per-call timeout
//! ([`timeout`]: `agent.reverse_request_timeout_ms`, default 30 000 ms) or shutdown
//! ([`Pending::close_all`]), whichever comes first. A client that never answers
//! therefore blocks only that one call. Replies for unknown or expired ids are dropped.

use crate::session::Host;
use crate::util::reply::{reply, ReplyRx, ReplyTx};
use crossbeam_channel::RecvTimeoutError;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wuu_protocol::{ErrorObject, Request, RequestId, Response};

/// The six base browser reverse methods (seed: hosted browser requests).
pub const BROWSER_METHODS: &[&str] = wuu_protocol::browser::BASE_METHODS;

/// Default per-call timeout of a reverse request (spec §1.5: 30 s).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a waiting call re-checks its cancel flag.
const POLL: Duration = Duration::from_millis(20);

/// Why a reverse call produced no result.
#[derive(Debug, Clone, PartialEq)]
pub enum CallError {
    /// The client did not list the method in `capabilities.reverse_rpc.methods`.
    NotAdvertised(String),
    /// No reply within the per-call timeout.
    Timeout(Duration),
    /// The caller was cancelled (turn interrupt).
    Interrupted,
    /// The server is shutting down (or the client disconnected).
    Closed,
    /// The client answered with an error.
    Remote(ErrorObject),
}

impl CallError {
    /// Text for the model / logs.
    pub fn describe(&self, method: &str) -> String {
        match self {
            CallError::NotAdvertised(m) => {
                format!("connected client did not advertise this reverse-RPC method ({m})")
            }
            CallError::Timeout(d) => {
                format!(
                    "{method}: the client did not answer within {} ms",
                    d.as_millis()
                )
            }
            CallError::Interrupted => format!("{method}: interrupted"),
            CallError::Closed => format!("{method}: app-server is shutting down"),
            CallError::Remote(e) => format!("{method} failed: {} ({})", e.message, e.code),
        }
    }

    /// The `browser/request_cancelled` reason when the server stopped waiting for a
    /// request it had sent (`None` when the client answered or nothing was sent).
    pub fn cancel_reason(&self) -> Option<&'static str> {
        match self {
            CallError::Timeout(_) => Some("timeout"),
            CallError::Interrupted => Some("interrupted"),
            CallError::Closed => Some("shutdown"),
            CallError::NotAdvertised(_) | CallError::Remote(_) => None,
        }
    }
}

/// Outstanding reverse requests: id → waiting caller.
#[derive(Default)]
pub struct Pending {
    next: AtomicU64,
    closed: AtomicBool,
    waiting: Mutex<HashMap<String, ReplyTx<Response>>>,
}

impl Pending {
    /// Sends a reverse request; the reply arrives on the returned receiver (which
    /// disconnects when [`Pending::close_all`] runs). Fails with [`CallError::Closed`]
    /// after shutdown began.
    pub fn send(
        &self,
        shared: &Host,
        method: &str,
        params: serde_json::Value,
    ) -> Result<(String, ReplyRx<Response>), CallError> {
        let id = format!("srv-{}", self.next.fetch_add(1, Ordering::SeqCst) + 1);
        let (tx, rx) = reply();
        {
            let mut waiting = self.waiting.lock();
            if self.closed.load(Ordering::SeqCst) {
                return Err(CallError::Closed);
            }
            waiting.insert(id.clone(), tx);
        }
        let req = Request {
            id: RequestId::String(id.clone()),
            method: method.to_owned(),
            params,
        };
        shared
            .outbox
            .send(serde_json::to_vec(&req).expect("serialize"));
        Ok((id, rx))
    }

    /// Sends `method` and waits for its result (`null` when the client's result was
    /// absent). Errors: [`CallError`]; on `Timeout`/`Interrupted`/`Closed` the request
    /// is forgotten (a late reply is dropped). The method must be advertised.
    pub fn call(
        &self,
        shared: &Host,
        method: &str,
        params: serde_json::Value,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<serde_json::Value, CallError> {
        self.call_watching(shared, method, params, timeout, cancel, cancel)
    }

    /// [`Pending::call`] that also ends with [`CallError::Interrupted`] when `revoked` is
    /// set (a browser activity's lease revoked by a user takeover).
    pub fn call_watching(
        &self,
        shared: &Host,
        method: &str,
        params: serde_json::Value,
        timeout: Duration,
        cancel: &AtomicBool,
        revoked: &AtomicBool,
    ) -> Result<serde_json::Value, CallError> {
        let cancelled = || cancel.load(Ordering::SeqCst) || revoked.load(Ordering::SeqCst);
        if !advertised(shared, method) {
            return Err(CallError::NotAdvertised(method.to_owned()));
        }
        if cancelled() {
            return Err(CallError::Interrupted);
        }
        let (id, rx) = self.send(shared, method, params)?;
        let deadline = Instant::now() + timeout;
        loop {
            if cancelled() {
                self.forget(&id);
                return Err(CallError::Interrupted);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.forget(&id);
                return Err(CallError::Timeout(timeout));
            }
            match rx.recv_timeout(left.min(POLL)) {
                Ok(resp) => {
                    return match resp.error {
                        Some(e) => Err(CallError::Remote(e)),
                        None => Ok(resp.result.unwrap_or(serde_json::Value::Null)),
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(CallError::Closed),
            }
        }
    }

    /// Forgets a request (timeout, cancel); a late reply is then dropped.
    pub fn forget(&self, id: &str) {
        self.waiting.lock().remove(id);
    }

    /// Shutdown: fails every outstanding call with [`CallError::Closed`] and refuses
    /// new ones.
    pub fn close_all(&self) {
        let mut waiting = self.waiting.lock();
        self.closed.store(true, Ordering::SeqCst);
        waiting.clear();
    }

    /// Number of outstanding requests.
    pub fn outstanding(&self) -> usize {
        self.waiting.lock().len()
    }
}

/// Whether the client listed `method` in `capabilities.reverse_rpc.methods`.
pub fn advertised(shared: &Host, method: &str) -> bool {
    shared
        .capabilities
        .read()
        .reverse_rpc
        .as_ref()
        .is_some_and(|r| r.methods.iter().any(|m| m == method))
}

/// The per-call timeout: `agent.reverse_request_timeout_ms`, default [`DEFAULT_TIMEOUT`].
pub fn timeout(shared: &Host) -> Duration {
    shared
        .config()
        .agent()
        .reverse_request_timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT)
}

/// Routes a client's reply to the waiting caller; unknown ids are logged and dropped.
pub fn deliver(shared: &Arc<Host>, resp: Response) {
    let key = match &resp.id {
        Some(RequestId::String(s)) => s.clone(),
        Some(RequestId::Number(n)) => n.to_string(),
        None => return,
    };
    let waiter = shared.reverse.waiting.lock().remove(&key);
    match waiter {
        Some(tx) => {
            let _ = tx.send(resp);
        }
        // A line with an id and no method is a reply to a server request (spec §1.5);
        // one that matches none is dropped, as the spec says, but said so on stderr
        // (a client that forgot `method` would otherwise hear nothing).
        None => log::warn!(
            "dropped a reply for {key:?}: no server request with that id is waiting (unknown or expired; a request needs a `method`)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::MemoryClient;
    use crate::session::ServerOptions;
    use serde_json::json;
    use wuu_protocol::ReverseRpcCapabilities;

    #[test]
    fn calls_end_on_reply_timeout_cancel_and_shutdown() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let mut opts = ServerOptions::new(ws.path().to_path_buf());
        opts.home = home.path().to_path_buf();
        let c = MemoryClient::start(opts).unwrap();
        let shared = c.shared.host.clone();
        shared.capabilities.write().reverse_rpc = Some(ReverseRpcCapabilities {
            methods: vec!["browser/cdp".into()],
        });
        let flag = AtomicBool::new(false);
        let short = Duration::from_millis(50);
        // Not advertised: nothing is sent.
        let r = shared
            .reverse
            .call(&shared, "browser/open_tab", json!({}), short, &flag);
        assert!(matches!(r, Err(CallError::NotAdvertised(_))));
        // A reply reaches the caller.
        let s2 = shared.clone();
        let rx = c.rx.clone();
        let answerer = std::thread::spawn(move || {
            let line = rx.recv().unwrap();
            let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
            assert_eq!(v["method"], "browser/cdp");
            let id = v["id"].as_str().unwrap().to_owned();
            assert!(id.starts_with("srv-"));
            deliver(
                &s2,
                Response::ok(RequestId::String(id), json!({"result": 7})),
            );
        });
        let r = shared.reverse.call(
            &shared,
            "browser/cdp",
            json!({}),
            Duration::from_secs(10),
            &flag,
        );
        answerer.join().unwrap();
        assert_eq!(r, Ok(json!({"result": 7})));
        // No reply: timeout, and the request is forgotten.
        let r = shared
            .reverse
            .call(&shared, "browser/cdp", json!({}), short, &flag);
        assert!(matches!(r, Err(CallError::Timeout(_))));
        assert_eq!(shared.reverse.outstanding(), 0);
        // Cancelled.
        flag.store(true, Ordering::SeqCst);
        let r = shared
            .reverse
            .call(&shared, "browser/cdp", json!({}), short, &flag);
        assert_eq!(r, Err(CallError::Interrupted));
        // Shutdown fails waiting calls and refuses new ones.
        let s3 = shared.clone();
        let waiter = std::thread::spawn(move || {
            let never = AtomicBool::new(false);
            s3.reverse.call(
                &s3,
                "browser/cdp",
                json!({}),
                Duration::from_secs(30),
                &never,
            )
        });
        while shared.reverse.outstanding() == 0 {
            std::thread::sleep(Duration::from_millis(5));
        }
        shared.reverse.close_all();
        assert_eq!(waiter.join().unwrap(), Err(CallError::Closed));
        let never = AtomicBool::new(false);
        let r = shared
            .reverse
            .call(&shared, "browser/cdp", json!({}), short, &never);
        assert_eq!(r, Err(CallError::Closed));
        drop(shared);
        c.close();
    }
}
