//! Requests from the server to the client (reverse RPC, spec `app-server.md` §1.5):
//! server-minted ids `srv-<n>`, replies routed back by the reader thread.

use crate::server::Shared;
use crossbeam_channel::{bounded, Receiver, Sender};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use wuu_protocol::{Request, RequestId, Response};

/// The six base browser reverse methods (seed: hosted browser requests).
pub const BROWSER_METHODS: &[&str] = &[
    "browser/cdp",
    "browser/screenshot",
    "browser/open_tab",
    "browser/close_tab",
    "browser/set_visibility",
    "browser/list_tabs",
];

/// Outstanding reverse requests: id → waiting caller.
#[derive(Default)]
pub struct Pending {
    next: AtomicU64,
    waiting: Mutex<HashMap<String, Sender<Response>>>,
}

impl Pending {
    /// Sends a reverse request; the reply arrives on the returned receiver.
    pub fn send(
        &self,
        shared: &Shared,
        method: &str,
        params: serde_json::Value,
    ) -> (String, Receiver<Response>) {
        let id = format!("srv-{}", self.next.fetch_add(1, Ordering::SeqCst) + 1);
        let (tx, rx) = bounded(1);
        self.waiting.lock().insert(id.clone(), tx);
        let req = Request {
            id: RequestId::String(id.clone()),
            method: method.to_owned(),
            params,
        };
        shared
            .outbox
            .send(serde_json::to_vec(&req).expect("serialize"));
        (id, rx)
    }

    /// Forgets a request (timeout, cancel); a late reply is then dropped.
    pub fn forget(&self, id: &str) {
        self.waiting.lock().remove(id);
    }
}

/// Routes a client's reply to the waiting caller; unknown ids are logged and dropped.
pub fn deliver(shared: &Arc<Shared>, resp: Response) {
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
        None => log::debug!("reply for unknown or expired reverse request {key}"),
    }
}
