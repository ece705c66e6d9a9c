//! Side chats (`sideThread/*`, notification `sideThread/event`; spec `app-server.md`
//! §3.6, §4): a second conversation bound to one main conversation, answered by the main
//! conversation's provider and model with its history as read-only context. Shapes from
//! the desktop's `desktop/src/shared/protocol.ts` (`SideThreadSummary`,
//! `SideThreadMessage`, `SideThreadEvent`) and the Go handlers.
//!
//! Times are RFC 3339 strings (UTC, milliseconds). `revision` grows by one on every
//! durable change of the side chat (a message stored, a status change).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `sideThread/open`, `sideThread/getHistory`, `sideThread/interrupt`,
/// `sideThread/reset`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SideThreadParams {
    /// The main conversation.
    pub main_thread_id: String,
}

/// `sideThread/sendMessage` (text only: attachments are refused as unknown fields).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SideThreadSendParams {
    /// The main conversation.
    pub main_thread_id: String,
    /// The question (non-empty after trimming; at most 100 000 characters).
    pub prompt: String,
}

/// The main conversation's state shown in the side panel's header.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MainTaskSummary {
    /// The main conversation runs a turn.
    pub running: bool,
    /// Its newest user message (at most 200 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_user_message: Option<String>,
}

/// One side chat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideThreadSummary {
    /// `side_…`.
    pub side_thread_id: String,
    /// The main conversation.
    pub main_thread_id: String,
    /// `running` | `completed` | `failed` | `interrupted`.
    pub status: String,
    /// Durable version (see the module docs).
    pub revision: u64,
    /// The main conversation's state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub main_task_summary: Option<MainTaskSummary>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// One message of a side chat.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideThreadMessage {
    /// `sidemsg_…`.
    pub id: String,
    /// Its side chat.
    pub side_thread_id: String,
    /// `user` | `assistant`.
    pub role: String,
    /// The text (an assistant message's text so far while it streams).
    pub text: String,
    /// Assistant only: `streaming` | `completed` | `failed` | `interrupted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Assistant only, when failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
    /// RFC 3339.
    pub created_at: String,
}

/// `sideThread/open` result: `summary: null` until the first message is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideThreadOpenResult {
    /// The side chat, or null.
    pub summary: Option<SideThreadSummary>,
}

/// `sideThread/getHistory` result (error `error` when the main conversation has no side
/// chat).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideThreadHistoryResult {
    /// The side chat.
    pub summary: SideThreadSummary,
    /// Its messages, oldest first.
    pub messages: Vec<SideThreadMessage>,
}

/// `sideThread/sendMessage` result (written before any `sideThread/event` of the answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideThreadSendResult {
    /// Id of the stored user message.
    pub user_message_id: String,
    /// The side chat (status `running`).
    pub summary: SideThreadSummary,
}

/// `sideThread/event`: `type` is `status` (with `summary`), `delta` (`revision`,
/// `message_id`, `text_delta`), `message` (`revision`, `message`), `error` (`revision`,
/// `message_id`, `error_message`) or `reset`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SideThreadEvent {
    /// The event kind.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The side chat.
    pub side_thread_id: String,
    /// The main conversation.
    pub main_thread_id: String,
    /// The side chat's revision when this was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<u64>,
    /// `status`: the side chat.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<SideThreadSummary>,
    /// `delta`, `error`: the assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// `delta`: text appended to the assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_delta: Option<String>,
    /// `message`: a stored message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<SideThreadMessage>,
    /// `error`: why the answer failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}
