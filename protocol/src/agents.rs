//! Subagent (worker) wire types: the `Agent` object of `agent/updated` and the
//! `agent/mailbox` message (spec `subagents.md` §1.7, §2.1–§2.3).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One worker of a root conversation's tree (`subagents.md` §2.3). `id` is also the
/// worker's child thread id. Token counts are cumulative over the worker's turns;
/// `result` is a bounded preview (≤ 4000 bytes, else head 3000 + marker + tail 1000)
/// of the full result, whose file is `result_path` (absolute path, `result_bytes`
/// bytes long).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Agent {
    /// Worker id (= child thread id).
    pub id: String,
    /// Worker type (`general-purpose`, `fork`).
    #[serde(rename = "type")]
    pub agent_type: String,
    /// Task name (`[a-z0-9_]`, unique among siblings).
    pub task_name: String,
    /// Saved-memory profile (empty when none).
    #[serde(default)]
    pub agent_profile: String,
    /// Position in the tree: `/root/<task>`.
    pub agent_path: String,
    /// Direct parent: the root thread id.
    pub parent_id: String,
    /// Human summary given at spawn.
    pub description: String,
    /// `queued` | `pending` | `running` | `completed` | `failed` | `cancelled` |
    /// `interrupted`.
    pub status: String,
    /// Provider of the worker's turns.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub provider: String,
    /// Model of the worker's turns.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub model: String,
    /// `inplace` | `worktree`.
    pub isolation: String,
    /// The git worktree of an isolated worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree_path: Option<String>,
    /// Preview of the final result.
    pub result: String,
    /// File holding the full result (absolute path; empty when none).
    pub result_path: String,
    /// Byte length of the full result.
    pub result_bytes: u64,
    /// Whether `result` was cut.
    pub result_truncated: bool,
    /// Error text of a failed, cancelled or interrupted worker.
    pub error: String,
    /// Fresh input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache read tokens.
    pub cache_read_tokens: u64,
    /// Launch (or queue) time, RFC 3339.
    pub started_at: String,
    /// Terminal time, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
}

/// `agent/updated {thread_id, agent}`: a worker changed (status, tokens, result);
/// `thread_id` is the root conversation that owns the tree. Sent once per terminal
/// state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentUpdated {
    /// The root conversation.
    pub thread_id: String,
    /// The worker.
    pub agent: Agent,
}

/// The completion notice of a direct child of the root (`subagents.md` §1.7
/// `AgentMailboxMessage`); the same JSON the parent model reads inside
/// `<subagent_notification>`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentMailboxMessage {
    /// Always `agent_result`.
    #[serde(rename = "type")]
    pub message_type: String,
    /// Delivery id (one per terminal state of a worker).
    pub result_id: String,
    /// The worker.
    pub agent_id: String,
    /// Its path.
    pub agent_path: String,
    /// Its parent.
    pub parent_id: String,
    /// Its task name.
    pub task_name: String,
    /// Its type.
    pub agent_type: String,
    /// Its description.
    pub description: String,
    /// Terminal status.
    pub status: String,
    /// Result preview.
    pub result: String,
    /// Full result file.
    pub result_path: String,
    /// Full result size, bytes.
    pub result_bytes: u64,
    /// Whether `result` was cut.
    pub result_truncated: bool,
    /// Error text.
    pub error: String,
    /// Worker input tokens.
    pub input_tokens: u64,
    /// Worker output tokens.
    pub output_tokens: u64,
}

/// `agent/mailbox {thread_id, message}`: a root child's result was delivered to the
/// root conversation (exactly once per terminal state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentMailbox {
    /// The root conversation.
    pub thread_id: String,
    /// The notice.
    pub message: AgentMailboxMessage,
}
