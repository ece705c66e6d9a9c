//! The clients' remaining calls: `thread/textSnapshot`, `config/codex/credentials`, and
//! the legacy or remote-only methods that answer a fixed error (`thread/control/take`,
//! `thread/control/return`, `device/push_register`, `device/push_unregister`,
//! `project/work`, `project/session`). Shapes from the Go handlers
//! (`internal/appserver/…`, `internal/remote/conversations/types.go`); spec
//! `app-server.md` §3.1, §3.6, §3.7.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `thread/textSnapshot`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextSnapshotParams {
    /// The conversation.
    pub thread_id: String,
}

/// One message of a text snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TextSnapshotMessage {
    /// The item id.
    pub id: String,
    /// Its turn.
    pub turn_id: String,
    /// `user` | `assistant`.
    pub role: String,
    /// The displayed text.
    pub text: String,
}

/// `thread/textSnapshot` result: the text-only copy of a conversation (user and agent
/// message text; no tool output, reasoning, raw input or attachment bytes).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TextSnapshotResult {
    /// The conversation.
    pub id: String,
    /// Its title (empty when none).
    pub title: String,
    /// RFC 3339.
    pub updated_at: String,
    /// `idle` | `running` | … (the conversation's status).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The messages, oldest first.
    pub messages: Vec<TextSnapshotMessage>,
}

/// `config/codex/credentials` result: whether a Codex login exists and can be reused by
/// the Codex engine. Never carries the credential itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CodexCredentialsResult {
    /// A Codex login or API key was found.
    pub available: bool,
    /// The Codex engine can use it as it is (the login file is readable, or the key is
    /// in the environment the engine passes on).
    pub reusable: bool,
    /// Where it was found: `auth_file` (`$CODEX_HOME/auth.json`, else
    /// `~/.codex/auth.json`) | `env` (`OPENAI_API_KEY` / `CODEX_API_KEY`); absent when
    /// none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// `chatgpt` (a ChatGPT sign-in) | `api_key`; absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_mode: Option<String>,
    /// The login file's path (never its content), when `source` is `auth_file`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// Params of a legacy or remote-only method: any object (the answer is always the same
/// error).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct LegacyParams(pub Map<String, Value>);

/// Never produced: legacy methods always answer an error.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LegacyResult {}

/// `config/codex/models` (the desktop sends `provider: ""`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CodexModelsParams {
    /// Empty or `codex`: the Codex engine. Any other value is refused.
    #[serde(default)]
    pub provider: Option<String>,
}

/// One model of the Codex engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CodexModelSummary {
    /// The model id.
    pub slug: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Default reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_reasoning_level: Option<String>,
    /// Supported reasoning efforts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_reasoning: Vec<String>,
    /// Whether the model can be used (always true for a listed model).
    pub supported_in_api: bool,
}

/// `config/codex/models` result: the Codex engine's model catalogue (`model/list` of
/// `codex app-server`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CodexModelsResult {
    /// The configured providers (as in `initialize`).
    pub providers: Vec<crate::config::ProviderSummary>,
    /// `codex`.
    pub provider: String,
    /// The catalogue's default model, else its first model (empty when none).
    pub model: String,
    /// The default model's default reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Unused (kept for the clients' type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// The models.
    pub models: Vec<CodexModelSummary>,
}

/// `auth/xai/login/start` result (RFC 8628 device authorization).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct XaiLoginStartResult {
    /// This login (for `poll` / `cancel`).
    pub login_id: String,
    /// The code the user enters.
    pub user_code: String,
    /// Where the user enters it (https).
    pub verification_uri: String,
    /// The same with the code filled in (https), when the server gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_uri_complete: Option<String>,
    /// Seconds until the code expires.
    pub expires_in: u64,
    /// How often to poll, ms.
    pub interval_ms: u64,
}

/// `auth/xai/login/poll`, `auth/xai/login/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct XaiLoginParams {
    /// From `start`.
    pub login_id: String,
}

/// `auth/xai/login/poll` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct XaiLoginPollResult {
    /// `pending` | `success` | `denied` | `expired` | `failed`.
    pub status: String,
    /// `pending`: wait this long before the next poll, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_ms: Option<u64>,
    /// `denied` | `expired` | `failed`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `success`: the configured providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub providers: Option<Vec<crate::config::ProviderSummary>>,
}

/// `message/image/read`: a chunk of an image a stored agent message embeds with Markdown
/// image syntax (`![alt](path)`), by the reference `markdown:` + base64url(JSON
/// `[kind, scope_id, turn_id, message_id, source]`) the phone decodes into these params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageImageReadParams {
    /// `thread` (channels are not served by this server).
    pub kind: String,
    /// The conversation.
    pub scope_id: String,
    /// The message's turn.
    pub turn_id: String,
    /// The agent message item.
    pub message_id: String,
    /// The image destination exactly as written in the message.
    pub source: String,
    /// Offset in the base64 payload (default 0).
    #[serde(default)]
    pub offset: Option<u64>,
    /// A JPEG thumbnail (≤ 384 px) instead of the image.
    #[serde(default)]
    pub preview: Option<bool>,
    /// sha256 (hex) of `media_type + "\0" + base64 data` from an earlier chunk: a
    /// mismatch is refused (the file changed between chunks).
    #[serde(default)]
    pub sha256: Option<String>,
    /// Channel message sequence (channels only; refused here).
    #[serde(default)]
    pub seq: Option<u64>,
}

/// `message/image/read` result: loop until `offset + len(data) == total`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MessageImageReadResult {
    /// Base64 slice of at most 128 KiB characters.
    pub data: String,
    /// Length of the whole base64 payload, in characters.
    pub total: u64,
    /// Offset of `data` in the payload.
    pub offset: u64,
    /// The media type of the payload (`image/jpeg` for a preview).
    pub content_type: String,
    /// Same as `content_type`.
    pub media_type: String,
    /// sha256 (hex) of `media_type + "\0" + data` of the whole original image.
    pub sha256: String,
}
