//! OpenCode as an external engine: `opencode serve` spoken to over HTTP and SSE (spec
//! `engines.md` §1.7, §1.8).
//!
//! One server child per binary path, shared (weakly, by reference count) by every
//! conversation bound to OpenCode: `opencode serve --hostname 127.0.0.1 --port 0` with a
//! new random basic-auth password and `OPENCODE_CONFIG_CONTENT` (the user's, with
//! sharing and auto-update off), ready when it prints its listening line and
//! `/global/health` answers a 1.x version. One SSE reader thread per server reads
//! `/global/event` and routes each event by its native session id to the turn that
//! listens for it ([`server`]). Per conversation the first turn creates the native
//! session (`POST /session`) and persists its id as the conversation's `engine_ref`
//! before the turn proceeds; later turns, and turns after a restart, `PATCH` it (a
//! session the server no longer has is replaced by a new one, with a notice). Every
//! turn re-applies the `ask` rule for every permission, so the host decides each one
//! ([`turn`]). A turn posts the newest user input (`POST /session/<id>/message`, which
//! answers when the native turn ends) and maps the session's events to engine events
//! ([`projection`]); its permission requests and its own questions become user
//! questions (permissions are accepted without asking in `unconfined`; no answer
//! rejects). `turn/interrupt` is `POST
//! /session/<id>/abort`. OpenCode takes no input while its turn runs: steers are queued
//! and run as the next turn.

mod projection;
mod server;
mod turn;

pub use server::{shared_server, Server};

use super::child::{build_env, ChildSettings, Watch};
use super::{Control, Engine, EventSink, Outcome, Steering, TurnRequest};
use crossbeam_channel::Receiver;
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The engine id.
pub const ID: &str = "opencode";
/// How long a new server may take to print its listening line, and the limit of each
/// setup request (health, session).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long an interrupted turn may take to end after the abort before the server is
/// given up on.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(10);
/// Largest response body or SSE event read (16 MiB).
pub const MAX_BODY: usize = 16 * 1024 * 1024;
/// The basic-auth user name of the server.
pub const USERNAME: &str = "wuu";

/// OpenCode's own variables (besides the shared base, `engine::child::BASE_ENV`): where
/// it reads its configuration and switches (no secrets; provider keys pass only when
/// `agent.shell_env.keep` names them). `OPENCODE_CONFIG_CONTENT` and the server
/// credentials are set by us.
pub const OPENCODE_ENV: &[&str] = &[
    "OPENCODE_CONFIG",
    "OPENCODE_CONFIG_DIR",
    "OPENCODE_DISABLE_MODELS_FETCH",
    "OPENCODE_DISABLE_AUTOUPDATE",
    "OPENCODE_DISABLE_LSP_DOWNLOAD",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS",
    "OPENCODE_DISABLE_CLAUDE_CODE",
    "OPENCODE_MODELS_URL",
];

/// The launch arguments after the binary.
pub fn launch_args() -> Vec<String> {
    ["serve", "--hostname", "127.0.0.1", "--port", "0"]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// `OPENCODE_CONFIG_CONTENT` for the child: `inherited` (ours, which must be a JSON
/// object when set) with `share: "disabled"` and `autoupdate: false`. Errors: the
/// inherited value is not a JSON object.
pub fn config_content(inherited: Option<&str>) -> Result<String, String> {
    let mut cfg = match inherited.map(str::trim).filter(|s| !s.is_empty()) {
        None => serde_json::Map::new(),
        Some(raw) => match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            _ => return Err("OPENCODE_CONFIG_CONTENT must be a JSON object".into()),
        },
    };
    cfg.insert("share".into(), Value::String("disabled".into()));
    cfg.insert("autoupdate".into(), Value::Bool(false));
    Ok(Value::Object(cfg).to_string())
}

