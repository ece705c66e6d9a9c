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
