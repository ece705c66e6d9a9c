//! Tools of the built-in engine: `bash`, `read_file`, `write_file`, `edit_file`,
//! `apply_patch`, `list_files`, `grep`, `glob`, `todo_write`, `process` (background
//! processes, see [`background`]).
//!
//! A tool call runs on its own helper thread ([`spawn`]) and reports over a bounded
//! channel ([`ToolEvent`]), so the session thread can `select!` over tool output and its
//! mailbox: an interrupt is seen while a command runs, and [`ToolHandle::cancel`] kills
//! the command's whole process group (TERM, then KILL after a grace period).
//!
//! # Results
//!
//! Every call ends with one [`ToolOutcome`]: `output` is what the model sees (short
//! human text), `detail` is structured:
//!
//! | tool | `detail` |
//! | --- | --- |
//! | `bash` | `{exit_code: int\|null, signal?: int, timed_out, interrupted, stdout_bytes, stderr_bytes, spill_path?, lossy_utf8, duration_ms}` |
//! | `read_file` | `{path, total_lines, first_line, last_line, lossy_utf8}` |
//! | `write_file`, `edit_file` | `{path, action: "created"\|"modified", old_file_sha, new_file_sha, workspace_revision, lines_added, lines_removed}` |
//! | `apply_patch` | `{files: [{path, move_path?, action: "created"\|"modified"\|"deleted"\|"moved", old_file_sha, new_file_sha, lines_added, lines_removed}], workspace_revision}` |
//! | `list_files` | `{entries, truncated, depth}` |
//! | `grep` | `{matches, files, truncated}` |
//! | `glob` | `{count, truncated}` |
//! | `todo_write` | `{todos: [{content, status}]}` |
//! | `bash` with `run_in_background` | `{process_id, pid, background: true, tty}` |
//! | `process` | `{action, processes}` (list) or `{action, process, start_offset?, end_offset?, total_bytes?, truncated?, bytes_written?}` |
//!
//! Errors have `is_error` and `detail: null`. Hashes are lowercase hex SHA-256 of the
//! file bytes (`""` when the file is absent). `path`/`move_path` are relative to the
//! workspace root when inside it, else absolute. `workspace_revision` is described in
//! `revision.rs`: hex SHA-256 over a per-workspace write counter and the sorted
//! `(path, current sha)` set of files the tools changed in this process; it changes with
//! every successful file-tool write.
//!
//! `bash` is `is_error` when the exit code is not 0, the command was killed by a signal,
//! timed out, or was interrupted. Each stream keeps at most
//! [`ToolContext::output_cap_bytes`] bytes inline (first half and last half of the cap,
//! with an omission marker between); once a stream exceeds the cap, the complete output
//! of both streams (in arrival order) goes to `<spill_dir>/bash-<uuid>.log`, named in
//! the output and in `detail.spill_path`.
//!
//! # Permission modes
//!
//! * `read_only`: `write_file`, `edit_file`, `apply_patch` are refused; reads
//!   (`read_file`, `list_files`, `grep`, `glob`) only inside the workspace; `bash` runs in
//!   a read-only sandbox (it may write only its private temp dir, see `sandbox`).
//! * `standard`: file paths (read and write) and `bash`'s `workdir` must lie inside the
//!   workspace root; every file operation is resolved beneath the root by the kernel
//!   (`beneath`), so `..`, symlinks and symlinks swapped in mid-call cannot lead out, and
//!   writes replace files atomically (a hard-linked name is replaced, its other names are
//!   untouched). `bash` runs in the sandbox: it writes only inside the workspace, its temp
//!   dir and the spill dir, and reads only those plus system and toolchain directories.
//!   Without Landlock, `bash` is refused in both confined modes (fail closed).
//! * `unconfined`: anything (commands still die with the host).
//!
//! Commands never see the provider keys: see [`sandbox::command_env`] for the scrubbed
//! environment.
//!
//! A refusal is `ToolOutcome{is_error: true, permission_denied: true, output:
//! "permission denied: …"}`. [`specs`] lists all tools in every mode.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// A thread's permission mode (`permission_mode`, spec `app-server.md`): what the tools
/// may do, enforced as the module docs describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// No writes; `bash` runs in a read-only sandbox.
    ReadOnly,
    /// Writes only inside the workspace (kernel-resolved paths; commands sandboxed).
    #[default]
    Standard,
    /// Anything.
    Unconfined,
}

