//! Methods the wuu desktop and phone clients call besides the core conversation methods
//! (shapes from the Go dispatcher `internal/appserver/server.go` and the
//! clients' code, spec `app-server.md` §3.1, §3.7, §5.8–§5.9):
//! workspaces, conversation organization (pin, folders), previews, message edits,
//! steer requeue, the context composition, and attachment reads.
//!
//! Formats:
//! - attachment reference (`remote_ref` of an image): `"thread:" + base64url(JSON
//!   [thread_id, turn_id, item_id, index, sha256hex])`, with a trailing `"result"` element
//!   for an image part of a tool result (`result_detail.content[index]`); the hash is over
//!   `media_type + "\0" + data` of the stored image.

use crate::input::{Attachment, QueuedTurn};
use crate::thread::{Thread, Turn};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Images whose base64 `data` is longer than this many characters are sent as a
/// `remote_ref` in history pages and deferred-content frames (spec §5.8: 16 KiB).
pub const INLINE_IMAGE_CHARS: usize = 16 * 1024;
/// Most base64 characters one `thread/attachment/read` returns (spec §5.9: 128 KiB).
pub const ATTACHMENT_CHUNK_CHARS: usize = 128 * 1024;
/// Longest side of a `preview: true` JPEG, in pixels (spec §5.9).
pub const PREVIEW_MAX_SIDE: u32 = 384;
/// JPEG quality of a preview (spec §5.9).
pub const PREVIEW_QUALITY: u8 = 75;

/// `workspace/list` (the phone's first call).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceListParams {
    /// Delivery mode of the calling bridge (`1` = the desktop's compact remote delivery).
    /// Informational: the answer is the same.
    #[serde(default)]
    pub remote_delivery: Option<u32>,
}

/// One known workspace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceEntry {
    /// Stable workspace id (`--workspace-id` of the server that registered it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Display name (the directory name).
    pub name: String,
    /// Absolute path.
    pub path: String,
}

/// `workspace/list` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceListResult {
    /// Absolute path of the workspace this server serves (`--workdir`).
    pub current: String,
    /// Its id (`--workspace-id`), when the server was started with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_id: Option<String>,
    /// Workspaces registered under this wuu home (the current one first), whose
    /// directories still exist.
    pub workspaces: Vec<WorkspaceEntry>,
}

/// `workspace/state/cleanup`: removes the local state of a workspace that was removed
/// from the desktop (its registration directory) and archives its conversations (the
/// data is kept, archived). One of the two fields is required.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceStateCleanupParams {
    /// The workspace id.
    #[serde(default)]
    pub workspace_id: Option<String>,
    /// The workspace path (used when the id is unknown or absent).
    #[serde(default)]
    pub workspace_path: Option<String>,
}

/// `workspace/state/cleanup` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceStateCleanupResult {
    /// The state directory of the workspace (`$WUU_HOME/workspaces/<id>`); empty when
    /// only a path was given and no registration names it.
    pub state_dir: String,
    /// True when that directory existed and was removed.
    pub removed: bool,
    /// True when conversations of the workspace were archived.
    pub data_archived: bool,
}

/// `thread/pin`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadPinParams {
    /// The conversation.
    pub thread_id: String,
    /// Pinned or not.
    pub pinned: bool,
}

/// `thread/organization/update`: the folder of a conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadOrganizationUpdateParams {
    /// The conversation.
    pub thread_id: String,
    /// Folder id (from `sessionFolder/create`); absent, null or empty clears it.
    #[serde(default)]
    pub folder_id: Option<String>,
}

/// `thread/preview`: the first turns of a conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadPreviewParams {
    /// The conversation.
    pub thread_id: String,
    /// How many turns (default 3, at most 20).
    #[serde(default)]
    pub limit: Option<u32>,
}

/// `thread/preview` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadPreviewResult {
    /// The first turns, oldest first (items projected like a history page).
    pub turns: Vec<Turn>,
}

/// `thread/edit-message`: rewinds the conversation to a user message and returns that
/// message as a draft. The message's turn and every later turn leave the history (the
/// model never sees them again). Refused while the conversation runs or has pending
/// input.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadEditMessageParams {
    /// The conversation.
    pub thread_id: String,
    /// The turn of the user message.
    pub turn_id: String,
    /// The user message item.
    pub item_id: String,
}

/// The message returned for editing.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageDraft {
    /// The message text.
    pub prompt: String,
    /// Its images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Attachment>,
    /// Its files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<Attachment>,
    /// Its content parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_parts: Option<Vec<Value>>,
}

