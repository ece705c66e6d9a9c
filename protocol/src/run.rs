//! Runs: automation executions spanning one or more turns (spec `app-server.md` §3.3,
//! §5.4; seed: run/start).

use crate::input::params_with_input;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `run/start` `request` member.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequestIntent {
    /// `start` (the only mode).
    #[serde(default)]
    pub mode: Option<String>,
    /// Free-form intent label.
    #[serde(default)]
    pub requested: Option<String>,
    /// Turn budget of the run (correction turns included).
    #[serde(default)]
    pub max_turns: Option<u32>,
    /// Deadline of the run in ms; on expiry the run ends `timed_out`.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

params_with_input! {
    /// `run/start`; the input's `prompt` is the task.
    pub struct RunStartParams {
        /// The conversation.
        pub thread_id: String,
        /// `{mode: "start", max_turns?, timeout_ms?}`.
        #[serde(default)]
        pub request: Option<RunRequestIntent>,
        /// JSON Schema the final answer must match (validated; up to two correction turns).
        #[serde(default)]
        pub output_schema: Option<Value>,
        /// Turn budget (same as `request.max_turns`).
        #[serde(default)]
        pub max_turns: Option<u32>,
        /// Deadline in ms (same as `request.timeout_ms`).
        #[serde(default)]
        pub timeout_ms: Option<u64>,
    }
}

/// `run/interrupt`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunInterruptParams {
    /// The run.
    pub run_id: String,
    /// `timeout` settles as `timed_out`; anything else as `interrupted`.
    #[serde(default)]
    pub reason: Option<String>,
}

/// A turn of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunTurn {
    /// Turn id.
    pub id: String,
    /// `initial` | `schema_correction`.
    pub purpose: String,
    /// The turn's status.
    pub status: String,
}

/// The result of a settled run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunResult {
    /// The last turn.
    pub final_turn_id: String,
    /// The final answer item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_item_id: Option<String>,
    /// The final answer text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_message: Option<String>,
    /// Parsed final answer when an output schema was given and matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_result: Option<Value>,
    /// The conversation trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_path: Option<String>,
    /// `wuu exec` exit code of this settlement (exec.md §3.3).
    pub exit_code: i32,
}

/// Why a run failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunError {
    /// `turn_failed`, `interrupted`, `timeout`, `permission_denied`,
    /// `structured_output_retry_failed`, `admission_failed`, `server_closed`, …
    pub code: String,
    /// Category (`provider`, `auth`, `network`, `invalid_request`, `local`, `tool`,
    /// `permission_denied`, `cancelled`, `timeout`).
    pub category: String,
    /// Detail.
    pub message: String,
    /// Provider id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
}

/// A run (spec §5.4). `status`: `accepted`, `running` (live); `completed`, `failed`,
/// `interrupted`, `timed_out`, `cancelled` (terminal).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Run {
    /// Run id.
    pub id: String,
    /// The conversation.
    pub thread_id: String,
    /// Status.
    pub status: String,
    /// The request with server-filled facts (`has_prompt`, `image_count`, `file_count`,
    /// `structured_output`) and, when one was given, the `output_schema` the final
    /// answer is validated against (as sent).
    pub request: Value,
    /// Resolved `{provider, model, effort, permission_mode, protocol_version,
    /// core_version}`.
    pub runtime: Value,
    /// `{root}`.
    pub workspace: Value,
    /// Turns in order.
    pub turns: Vec<RunTurn>,
    /// Set when settled successfully (and on failures, with the exit code).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RunResult>,
    /// Set when failed, interrupted or timed out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RunError>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// RFC 3339, when terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
}

impl Run {
    /// Whether `status` is terminal.
    pub fn is_terminal(&self) -> bool {
        !matches!(self.status.as_str(), "accepted" | "running")
    }
}

/// `{run}` (run/start, run/interrupt results; run/started, run/updated params).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunEnvelope {
    /// The run.
    pub run: Run,
}

/// `run/started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunStarted(pub RunEnvelope);

/// `run/updated`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunUpdated(pub RunEnvelope);
