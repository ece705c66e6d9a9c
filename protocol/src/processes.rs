//! `process/*`: a conversation's background processes (spec `app-server.md` §3.7; the
//! shapes of the Go original's `ManagedProcessSummary` and `Process*Params/Result`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One background process as clients see it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ManagedProcessSummary {
    /// Process id (`bp_…`).
    pub id: String,
    /// `main_agent`: started by the conversation's model.
    pub owner_kind: String,
    /// The conversation id.
    pub owner_id: String,
    /// `background`.
    pub lifecycle: String,
    /// `running` | `stopping` | `exited` (ended by itself, or with its host) |
    /// `stopped` (ended by a stop request, or the conversation's archive/delete).
    pub status: String,
    /// The process group id (the sandbox launcher's pid).
    pub pid: i32,
    /// Runs on a pseudo-terminal (`process/resize` works).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tty: bool,
    /// The shell command (secrets masked).
    pub command: String,
    /// Working directory.
    pub cwd: String,
    /// RFC 3339 start time.
    pub started_at: String,
    /// RFC 3339 time of the last change.
    pub updated_at: String,
    /// RFC 3339 end time (absent while running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stopped_at: Option<String>,
    /// Exit code (absent while running or when killed by a signal).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Why it ended abnormally (a signal, its host stopped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// `process/write` can send input now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub input_available: bool,
    /// Bytes of output so far (stdout and stderr together, secrets masked).
    #[serde(default)]
    pub output_bytes: u64,
}

/// `process/list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessListParams {
    /// The conversation.
    pub thread_id: String,
}

/// `process/list` result: oldest first, ended ones included.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessListResult {
    /// The processes.
    pub processes: Vec<ManagedProcessSummary>,
}

/// `process/read`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessReadParams {
    /// The conversation.
    pub thread_id: String,
    /// The process.
    pub process_id: String,
    /// Log offset to read from (default 0); past the end reads nothing.
    #[serde(default)]
    pub offset_bytes: Option<u64>,
    /// At most this many bytes (default 65536, at most 524288); when more is newer than
    /// the offset, the newest bytes and `truncated`.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    /// Wait up to this many ms (at most 30000) for output past the offset.
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// `process/read` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessReadResult {
    /// The process.
    pub process: ManagedProcessSummary,
    /// Output (lossy UTF-8).
    pub output: String,
    /// Output between the asked offset and `start_offset` was skipped.
    pub truncated: bool,
    /// Log offset of the first byte of `output`.
    pub start_offset: u64,
    /// Log offset after the last byte of `output` (the next read's `offset_bytes`).
    pub end_offset: u64,
    /// Bytes of output so far.
    pub total_bytes: u64,
    /// `wait_ms` passed without new output.
    pub timed_out: bool,
}

/// `process/write`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessWriteParams {
    /// The conversation.
    pub thread_id: String,
    /// The process.
    pub process_id: String,
    /// Text for its stdin (or terminal).
    pub input: String,
}

/// `process/write` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessWriteResult {
    /// The process.
    pub process: ManagedProcessSummary,
    /// Bytes written.
    pub bytes_written: u64,
}

/// `process/resize` (a `tty` process only; cols 2..=500, rows 2..=200).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessResizeParams {
    /// The conversation.
    pub thread_id: String,
    /// The process.
    pub process_id: String,
    /// Columns.
    pub cols: i64,
    /// Rows.
    pub rows: i64,
}

/// `process/stop`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessStopParams {
    /// The conversation.
    pub thread_id: String,
    /// The process.
    pub process_id: String,
}

/// `process/resize` and `process/stop` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessResult {
    /// The process.
    pub process: ManagedProcessSummary,
}
