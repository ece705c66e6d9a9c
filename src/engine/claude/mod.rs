//! Claude Code as an external engine: `claude -p` in headless stream-json mode, one
//! child per turn (spec `engines.md` §1.5, §1.8, §1.10).
//!
//! Each turn starts `claude -p --input-format stream-json --output-format stream-json
//! --verbose --include-partial-messages --permission-mode <mode> --permission-prompt-tool
//! stdio [--model M] [--effort E] [--append-system-prompt I] [--resume <session_id>]` in
//! the conversation's directory, writes the newest user message as one `user` line and
//! keeps stdin open for control messages (permission answers, the interrupt) until the
//! turn's `result` line; then stdin closes and the child exits. One child per turn, as
//! the Go original does: the native session lives in Claude's own transcript, so a turn
//! after a restart is no different from any other (`--resume` with the `session_id`
//! persisted as the conversation's `engine_ref` the moment the first `system` line names
//! it), a crashed child never outlives its turn, and no idle process is kept per
//! conversation. Claude takes no input while its turn runs: steers are queued and run
//! as the next turn ([`Steering::Queued`]).
//!
//! Modules: `turn` (the child and the turn loop, one reader thread per child),
//! `projection` (stdout lines → engine events), `questions` (`can_use_tool` control
//! requests, `AskUserQuestion` included → user questions).

mod projection;
mod questions;
mod turn;

use super::child::{build_env, ChildSettings};
use super::{Control, Engine, EventSink, Outcome, Steering, TurnRequest};
use crate::tools::PermissionMode;
use crossbeam_channel::Receiver;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The engine id.
pub const ID: &str = "claude";
/// How long a new child may stay silent before the turn fails (it prints its `system`
/// line before any model request).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an interrupted turn may take to end after the `interrupt` control request
/// before the child is killed.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);
/// How long a child may take to exit after its `result` and the end of its input.
pub const EXIT_GRACE: Duration = Duration::from_secs(3);
/// Longest stdout line read (larger lines are skipped with a log line).
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// Claude Code's own variables (besides the shared base, `engine::child::BASE_ENV`):
/// its credentials and endpoint (`ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL`), where it
/// keeps its login, settings and transcripts (`CLAUDE_CONFIG_DIR`), and its switches
/// for updates and outside traffic (no secrets).
pub const CLAUDE_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CONFIG_DIR",
    "DISABLE_AUTOUPDATER",
    "DISABLE_TELEMETRY",
    "DISABLE_ERROR_REPORTING",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
];

/// The whole environment of a Claude Code child, built rather than inherited: the
/// shared base, [`CLAUDE_ENV`] and what `agent.shell_env.keep` names.
pub fn child_env(binary: &Path, settings: &ChildSettings) -> Vec<(OsString, OsString)> {
    let own: Vec<String> = CLAUDE_ENV.iter().map(|s| s.to_string()).collect();
    build_env(binary, settings, &own)
}

/// The permission mapping (`engines.md` §1.8): `read_only` → `plan`, `unconfined` →
/// `bypassPermissions`, `standard` → `default` with Claude's permission prompts
/// answered by the user through `user-question/*` (denied when no client can answer).
pub fn permission_mode(mode: PermissionMode) -> &'static str {
    match mode {
        PermissionMode::ReadOnly => "plan",
        PermissionMode::Unconfined => "bypassPermissions",
        PermissionMode::Standard => "default",
    }
}

/// Effort levels `claude --effort` takes.
const EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];

/// The command line of a turn (after the binary).
pub fn args(req: &TurnRequest) -> Vec<String> {
    let mut a: Vec<String> = [
        "-p",
        "--input-format",
        "stream-json",
        "--output-format",
        "stream-json",
        "--verbose",
        "--include-partial-messages",
        "--permission-prompt-tool",
        "stdio",
        "--permission-mode",
        permission_mode(req.permission_mode),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if let Some(i) = req.instructions.as_deref().filter(|i| !i.trim().is_empty()) {
        a.extend(["--append-system-prompt".into(), i.to_owned()]);
    }
    if !req.model.trim().is_empty() {
        a.extend(["--model".into(), req.model.trim().to_owned()]);
    }
    if EFFORTS.contains(&req.effort.as_str()) {
        a.extend(["--effort".into(), req.effort.clone()]);
    }
    if let Some(r) = req.engine_ref.as_deref().filter(|r| !r.is_empty()) {
        a.extend(["--resume".into(), r.to_owned()]);
    }
    a
}

/// A failed turn of category `engine`, provider `claude`, with `code`.
fn failure(message: impl Into<String>, code: &str) -> Outcome {
    Outcome::engine_failure(ID, message, code)
}

/// A conversation's Claude Code session: the binary and how its children start (the
/// native session id is the conversation's `engine_ref`, handed in with each turn).
pub struct ClaudeEngine {
    binary: PathBuf,
    settings: ChildSettings,
}

impl ClaudeEngine {
    /// An engine session for `binary` (a child starts with each turn, with
    /// `settings`).
    pub fn new(binary: PathBuf, settings: ChildSettings) -> Self {
        ClaudeEngine { binary, settings }
    }
}

impl Engine for ClaudeEngine {
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
        turn::run(&self.binary, &self.settings, req, sink, controls)
    }
}

/// The trimmed output of `claude --version` (e.g. `2.1.332 (Claude Code)`), run with
/// the built environment and a 5 s limit, cached per binary path, size and mtime.
/// `None` when it fails.
pub fn version(binary: &Path, settings: &ChildSettings) -> Option<String> {
    /// Per binary: its stamp (size, mtime) and the version it reported.
    type Versions = Mutex<HashMap<PathBuf, (String, Option<String>)>>;
    static CACHE: OnceLock<Versions> = OnceLock::new();
    let stamp = std::fs::metadata(binary)
        .map(|m| {
            use std::os::unix::fs::MetadataExt;
            format!("{}:{}:{}", m.size(), m.mtime(), m.mtime_nsec())
        })
        .unwrap_or_default();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some((s, v)) = cache.lock().get(binary) {
        if *s == stamp {
            return v.clone();
        }
    }
    let v = probe_version(binary, settings);
    cache
        .lock()
        .insert(binary.to_path_buf(), (stamp, v.clone()));
    v
}

fn probe_version(binary: &Path, settings: &ChildSettings) -> Option<String> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    let mut child = std::process::Command::new(binary)
        .arg("--version")
        .env_clear()
        .envs(child_env(binary, settings))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .ok()?;
    let mut out = child.stdout.take()?;
    let (tx, rx) = crossbeam_channel::bounded(1);
    let _ = crate::util::spawn("claude-version".into(), move || {
        let mut buf = Vec::new();
        let _ = (&mut out).take(4096).read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    let buf = rx.recv_timeout(Duration::from_secs(5)).ok();
    if buf.is_none() {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }
    let status = child.wait().ok()?;
    let text = String::from_utf8_lossy(&buf?).trim().to_owned();
    (status.success() && !text.is_empty()).then(|| crate::util::clip(&text, 100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_modes_map_to_claude_modes() {
        assert_eq!(permission_mode(PermissionMode::ReadOnly), "plan");
        assert_eq!(permission_mode(PermissionMode::Standard), "default");
        assert_eq!(
            permission_mode(PermissionMode::Unconfined),
            "bypassPermissions"
        );
    }
}
