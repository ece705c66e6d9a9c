//! The provider-neutral chat vocabulary (spec `providers.md` §6.1): the request a
//! provider is given ([`ChatRequest`] with its [`ChatMessage`] history and [`ToolSpec`]s),
//! the normalized [`StreamEvent`]s it answers with, and the [`Usage`] and
//! [`ProviderError`] those carry. Engine, tools and the three wire protocols all speak
//! these types; none of them knows a wire format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::toolset::{ToolSpec, Tools};

/// A conversation role in provider-neutral history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The user (also: host guide messages that are never persisted).
    User,
    /// The model.
    Assistant,
    /// A tool result (`tool_call_id` names the call).
    Tool,
}

/// An image given to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageInput {
    /// MIME type, e.g. `image/png`.
    pub media_type: String,
    /// Base64 payload (no `data:` prefix).
    pub data: String,
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Provider call id (`call_…`, `toolu_…`); synthesized when the provider sent none.
    pub id: String,
    /// Tool name.
    pub name: String,
    /// Arguments as JSON text (complete).
    pub arguments: String,
    /// Responses API item id (`fc_…`), replayed only to the provider/model that made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
}

/// A reasoning block, replayed only to the provider and model that produced it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningBlock {
    /// Provider id that produced it.
    pub provider: String,
    /// Model that produced it.
    pub model: String,
    /// Readable reasoning text (summary or thinking text).
    pub text: String,
    /// Anthropic thinking signature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
    /// Anthropic redacted thinking data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redacted: Option<String>,
    /// Responses reasoning item as received (status stripped before replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<Value>,
}

/// One message of provider-neutral history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Role.
    pub role: Role,
    /// Visible text.
    #[serde(default)]
    pub content: String,
    /// Images (user messages).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<ImageInput>,
    /// Reasoning that preceded this assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasoning: Vec<ReasoningBlock>,
    /// Tool calls of an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For `Role::Tool`: the call answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `Role::Tool`: the result is an error.
    #[serde(default)]
    pub is_error: bool,
    /// Provider id that produced an assistant message (for replay decisions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Model that produced an assistant message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Responses API message item id (`msg_…`), same-model replay only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<String>,
}

impl ChatMessage {
    /// A plain text message.
    pub fn text(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            images: vec![],
            reasoning: vec![],
            tool_calls: vec![],
            tool_call_id: None,
            is_error: false,
            provider: None,
            model: None,
            item_id: None,
        }
    }
}

/// A provider-neutral request.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// Model id as the provider knows it.
    pub model: String,
    /// System prompt (instructions).
    pub system: String,
    /// History, normalized (see `engine::history`).
    pub messages: Vec<ChatMessage>,
    /// Tools offered (shared: a clone is a reference count).
    pub tools: Tools,
    /// Reasoning effort (`low` | `medium` | `high` …), when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Output limit in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// Cache routing hint (≤ 64 chars), e.g. the thread id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache_key: Option<String>,
    /// Structured output: `{name, schema}` sent as the protocol's JSON-schema format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Sampling temperature (`agent.temperature`, 0 ..= 2), sent as `temperature` by
    /// all three protocols; `None` omits the field (the provider's default). Anthropic
    /// Messages omit it while extended thinking is on (an effort is set), because that
    /// API refuses a temperature with thinking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
}

/// Token usage of one provider response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Fresh (uncached) input tokens.
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Tokens written to the prompt cache.
    pub cache_creation_tokens: u64,
    /// Reasoning tokens (part of output).
    pub reasoning_tokens: u64,
}

/// Failure categories (providers.md §6.6), mapped to turn error categories by the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// 429 rate limit (retryable).
    RateLimit,
    /// 529 / overloaded (retryable).
    Overloaded,
    /// 5xx, 408 (retryable).
    Server,
    /// Connection failure (retryable).
    Network,
    /// Stream ended or stalled before its terminal event (retryable if replay is safe).
    IncompleteStream,
    /// Prompt too long.
    ContextOverflow,
    /// 401/403.
    Authentication,
    /// Usage quota exhausted.
    Quota,
    /// 404 (model or endpoint).
    NotFound,
    /// 413.
    RequestTooLarge,
    /// Other 4xx.
    InvalidRequest,
    /// Cancelled by us.
    Cancelled,
    /// The cassette of a replay provider has no more responses, or is malformed.
    Replay,
}

/// A provider failure after retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderError {
    /// Category.
    pub kind: FailureKind,
    /// Message (provider's error text when it sent one).
    pub message: String,
    /// HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// Attempts made (first included).
    pub attempts: u32,
    /// Attempt budget.
    pub max_attempts: u32,
    /// Why retrying stopped: `non_retryable` | `retry_limit` | `replay_unsafe`.
    pub stop_reason: String,
}

/// Normalized stream events (providers.md §6.1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Visible text.
    TextDelta {
        /// Text.
        text: String,
    },
    /// Reasoning text.
    ReasoningDelta {
        /// Text.
        text: String,
    },
    /// A reasoning block finished (carries what must be replayed).
    ReasoningDone {
        /// The block.
        block: ReasoningBlock,
    },
    /// A tool call began.
    ToolCallStart {
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// More argument text for a started call.
    ToolCallDelta {
        /// Call id.
        id: String,
        /// JSON text fragment.
        delta: String,
    },
    /// A call's arguments are complete: only such calls may run.
    ToolCallEnd {
        /// The complete call.
        call: ToolCall,
    },
    /// A started call that will never run: its arguments are not complete JSON (the output
    /// limit cut it off — Chat `finish_reason:"length"`, Responses `response.incomplete`,
    /// Messages `stop_reason:"max_tokens"` — or the server ended it broken). The consumer
    /// withdraws the call: it is not executed and does not enter provider history. No
    /// [`StreamEvent::ToolCallEnd`] follows for `id`; the terminal `Done` has
    /// `truncated: true`.
    ToolCallCutOff {
        /// Call id (as in [`StreamEvent::ToolCallStart`]).
        id: String,
        /// Tool name.
        name: String,
        /// Why, for logs and the turn (e.g. `the output limit cut the arguments off`).
        reason: String,
    },
    /// A retry is about to happen (partial output of the failed attempt is void).
    Retrying {
        /// Attempt about to start (2 = first retry).
        attempt: u32,
        /// Attempt budget.
        max_attempts: u32,
        /// Wait before it, in ms.
        delay_ms: u64,
        /// Failure category of the last attempt.
        kind: FailureKind,
        /// Failure text.
        message: String,
    },
    /// The response finished.
    Done {
        /// Usage of the whole response.
        usage: Usage,
        /// Provider finish/stop reason (`stop`, `tool_calls`, `end_turn`, `tool_use`,
        /// `max_tokens`…).
        stop_reason: Option<String>,
        /// Output hit the token limit.
        truncated: bool,
        /// Responses API id / Anthropic message id.
        response_id: Option<String>,
        /// Responses message item id of the assistant text.
        message_item_id: Option<String>,
    },
    /// The request failed (after retries). Terminal.
    Failed {
        /// The error.
        error: ProviderError,
    },
}

impl StreamEvent {
    /// Whether this is a piece of streamed text or arguments (`TextDelta`,
    /// `ReasoningDelta`, `ToolCallDelta`): the events a [`StreamSink`](super::StreamSink)
    /// may hold back until its next flush.
    pub fn is_delta(&self) -> bool {
        matches!(
            self,
            StreamEvent::TextDelta { .. }
                | StreamEvent::ReasoningDelta { .. }
                | StreamEvent::ToolCallDelta { .. }
        )
    }
}
