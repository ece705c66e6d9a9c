//! Paged conversation history, activity details and large-content reads (seed
//! 003 "分页读取会话历史"; spec `app-server.md` §5.8–§5.9 with the seed's limits), and
//! per-conversation selection updates (`config/model/update`, spec §3.4, §6 rule 15;
//! seed "每个对话保留自己的模型和权限选择").
//!
//! Formats:
//! - history cursor, compact pages (`conversation_history: true`): opaque
//!   `base64url(JSON [turn_id, item_id | null])` naming the first retained element of the
//!   page just returned (`null`: the page starts at the turn's beginning).
//! - history cursor, item pages (`history_page: true`, the Go server's format):
//!   `turn:<turn_id>` (the page starts at that turn) or `item:` + `base64url(JSON
//!   [turn_id, item_id])` (it starts at that item). Appends never shift pages; when the named element no longer exists the
//!   read is refused with `history changed; reopen the conversation`.
//! - content reference (`remote_content_ref`): `"content:" + base64url(JSON [thread_id,
//!   turn_id, item_id, sha256hex])`, where the hash is over the full item JSON served by
//!   `thread/content/read`.

use crate::thread::Turn;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Most turns a history page holds (seed).
pub const HISTORY_PAGE_TURNS: usize = 100;
/// Most bytes of serialized (projected) items a history page holds (seed: 1 MiB).
pub const HISTORY_PAGE_BYTES: usize = 1024 * 1024;
/// Most turns of a page with the Go-compatible cursors (`history_page: true`; spec
/// §5.8: 20 turns).
pub const ITEM_PAGE_TURNS: usize = 20;
/// Most bytes of serialized items of such a page (spec §5.8: 256 KiB).
pub const ITEM_PAGE_BYTES: usize = 256 * 1024;
/// Serialized size above which an item is sent cut, with a `remote_content_ref`
/// (spec §5.8: 64 KiB).
pub const INLINE_ITEM_BYTES: usize = 64 * 1024;
/// Bytes kept of each long string of a cut item (spec §5.8: 2048 bytes + `…`).
pub const CUT_TEXT_BYTES: usize = 2048;
/// Most base64 characters one `thread/content/read` returns (spec §5.9: 128 KiB).
pub const CONTENT_CHUNK_CHARS: usize = 128 * 1024;

/// `summary` of a `process_summary` item: what the folded activity contains.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProcessSummary {
    /// Number of folded items.
    pub item_count: u32,
    /// Number of folded tool calls.
    pub tool_count: u32,
    /// Distinct tool names, in first-use order.
    pub tools: Vec<String>,
    /// First folded item (also the start of the `thread/activity/read` range).
    pub first_item_id: String,
    /// Last folded item (pass it as `last_item_id` to `thread/activity/read`).
    pub last_item_id: String,
}

/// `activity` of a `process_summary` item: the range `thread/activity/read` opens.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItemActivity {
    /// Last folded item of the summary.
    pub last_item_id: String,
}

/// `thread/history/read`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryReadParams {
    /// The conversation.
    pub thread_id: String,
    /// A `history_cursor` from `thread/resume` or from the previous
    /// `thread/history/read`. Also the Go formats `turn:<turn_id>` and
    /// `item:<base64url JSON [turn_id, item_id]>` (e.g. cut by the desktop bridge from a
    /// `thread/updated` snapshot): those pages hold every item (no folding) and answer
    /// cursors in the same formats.
    pub cursor: String,
}

/// `thread/history/read` result: the next older page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HistoryReadResult {
    /// The conversation.
    pub thread_id: String,
    /// The cursor that was read (echo).
    pub cursor: String,
    /// Turns of the page, oldest first (the oldest may be a partial turn).
    pub turns: Vec<Turn>,
    /// Cursor of the next older page; absent at the start of the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history_cursor: Option<String>,
}

/// `thread/activity/read`: the items folded behind one `process_summary`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ActivityReadParams {
    /// The conversation.
    pub thread_id: String,
    /// The turn of the summary.
    pub turn_id: String,
    /// The summary's `id` (or its `summary.first_item_id`).
    pub item_id: String,
    /// The summary's `activity.last_item_id`.
    pub last_item_id: String,
    /// `next_cursor` of the previous activity page.
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `thread/activity/read` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActivityReadResult {
    /// The turn with only this page of the folded items (oldest first).
    pub turn: Turn,
    /// Cursor of the next page; absent on the last one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `thread/content/read`: the full JSON of an item sent with a `remote_content_ref`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ContentReadParams {
    /// The conversation.
    pub thread_id: String,
    /// The item's turn.
    pub turn_id: String,
    /// The item.
    pub item_id: String,
    /// The sha256 (hex) from the reference; a mismatch is refused with `attachment
    /// changed or was removed`.
    pub sha256: String,
    /// Offset in the base64 payload (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
}

/// `thread/content/read` result (spec §5.9). Loop until `offset + len(data) == total`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContentReadResult {
    /// Base64 (standard alphabet) slice of at most 128 KiB characters.
    pub data: String,
    /// Length of the whole base64 payload, in characters.
    pub total: u64,
    /// Offset of `data` in the payload.
    pub offset: u64,
    /// `application/json`.
    pub content_type: String,
}

/// `config/model/update` (spec §3.4, §6 rule 15; seed). With `thread_id`: that
/// conversation's selection only (omitted fields inherit; `thread_busy` while it
/// executes). Without: the defaults of future conversations (`model` required), written
/// to the user config file. `keep_selection: true` saves a provider connection without
/// making it the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigModelUpdateParams {
    /// The conversation whose selection changes.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// Provider id.
    #[serde(default)]
    pub provider: Option<String>,
    /// Model id (required without `thread_id`, unless `keep_selection`).
    #[serde(default)]
    pub model: Option<String>,
    /// Reasoning effort.
    #[serde(default)]
    pub effort: Option<String>,
    /// Model variant (mirrors effort for the built-in engine).
    #[serde(default)]
    pub variant: Option<String>,
    /// `standard` | `read_only` | `unconfined`.
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Provider connection: base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Provider connection: environment variable holding the key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Refused: this host never stores keys (use `api_key_env`).
    #[serde(default)]
    pub api_key: Option<String>,
    /// Provider connection: wire type (`openai-responses` | `openai-compatible` |
    /// `anthropic`).
    #[serde(default, rename = "type")]
    pub provider_type: Option<String>,
    /// Create the provider connection when it does not exist.
    #[serde(default)]
    pub create_provider: Option<bool>,
    /// Save the connection only; keep the current default selection.
    #[serde(default)]
    pub keep_selection: Option<bool>,
    /// Add this model to the provider's `models` list (idempotent).
    #[serde(default)]
    pub add_model: Option<String>,
    /// Remove this model from the provider's `models` list. Refused for the model being
    /// selected; when it is the provider's default model, the selected `model` becomes
    /// the provider's default.
    #[serde(default)]
    pub remove_model: Option<String>,
}

/// `config/model/update` result: the selection that was changed (the conversation's with
/// `thread_id`, else the new defaults).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigModelUpdateResult {
    /// Provider id.
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Effort, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Variant, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Parallel capacity.
    pub max_parallel: u32,
    /// `{mode}`.
    pub permissions: crate::config::Permissions,
    /// Configured providers after the change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<crate::config::ProviderSummary>,
    /// Agent settings.
    pub advanced_settings: Value,
}
