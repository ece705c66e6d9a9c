//! Conversation shapes: [`Thread`], [`Turn`], [`ThreadItem`] (spec `app-server.md` §5.1–§5.3).
//!
//! Optional members are omitted when empty (the Go server's `omitempty`); the members the
//! spec lists as always present (`preview`, `model_variant`, `model_effort`,
//! `permission_mode`, `cwd`, `status`, `turns`, a turn's `items`) are always written.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

fn is_false(b: &bool) -> bool {
    !*b
}
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A conversation snapshot (spec §5.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Thread {
    /// Opaque id; ephemeral conversations start with `ephemeral-`.
    pub id: String,
    /// The title, or else the start of the first user message.
    pub preview: String,
    /// The title, when one was set (manually or automatically).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Monotonic revision of `title`; absent means 0 (seed: titles).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub title_revision: u64,
    /// The conversation's own provider id (fixed selection, see `config/model/update`).
    pub model_provider: String,
    /// The conversation's model.
    pub model: String,
    /// Model variant (for the built-in engine, mirrors an explicit effort).
    pub model_variant: String,
    /// Reasoning effort.
    pub model_effort: String,
    /// `standard` | `read_only` | `unconfined`.
    pub permission_mode: String,
    /// The engine bound at creation (`wuu` = the built-in engine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_id: Option<String>,
    /// Absolute working directory of the conversation.
    pub cwd: String,
    /// `project` (default) or `scratch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_kind: Option<String>,
    /// `idle` | `in_progress`.
    pub status: String,
    /// True for in-memory conversations that never touch the database.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ephemeral: bool,
    /// True once archived (`thread/archive`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub archived: bool,
    /// Why it was archived, when the server archived it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive_reason: Option<String>,
    /// Pinned to the top of the sidebar (`thread/pin`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub pinned: bool,
    /// Folder of the conversation (`thread/organization/update`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub folder_id: Option<String>,
    /// Workspace id the conversation was started in (`thread/start {workspace_id}`, else
    /// the server's `--workspace-id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_id: Option<String>,
    /// Source conversation of a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from_id: Option<String>,
    /// Turn cut of a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from_turn_id: Option<String>,
    /// Item cut of a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from_item_id: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// RFC 3339, UTC: activity time (never title recency).
    pub updated_at: String,
    /// The last turn that is not in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_completed_turn_id: Option<String>,
    /// Turns, oldest first; `[]` in summaries (`summary_only`) and listings.
    pub turns: Vec<Turn>,
    /// Cursor of the next older history page (seed: paged history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_cursor: Option<String>,
    /// True when `turns` holds only the newest page.
    #[serde(default, skip_serializing_if = "is_false")]
    pub history_paged: bool,
    /// True when part of the stored conversation could not be read (its stored metadata
    /// is damaged, or its stored permission mode is unknown and `read_only` is enforced);
    /// `damage` says what. The conversation is still listed and served.
    #[serde(default, skip_serializing_if = "is_false")]
    pub damaged: bool,
    /// What is damaged, when `damaged`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
}

/// Structured turn failure (spec §5.2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnError {
    /// What went wrong.
    pub message: String,
    /// Machine code, e.g. `rate_limit`, `context_overflow`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// `cancelled` | `network` | `auth` | `provider` | `invalid_request` | `tool` |
    /// `local` | `internal` | `permission_denied` | `timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Provider id, when a provider failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// HTTP status of the provider failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Retry accounting of the failed request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

/// Retry counters of a failed provider request (spec §5.2 `recovery`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Recovery {
    /// Attempts made (first try included).
    pub attempt_count: u32,
    /// Retries made.
    pub retry_count: u32,
    /// Requests submitted to the provider.
    pub submission_count: u32,
    /// The attempt budget.
    pub max_attempts: u32,
    /// `non_retryable` | `retry_limit` | `replay_unsafe` | `recovery_unavailable` | …
    pub stop_reason: String,
    /// Category of the last failure (`rate_limit`, `server`, `network`, …).
    pub failure_category: String,
    /// Id of the logical operation.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub operation_id: String,
}

/// One turn: the user's input and everything the agent did for it (spec §5.2).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Turn {
    /// Opaque id.
    pub id: String,
    /// `user` (default), `internal`, `compact`, `continue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Provider frozen at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_provider: Option<String>,
    /// Model frozen at admission.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Items in order; always an array.
    pub items: Vec<ThreadItem>,
    /// Always `full` in this server.
    pub items_view: String,
    /// `in_progress` | `completed` | `failed` | `interrupted`.
    pub status: String,
    /// Set when `status` is `failed` (and for interrupted turns, the reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TurnError>,
    /// Provider finish reason of the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Provider stop reason of the last step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// True when output hit the token limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// RFC 3339: when the final answer became visible.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_ready_at: Option<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// Milliseconds from start to settlement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Cumulative fresh input tokens of the turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Cumulative output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Cache creation tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
    /// Cache read tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Tool calls refused by the permission mode during the turn
    /// (`[{item_id, tool, reason}]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permission_denials: Vec<Value>,
}

/// One entry of a turn (spec §5.3). `type` is `user_message` | `agent_message` |
/// `reasoning` | `tool_call` | `context_compaction` | `stream_reconnect` | `error` |
/// `process_summary`; clients tolerate unknown types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadItem {
    /// Opaque id (`<turn_id>-item-<n>`).
    pub id: String,
    /// Item type.
    #[serde(rename = "type")]
    pub item_type: String,
    /// `in_progress` | `completed` | `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Persisted position within the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The client's `client_id` of the input that produced a user item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_id: Option<String>,
    /// True on the final answer of a turn.
    #[serde(default, skip_serializing_if = "is_false")]
    pub terminal: bool,
    /// `user` | `assistant`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Message text (user, agent, reasoning, reconnect reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Ordered presentation metadata of a user message (seed: content parts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_parts: Option<Vec<Value>>,
    /// Image attachments `{media_type, data, remote_ref?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<Value>>,
    /// File attachments `{media_type, data, filename?}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<Value>>,
    /// `queue` | `steer` | `host` … for user items that came from pending input.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Why a host-made item exists, e.g. `incomplete_stream_fragment`, `steered`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Tool name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Provider call id of a tool call (`call_…`, `toolu_…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// Provider step (model request) of the turn that produced this item, from 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u32>,
    /// Tool arguments as JSON text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
    /// Tool result text (what the model saw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Structured tool result (`{structured_content?, is_error?, …}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_detail: Option<Value>,
    /// Error text of a failed item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Reason (reconnect category, compaction reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Summary (compaction, process summary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<Value>,
    /// Provider finish reason (agent message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Provider stop reason (agent message).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Output hit the token limit.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// Reconnect: retries so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<u32>,
    /// Reconnect: retry budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retries: Option<u32>,
    /// Reconnect: Unix ms of the next attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_ms: Option<u64>,
    /// `content:` reference to the full item when the inline copy was cut (§5.9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_content_ref: Option<String>,
    /// `process_summary` only: the folded range to pass to `thread/activity/read`
    /// (`{last_item_id}`, see [`crate::ItemActivity`]; seed: paged history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activity: Option<crate::history::ItemActivity>,
}

impl ThreadItem {
    /// A new item of `item_type` with the given id and everything else empty.
    pub fn new(id: impl Into<String>, item_type: &str) -> Self {
        ThreadItem {
            id: id.into(),
            item_type: item_type.to_owned(),
            ..Default::default()
        }
    }
}