/// `thread/edit-message` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadEditMessageResult {
    /// The conversation after the rewind.
    pub thread: Thread,
    /// The message, to edit and send again.
    pub draft: MessageDraft,
}

/// `turn/requeue`: a pending steer goes back into the queue (it runs as its own turn
/// after the current one).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TurnRequeueParams {
    /// The conversation.
    pub thread_id: String,
    /// The steer.
    pub steer_id: String,
}

/// `turn/requeue` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnRequeueResult {
    /// True when the steer was found.
    pub ok: bool,
    /// `queued` (now a queued turn) or `consumed` (the running turn already took it).
    pub state: String,
    /// The queued entry, when `state` is `queued`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued: Option<QueuedTurn>,
}

/// A conversation folder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionFolder {
    /// Folder id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Position (0 first).
    pub sort_order: i64,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
}

/// The folders.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionOrganization {
    /// Folders in order.
    pub folders: Vec<SessionFolder>,
}

/// `sessionOrganization/list` result (also the result of `sessionFolder/reorder` and
/// `sessionFolder/delete`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionOrganizationResult {
    /// The folders.
    pub organization: SessionOrganization,
}

/// `sessionFolder/create`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFolderCreateParams {
    /// Name (trimmed, 1–100 characters).
    pub name: String,
}

/// `sessionFolder/update`: renames.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFolderUpdateParams {
    /// Folder id.
    pub id: String,
    /// New name (trimmed, 1–100 characters).
    pub name: String,
}

/// `sessionFolder/reorder`: the new order; it must name every folder exactly once.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFolderReorderParams {
    /// Every folder id, in the new order.
    pub ids: Vec<String>,
}

/// `sessionFolder/delete`: deletes the folder; its conversations leave it (they are not
/// deleted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionFolderDeleteParams {
    /// Folder id.
    pub id: String,
}

/// `sessionFolder/create` / `sessionFolder/update` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SessionFolderResult {
    /// The folder.
    pub group: SessionFolder,
    /// All folders after the change.
    pub organization: SessionOrganization,
}

/// Params naming only a conversation (`thread/context-composition`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadIdParams {
    /// The conversation.
    pub thread_id: String,
}

/// One part of the next request's context.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ContextCategory {
    /// `system` | `tools` | `history` | `user` | `assistant` | `tool_results`.
    pub id: String,
    /// Display label.
    pub label: String,
    /// Serialized bytes.
    pub bytes: u64,
    /// Estimated tokens (bytes / 4, rounded up).
    pub estimated_tokens: u64,
    /// Messages or sections counted.
    pub count: u64,
}

/// `thread/context-composition` result: the breakdown of the request the next turn
/// would send (same measure as the `request_context` event of a turn).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadContextCompositionResult {
    /// The conversation.
    pub thread_id: String,
    /// False when the conversation's engine does not let us compute it.
    pub available: bool,
    /// Why not, when unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Provider and model of the next request.
    pub provider: String,
    /// Model.
    pub model: String,
    /// Context window of the model, when known (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_tokens: Option<u64>,
    /// Input tokens of the last request, when one was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_context_tokens: Option<u64>,
    /// Estimated tokens of the whole next request.
    pub estimated_tokens: u64,
    /// Total serialized bytes.
    pub total_bytes: u64,
    /// The parts, largest first.
    pub categories: Vec<ContextCategory>,
    /// The `request_context` digest of the next request (`step_index`, hashes, sizes).
    pub request_context: Value,
}

/// `thread/attachment/read` (spec §5.9): a slice of an image of a stored item.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AttachmentReadParams {
    /// The conversation.
    pub thread_id: String,
    /// The item's turn.
    pub turn_id: String,
    /// The item.
    pub item_id: String,
    /// Index in `images` (or in `result_detail.content` with `kind: "result"`).
    pub index: u32,
    /// `""` (default): `images[index]`; `"result"`: `result_detail.content[index]`.
    #[serde(default)]
    pub kind: Option<String>,
    /// sha256 (hex) of `media_type + "\0" + data` from the reference; a mismatch is
    /// refused with `attachment changed or was removed`.
    pub sha256: String,
    /// Offset in the base64 payload (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// A JPEG thumbnail (≤ 384 px, quality 75) instead of the image.
    #[serde(default)]
    pub preview: Option<bool>,
}

/// `thread/attachment/read` result: loop until `offset + len(data) == total`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AttachmentReadResult {
    /// Base64 slice of at most 128 KiB characters.
    pub data: String,
    /// Length of the whole base64 payload, in characters.
    pub total: u64,
    /// Offset of `data` in the payload.
    pub offset: u64,
    /// The image's media type (`image/jpeg` for a preview).
    pub content_type: String,
}
