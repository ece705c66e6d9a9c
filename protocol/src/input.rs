//! User input shapes: attachments and pending input (spec §5.5–§5.6).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An image or file attachment (spec §5.6). `data` is base64 (standard alphabet) or a
/// `data:` URL. Images need a `image/*` media type (default `image/png`); files only
/// `application/pdf` or video types.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Attachment {
    /// MIME type.
    #[serde(default)]
    pub media_type: Option<String>,
    /// Base64 payload or `data:` URL.
    pub data: String,
    /// File name (files only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// True when the client sent the original, unscaled image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original: Option<bool>,
}

/// A queued turn (spec §5.5); `id` is the queue id (= `client_id` when given).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QueuedTurn {
    /// Queue id.
    pub id: String,
    /// The conversation.
    pub thread_id: String,
    /// Start of the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview: Option<String>,
    /// Number of images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_count: Option<u32>,
    /// Number of files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_count: Option<u32>,
}

/// A pending or held user input (spec §5.5). "held" inputs are durable and never run by
/// themselves; "pending" inputs are managed by the live process.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HeldUserMessage {
    /// Queue or steer id (= `client_id` when given).
    pub id: String,
    /// The conversation.
    pub thread_id: String,
    /// `queue` | `steer`.
    pub origin: String,
    /// The message text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// Images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub images: Option<Vec<Attachment>>,
    /// Files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<Attachment>>,
    /// Accepted content parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_parts: Option<Vec<Value>>,
    /// Active document metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_document: Option<Value>,
    /// Set when the delivery outcome is unknown (seed: never resent automatically).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_unconfirmed: Option<bool>,
}

/// `turn/queue` (seed: queued input). Committed to the store before the response.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnQueueParams {
    /// The conversation.
    pub thread_id: String,
    /// The message.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Images.
    #[serde(default)]
    pub images: Option<Vec<Attachment>>,
    /// Files.
    #[serde(default)]
    pub files: Option<Vec<Attachment>>,
    /// Becomes the queue id; makes retries safe (a repeat returns the original entry).
    #[serde(default)]
    pub client_id: Option<String>,
    /// Legacy: must equal the conversation's mode.
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Active document metadata.
    #[serde(default)]
    pub active_document: Option<Value>,
    /// Content parts.
    #[serde(default)]
    pub content_parts: Option<Vec<Value>>,
    /// Store without dispatching (held).
    #[serde(default)]
    pub hold: Option<bool>,
}

/// `turn/queue` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnQueueResult {
    /// The entry.
    pub queued: QueuedTurn,
}

/// `turn/update-queued`: edits a pending queued or held message.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnUpdateQueuedParams {
    /// The conversation.
    pub thread_id: String,
    /// The entry.
    pub queue_id: String,
    /// New text.
    #[serde(default)]
    pub prompt: Option<String>,
    /// New images.
    #[serde(default)]
    pub images: Option<Vec<Attachment>>,
    /// New files.
    #[serde(default)]
    pub files: Option<Vec<Attachment>>,
    /// New content parts.
    #[serde(default)]
    pub content_parts: Option<Vec<Value>>,
}

/// `turn/update-queued` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUpdateQueuedResult {
    /// False when no pending or held entry has that id.
    pub ok: bool,
    /// The entry after the edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedTurn>,
}

/// `turn/dequeue`: removes a queued or held entry; an unknown id records a cancellation
/// so a later `turn/queue` with it is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnDequeueParams {
    /// The conversation.
    pub thread_id: String,
    /// The entry.
    pub queue_id: String,
}

/// `turn/steer`: input for the running turn (taken at the next model step).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnSteerParams {
    /// The conversation.
    pub thread_id: String,
    /// The message (optional when `client_id` names a held or queued entry).
    #[serde(default)]
    pub prompt: Option<String>,
    /// Images.
    #[serde(default)]
    pub images: Option<Vec<Attachment>>,
    /// Files.
    #[serde(default)]
    pub files: Option<Vec<Attachment>>,
    /// The active turn (required when steering a running turn).
    #[serde(default)]
    pub expected_turn_id: Option<String>,
    /// Becomes the steer id; a repeat while pending succeeds without a second steer; a
    /// held or queued entry's id sends that entry.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Active document metadata.
    #[serde(default)]
    pub active_document: Option<Value>,
    /// Content parts.
    #[serde(default)]
    pub content_parts: Option<Vec<Value>>,
}

/// `turn/steer` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnSteerResult {
    /// The turn the input goes to (a new turn when a held entry was sent while idle).
    pub turn_id: String,
    /// `active_turn` | `queued`: the planned path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<String>,
}

/// `turn/unsteer`: removes a pending (or held) steer; an unknown id records a
/// cancellation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnUnsteerParams {
    /// The conversation.
    pub thread_id: String,
    /// The steer.
    pub steer_id: String,
}