impl PermissionMode {
    /// Parses `read_only` | `standard` | `unconfined`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read_only" => Some(Self::ReadOnly),
            "standard" => Some(Self::Standard),
            "unconfined" => Some(Self::Unconfined),
            _ => None,
        }
    }
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read_only",
            Self::Standard => "standard",
            Self::Unconfined => "unconfined",
        }
    }
}

/// Where and how a tool call runs.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// Canonical workspace root.
    pub workspace_root: PathBuf,
    /// Working directory for relative paths and commands (inside the workspace).
    pub cwd: PathBuf,
    /// Permission mode of the conversation.
    pub permission_mode: PermissionMode,
    /// Directory for spilled command output (created on demand).
    pub spill_dir: PathBuf,
    /// Default `bash` timeout in ms when the call gives none.
    pub default_timeout_ms: u64,
    /// Bytes of each output stream kept inline in the result.
    pub output_cap_bytes: usize,
    /// The conversation's private temp dir for commands (`TMPDIR`; created on demand,
    /// writable in every mode).
    pub temp_dir: PathBuf,
    /// Extra sandbox roots and the command environment rules.
    pub sandbox: sandbox::SandboxSettings,
    /// The conversation's background processes (`None`: `run_in_background` and the
    /// `process` tool are refused).
    pub background: Option<std::sync::Arc<background::Processes>>,
    /// Concurrent background processes allowed per conversation.
    pub max_background: usize,
}

/// One event of a running tool call.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolEvent {
    /// Output as it streams (`stream` = `stdout` | `stderr`).
    Output {
        /// Which stream.
        stream: &'static str,
        /// Text (lossily decoded UTF-8).
        text: String,
    },
    /// The call finished. Always the last event.
    Done(ToolOutcome),
}

/// The result of a tool call.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutcome {
    /// What the model sees.
    pub output: String,
    /// The call failed (the model sees `output` as an error).
    pub is_error: bool,
    /// The call was refused by the permission mode (recorded on the turn).
    pub permission_denied: bool,
    /// Structured result (file tools: `{path, action, old_file_sha, new_file_sha,
    /// workspace_revision}`; apply_patch: `{files: [...], workspace_revision}`; bash:
    /// `{exit_code, …}`; todo_write: `{todos}`; see the module docs). `null` on errors.
    pub detail: Value,
}

// ---------------------------------------------------------------------------------------
// Tool surface: names, specs, spawning.
// ---------------------------------------------------------------------------------------

mod args;
pub mod background;
mod background_tool;
mod diffstat;
mod files;
mod patch;
mod paths;
pub mod process;
mod revision;
pub mod sandbox;
mod search;
mod shell;
pub mod skill;
pub mod terminal;
mod todo;

#[cfg(test)]
mod tests;

use crate::provider::chat::ToolSpec;
use crossbeam_channel::{Receiver, Sender};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Capacity of a call's [`ToolHandle::events`] channel. The helper blocks when it is full
/// (backpressure); output is never dropped.
pub const EVENT_CAPACITY: usize = 256;

/// Grace period between SIGTERM and SIGKILL when a command's process group is killed
/// (timeout, [`ToolHandle::cancel`], or leftovers after the main child exited).
pub const KILL_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// While a killed command waits out [`KILL_GRACE`], what is left of it gets `SIGTERM`
/// again this often: a process that missed the first (forked while it was sent) or
/// ignored only the first ends without waiting for `SIGKILL`.
pub const TERM_AGAIN: std::time::Duration = std::time::Duration::from_millis(200);

