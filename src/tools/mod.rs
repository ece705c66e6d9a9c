//! Tools of the built-in engine: `bash`, `read_file`, `write_file`, `edit_file`,
//! `apply_patch`, `list_files`, `grep`, `glob`, `todo_write`.
//!
//! A tool call runs on its own helper thread ([`spawn`]) and reports over a bounded
//! channel ([`ToolEvent`]), so the session thread can `select!` over tool output and its
//! mailbox: an interrupt is seen while a command runs, and [`ToolHandle::cancel`] kills
//! the command's whole process group (TERM, then KILL after a grace period).

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// Permission modes (issue 3 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// No writes; `bash` refused.
    ReadOnly,
    /// Writes only inside the workspace (canonical paths; symlink escapes refused).
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
    /// workspace_revision}`; apply_patch: `{files: [...]}`; bash: `{exit_code, …}`;
    /// todo_write: `{todos}`).
    pub detail: Value,
}
