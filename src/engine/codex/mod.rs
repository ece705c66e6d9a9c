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
//!
//! Modules: `host` (the shared child), `env` (its environment), `models` (model
//! discovery), `thread` (the native thread), `turn` (the turn loop), `projection`
//! (notifications → engine events), `approvals` (server requests), [`rpc`] (the
//! JSON-RPC peer).

mod approvals;
mod env;
mod host;
mod models;
mod projection;
pub mod rpc;
mod thread;
mod turn;

pub use super::child::ChildSettings;
pub use env::{child_env, CODEX_ENV};
pub use host::{shared_host, start, Host};
pub use models::{discover_models, model_info};
pub use turn::{native_input, permissions};

use super::{Control, Engine, EventSink, Outcome, Steering, TurnRequest};
use crossbeam_channel::Receiver;
use rpc::RpcError;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The engine id.
pub const ID: &str = "codex";
/// Handshake limit.
pub const INIT_TIMEOUT: Duration = Duration::from_secs(30);
/// Limit of one control request (thread/start, turn/start, …).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an interrupted turn may take to report its end.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);

/// A failed turn of category `engine`, provider `codex`, with `code`.
fn failure(message: impl Into<String>, code: &str) -> Outcome {
    Outcome::engine_failure(ID, message, code)
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
        let thread_id = match self.open_thread(&req, &host, sink, sandbox, approval) {
            Ok(t) => t,
            Err(end) => return end,
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
}