/// Names of all built-in tools, in the order [`specs`] lists them.
pub const TOOL_NAMES: [&str; 10] = [
    "bash",
    "read_file",
    "write_file",
    "edit_file",
    "apply_patch",
    "list_files",
    "grep",
    "glob",
    "todo_write",
    "process",
];

/// The tool specs offered to the model: exact names, descriptions and JSON-Schema
/// parameters (`{"type":"object","properties":{…},"required":[…]}`).
///
/// Every mode lists all ten tools, so the tool surface (and the provider's prompt
/// cache) stays stable when the mode changes; in `read_only` mode the descriptions of
/// `bash`, `write_file`, `edit_file` and `apply_patch` say they are disabled, and calls
/// to them are refused at call time with `permission_denied`.
pub fn specs(mode: PermissionMode) -> Vec<ToolSpec> {
    args::specs(mode)
}

/// [`specs`] as one shared list, built once per process and mode.
pub fn shared_specs(mode: PermissionMode) -> crate::provider::chat::Tools {
    static BY_MODE: [std::sync::OnceLock<crate::provider::chat::Tools>; 3] =
        [const { std::sync::OnceLock::new() }; 3];
    let slot = match mode {
        PermissionMode::ReadOnly => 0,
        PermissionMode::Standard => 1,
        PermissionMode::Unconfined => 2,
    };
    BY_MODE[slot].get_or_init(|| specs(mode).into()).clone()
}

/// Whether a tool is "at most once": its effect must not be repeated when its outcome
/// is unknown (e.g. the host crashed mid-call). True for `bash`, `process`,
/// `write_file`, `edit_file` and `apply_patch`; false for everything else (including
/// unknown names).
pub fn is_at_most_once(name: &str) -> bool {
    matches!(
        name,
        "bash" | "process" | "write_file" | "edit_file" | "apply_patch"
    )
}

/// A running tool call, returned by [`spawn`].
///
/// Read [`ToolHandle::events`] until [`ToolEvent::Done`] (always the last event; the
/// channel disconnects right after it). Dropping the handle without [`ToolHandle::cancel`]
/// lets the call run to its end (a command runs until it exits or times out); its
/// process group is still killed when the call ends, and events that cannot be delivered
/// are discarded.
#[derive(Debug)]
pub struct ToolHandle {
    /// Events of the call, bounded by [`EVENT_CAPACITY`]: zero or more
    /// [`ToolEvent::Output`] (only `bash` streams output), then exactly one
    /// [`ToolEvent::Done`].
    pub events: Receiver<ToolEvent>,
    cancel: Arc<AtomicBool>,
}

impl ToolHandle {
    /// Interrupts the call. A running command's whole process group gets SIGTERM, then
    /// SIGKILL after [`KILL_GRACE`]; the call then ends with `Done` (`is_error`,
    /// output mentions "interrupted", `detail.interrupted == true`). Walking tools
    /// (`grep`, `glob`, `list_files`) stop early with the same kind of result. Calls that
    /// already finished, or the quick file tools, are unaffected. Idempotent; never
    /// blocks.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// Whether [`ToolHandle::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// A handle over an event channel fed by another executor (tools served by the
    /// client through reverse requests); `cancel` is set by [`ToolHandle::cancel`].
    pub fn from_parts(events: Receiver<ToolEvent>, cancel: Arc<AtomicBool>) -> ToolHandle {
        ToolHandle { events, cancel }
    }
}

/// Cancellation flag shared between a [`ToolHandle`] and its helper thread.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cancel(Arc<AtomicBool>);

