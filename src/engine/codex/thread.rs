//! The native thread of a conversation (spec `engines.md` §1.4): the first turn creates
//! it (`thread/start`) and persists its id as the conversation's `engine_ref` before the
//! turn proceeds; a turn on a new host (or after a restart) reopens it
//! (`thread/resume`); a turn on the same host reuses the loaded thread.

use super::host::Host;
use super::rpc::Peer;
use super::{failure, CodexEngine, CALL_TIMEOUT};
use crate::engine::{EngineEvent, EventSink, Outcome, TurnRequest};
use serde_json::{json, Value};
use std::path::Path;

impl CodexEngine {
    /// Opens (or reopens on this host) the native thread of `req` with the thread's
    /// `sandbox` and `approval` policy; returns its id, or how the turn ended.
    pub(super) fn open_thread(
        &mut self,
        req: &TurnRequest,
        host: &Host,
        sink: &EventSink,
        sandbox: &str,
        approval: &str,
    ) -> Result<String, Outcome> {
        let peer = &host.peer;
        let cwd = req.cwd.to_string_lossy().into_owned();
        let loaded = self
            .loaded
            .as_ref()
            .filter(|(t, g)| *g == host.generation && Some(t) == req.engine_ref.as_ref())
            .map(|(t, _)| t.clone());
        if let Some(t) = loaded {
            return Ok(t);
        }
        let mut config = json!({});
        if !questions_disabled(peer, &req.cwd) {
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
            Err(e) => return Err(self.rpc_failure(method, e)),
        };
        let Some(id) = answer
            .pointer("/thread/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
        else {
            return Err(failure(
                format!("codex {method} answered without a thread id"),
                "engine_protocol",
            ));
        };
        if created || req.engine_ref.as_deref() != Some(id.as_str()) {
            match sink.call(|reply| EngineEvent::PersistRef {
                engine_ref: id.clone(),
                reply,
            }) {
                Some(Ok(())) => {}
                Some(Err(e)) => return Err(failure(e, "engine_ref_not_stored")),
                None => return Err(Outcome::Interrupted),
            }
        }
        self.loaded = Some((id.clone(), host.generation));
        Ok(id)
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