/// The whole environment of an OpenCode server child, built rather than inherited: the
/// shared base, [`OPENCODE_ENV`], what `agent.shell_env.keep` names, the server
/// credentials and the merged configuration. Errors: see [`config_content`].
pub fn child_env(
    binary: &Path,
    settings: &ChildSettings,
    password: &str,
) -> Result<Vec<(OsString, OsString)>, String> {
    let own: Vec<String> = OPENCODE_ENV.iter().map(|s| s.to_string()).collect();
    let content = config_content(std::env::var("OPENCODE_CONFIG_CONTENT").ok().as_deref())?;
    let mut env = build_env(binary, settings, &own);
    env.retain(|(k, _)| {
        !matches!(
            k.to_str(),
            Some("OPENCODE_SERVER_USERNAME" | "OPENCODE_SERVER_PASSWORD")
        )
    });
    env.push(("OPENCODE_SERVER_USERNAME".into(), USERNAME.into()));
    env.push(("OPENCODE_SERVER_PASSWORD".into(), password.into()));
    env.push(("OPENCODE_CONFIG_CONTENT".into(), content.into()));
    Ok(env)
}

/// A failed turn of category `engine`, provider `opencode`, with `code`.
fn failure(message: impl Into<String>, code: &str) -> Outcome {
    Outcome::engine_failure(ID, message, code)
}

/// A conversation's OpenCode session: the shared server reference (the native session
/// id is the conversation's `engine_ref`, handed in with each turn).
pub struct OpenCodeEngine {
    binary: PathBuf,
    settings: ChildSettings,
    server: Option<Arc<Server>>,
}

impl OpenCodeEngine {
    /// An engine session for `binary` (nothing starts until the first turn; a server
    /// it starts gets `settings`).
    pub fn new(binary: PathBuf, settings: ChildSettings) -> Self {
        OpenCodeEngine {
            binary,
            settings,
            server: None,
        }
    }

    fn server(&mut self, root: &Path, watch: &Watch) -> Result<Arc<Server>, String> {
        if let Some(s) = &self.server {
            if !s.is_dead() {
                return Ok(s.clone());
            }
        }
        self.server = None;
        let s = shared_server(&self.binary, root, &self.settings, Some(watch))?;
        self.server = Some(s.clone());
        Ok(s)
    }
}

impl Engine for OpenCodeEngine {
    fn id(&self) -> &str {
        ID
    }

    fn steering(&self) -> Steering {
        Steering::Queued
    }

    fn run_turn(
        &mut self,
        req: TurnRequest,
        sink: &EventSink,
        controls: &Receiver<Control>,
    ) -> Outcome {
        if req.permission_mode == crate::tools::PermissionMode::ReadOnly {
            return failure(
                "OpenCode has no read-only mode that keeps Wuu's read-only boundary; choose standard or unconfined",
                "permission_mode_unsupported",
            );
        }
        if req.input.prompt.trim().is_empty()
            && req.input.images.is_empty()
            && req.input.files.is_empty()
        {
            return failure(
                "an OpenCode turn needs a user message (continuing without one is not supported)",
                "engine_input_missing",
            );
        }
        let watch = Watch::new(controls, sink);
        let server = match self.server(&req.workspace_root, &watch) {
            Ok(s) => s,
            Err(_) if watch.interrupted() => return Outcome::Interrupted,
            Err(e) => return failure(e, "engine_unavailable"),
        };
        let outcome = turn::run(&server, req, sink, controls);
        if server.is_dead() {
            self.server = None;
        }
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_content_keeps_the_users_and_turns_sharing_off() {
        let c: Value = serde_json::from_str(
            &config_content(Some(r#"{"model":"a/b","share":"auto"}"#)).unwrap(),
        )
        .unwrap();
        assert_eq!(c["model"], "a/b");
        assert_eq!(c["share"], "disabled");
        assert_eq!(c["autoupdate"], false);
        assert!(config_content(Some("[1]")).is_err());
        assert!(config_content(Some("not json")).is_err());
        assert!(config_content(None).is_ok());
    }
}