impl Cancel {
    pub(crate) fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Starts one tool call on a helper thread and returns at once.
///
/// `name` is a tool name from [`TOOL_NAMES`]; `arguments` is the JSON object text the
/// model sent (an empty string counts as `{}`). Unknown names, malformed JSON, missing or
/// mistyped fields end the call with an `is_error` [`ToolOutcome`] whose output tells
/// the model what to fix; refusals by [`ToolContext::permission_mode`] end with
/// `permission_denied`. The helper never panics through: a panic inside a tool becomes
/// an error outcome.
pub fn spawn(name: &str, arguments: &str, ctx: ToolContext) -> ToolHandle {
    let (tx, rx) = crossbeam_channel::bounded(EVENT_CAPACITY);
    let cancel = Cancel::default();
    let handle = ToolHandle {
        events: rx,
        cancel: cancel.0.clone(),
    };
    let name_owned = name.to_string();
    let arguments = arguments.to_string();
    let tx_thread = tx.clone();
    let spawned = crate::util::spawn(format!("tool-{}", sanitize_thread_name(name)), move || {
        let outcome = run_guarded(&name_owned, &arguments, &ctx, &cancel, &tx_thread);
        let _ = tx_thread.send(ToolEvent::Done(outcome));
    });
    if let Err(e) = spawned {
        log::error!("tools: cannot start helper thread for {name}: {e}");
        let _ = tx.send(ToolEvent::Done(ToolOutcome::error(format!(
            "internal error: cannot start tool thread: {e}"
        ))));
    }
    handle
}

/// Runs a call on the current thread, catching panics.
fn run_guarded(
    name: &str,
    arguments: &str,
    ctx: &ToolContext,
    cancel: &Cancel,
    events: &Sender<ToolEvent>,
) -> ToolOutcome {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run(name, arguments, ctx, cancel, events)
    }));
    let mut outcome = match result {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(fail)) => fail.into(),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            log::error!("tools: {name} panicked: {msg}");
            ToolOutcome::error(format!("internal error in {name}: {msg}"))
        }
    };
    // What the model (and every surface after it) sees never holds a configured secret.
    outcome.output = crate::secrets::redact_string(std::mem::take(&mut outcome.output));
    outcome
}

fn run(
    name: &str,
    arguments: &str,
    ctx: &ToolContext,
    cancel: &Cancel,
    events: &Sender<ToolEvent>,
) -> Result<ToolOutcome, Fail> {
    match name {
        "bash" => shell::run(args::parse(name, arguments)?, ctx, cancel, events),
        "read_file" => files::read_file(args::parse(name, arguments)?, ctx),
        "write_file" => files::write_file(args::parse(name, arguments)?, ctx),
        "edit_file" => files::edit_file(args::parse(name, arguments)?, ctx),
        "apply_patch" => patch::run(args::parse(name, arguments)?, ctx),
        "list_files" => search::list_files(args::parse(name, arguments)?, ctx, cancel),
        "grep" => search::grep(args::parse(name, arguments)?, ctx, cancel),
        "glob" => search::glob(args::parse(name, arguments)?, ctx, cancel),
        "todo_write" => todo::run(args::parse(name, arguments)?),
        "process" => background_tool::run(args::parse(name, arguments)?, ctx, cancel),
        _ => Err(Fail::Error(format!(
            "unknown tool `{name}`; available tools: {}",
            TOOL_NAMES.join(", ")
        ))),
    }
}

fn sanitize_thread_name(name: &str) -> String {
    name.chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(32)
        .collect()
}

/// Why a call failed before producing its own outcome.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Fail {
    /// Refused by the permission mode (message without the `permission denied:` prefix).
    Denied(String),
    /// Any other error, shown to the model as is.
    Error(String),
}

impl From<Fail> for ToolOutcome {
    fn from(f: Fail) -> Self {
        match f {
            Fail::Denied(msg) => ToolOutcome {
                output: format!("permission denied: {msg}"),
                is_error: true,
                permission_denied: true,
                detail: Value::Null,
            },
            Fail::Error(msg) => ToolOutcome::error(msg),
        }
    }
}

impl ToolOutcome {
    /// A successful outcome with `output` for the model and structured `detail`.
    pub fn ok(output: impl Into<String>, detail: Value) -> Self {
        Self {
            output: output.into(),
            is_error: false,
            permission_denied: false,
            detail,
        }
    }

    /// An error outcome (`is_error`, not a permission refusal, `detail` = null).
    pub fn error(output: impl Into<String>) -> Self {
        Self {
            output: output.into(),
            is_error: true,
            permission_denied: false,
            detail: Value::Null,
        }
    }
}
