//! The table of server → client notifications (spec §4) and their params.

use crate::activity::{ActivityControlChanged, ActivityStarted, ActivityStopped, ActivityUpdated};
use crate::agents::{AgentMailbox, AgentUpdated};
use crate::browser::BrowserRequestCancelled;
use crate::mcp::McpServerStatus;
use crate::methods::ThreadResumeResult;
use crate::panels::{ConfigChanged, ConfigError};
use crate::questions::{UserQuestionRequested, UserQuestionResolved};
use crate::run::{RunStarted, RunUpdated};
use crate::side::SideThreadEvent;
use crate::thread::*;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Schema facts of one notification row.
pub struct NotificationInfo {
    /// Wire name.
    pub name: &'static str,
    /// Rust name of the params type.
    pub params_type: &'static str,
    /// Schema of the params.
    pub params_schema: fn(&mut SchemaGenerator) -> Schema,
}

/// A typed notification: names its wire method.
pub trait ServerNotification: Serialize {
    /// The wire method, e.g. `turn/started`.
    const METHOD: &'static str;
}

macro_rules! notifications {
    ($( $wire:literal => $params:ident; )*) => {
        $( impl ServerNotification for $params { const METHOD: &'static str = $wire; } )*
        /// Every notification, in table order.
        pub const NOTIFICATIONS: &[NotificationInfo] = &[
            $( NotificationInfo {
                name: $wire,
                params_type: stringify!($params),
                params_schema: |g| g.subschema_for::<$params>(),
            }, )*
        ];
    };
}

notifications! {
    "thread/started" => ThreadStarted;
    "thread/resumed" => ThreadResumed;
    "thread/updated" => ThreadUpdated;
    "run/started" => RunStarted;
    "run/updated" => RunUpdated;
    "turn/started" => TurnStarted;
    "turn/completed" => TurnCompleted;
    "turn/error" => TurnErrorNotification;
    "turn/usage" => TurnUsage;
    "turn/event" => TurnEvent;
    "turn/queued" => TurnQueued;
    "turn/dequeued" => TurnDequeued;
    "turn/steered" => TurnSteered;
    "turn/unsteered" => TurnUnsteered;
    "turn/held" => TurnHeld;
    "item/started" => ItemStarted;
    "item/completed" => ItemCompleted;
    "item/removed" => ItemRemoved;
    "item/agentMessage/delta" => AgentMessageDelta;
    "item/agentMessage/replace" => AgentMessageReplace;
    "item/reasoning/delta" => ReasoningDelta;
    "item/reasoning/replace" => ReasoningReplace;
    "item/toolCall/delta" => ToolCallDelta;
    "item/toolCall/outputDelta" => ToolCallOutputDelta;
    "protocol/error" => ProtocolError;
    "user-question/requested" => UserQuestionRequested;
    "user-question/resolved" => UserQuestionResolved;
    "browser/request_cancelled" => BrowserRequestCancelled;
    "config/changed" => ConfigChanged;
    "config/error" => ConfigError;
    "sideThread/event" => SideThreadEvent;
    "activity/started" => ActivityStarted;
    "activity/updated" => ActivityUpdated;
    "activity/control_changed" => ActivityControlChanged;
    "activity/stopped" => ActivityStopped;
    "mcp/status/updated" => McpServerStatus;
    "agent/updated" => AgentUpdated;
    "agent/mailbox" => AgentMailbox;
}

/// `thread/started {thread}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadStarted {
    /// The new conversation.
    pub thread: Thread,
}

/// `thread/resumed` (same payload as the `thread/resume` result).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadResumed(pub ThreadResumeResult);

/// `thread/updated {thread}`: a full snapshot; apply by id, keep the higher
/// `title_revision`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadUpdated {
    /// The conversation.
    pub thread: Thread,
}

/// `turn/started {thread_id, turn, queue_id?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnStarted {
    /// The conversation.
    pub thread_id: String,
    /// The admitted turn (its user item included).
    pub turn: Turn,
    /// Set when a queued entry was admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_id: Option<String>,
    /// The run this turn belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `turn/completed` (seed): the turn settled (also for `interrupted`; read
/// `turn.status`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnCompleted {
    /// The conversation.
    pub thread_id: String,
    /// The settled turn.
    pub turn: Turn,
    /// Final answer text.
    pub content: String,
    /// Fresh input tokens of the turn.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache creation tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_tokens: Option<u64>,
    /// Cache read tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_tokens: Option<u64>,
    /// Provider finish reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Provider stop reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Output hit the limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// JSONL trace of the conversation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_path: Option<String>,
    /// Another turn of the same run follows.
    #[serde(default)]
    pub awaiting_auto_continuation: bool,
}

/// `turn/error`: the turn failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnErrorNotification {
    /// The conversation.
    pub thread_id: String,
    /// The failed turn.
    pub turn_id: String,
    /// Error text.
    pub error: String,
    /// Error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Error category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<String>,
    /// Provider id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// HTTP status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    /// The settled turn (`turn.error` holds the structured error).
    pub turn: Turn,
}

/// `turn/usage`: a cumulative snapshot for the turn (not a delta).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUsage {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// Model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Fresh input tokens.
    pub input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
    /// Cache creation tokens.
    pub cache_creation_tokens: u64,
    /// Cache read tokens.
    pub cache_read_tokens: u64,
    /// Reasoning tokens (part of output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Context size of the last request: its input tokens including cached ones
    /// (the composer's context meter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// Context window of the turn's model, from the model catalog (or the provider's
    /// `context_window` in the config), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window_tokens: Option<u64>,
}

/// Kinds of `turn/event` whose payload is nested under a member named like the kind
/// (the desktop renderer reads `event.request_context`, `event.provider_state`,
/// `event.lifecycle`).
pub const NESTED_TURN_EVENTS: &[&str] = &["request_context", "provider_state", "lifecycle"];

/// The wire form of a `turn/event` payload: a flat `{type: K, …fields}` of a kind in
/// [`NESTED_TURN_EVENTS`] becomes `{type: K, K: {…fields}}`; other kinds and payloads
/// that are already nested are returned unchanged.
pub fn nest_turn_event(event: Value) -> Value {
    let Value::Object(mut m) = event else {
        return event;
    };
    let kind = match m.get("type").and_then(Value::as_str) {
        Some(k) if NESTED_TURN_EVENTS.contains(&k) => k.to_owned(),
        _ => return Value::Object(m),
    };
    if m.get(&kind).is_some_and(Value::is_object) {
        return Value::Object(m);
    }
    m.remove("type");
    let mut out = serde_json::Map::new();
    out.insert("type".into(), Value::String(kind.clone()));
    out.insert(kind, Value::Object(m));
    Value::Object(out)
}

/// `turn/event {thread_id, turn_id, event}`: typed diagnostics (`request_context`,
/// `provider_state`, `todo_update`, …). `event.type` names the kind; the payload of the
/// kinds in [`NESTED_TURN_EVENTS`] is `event.<kind>` (see [`nest_turn_event`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnEvent {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// `{type, …payload}`.
    pub event: Value,
}

/// `item/started`: upsert by item id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItemStarted {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The item.
    pub item: ThreadItem,
    /// Unix ms.
    pub started_at_ms: u64,
}

/// `item/completed`: upsert with the final state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItemCompleted {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The item.
    pub item: ThreadItem,
    /// Unix ms.
    pub completed_at_ms: u64,
}

/// `item/removed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ItemRemoved {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The removed item.
    pub item_id: String,
    /// Unix ms.
    pub removed_at_ms: u64,
}

macro_rules! delta_type {
    ($name:ident, $field:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
        pub struct $name {
            /// The conversation.
            pub thread_id: String,
            /// The turn.
            pub turn_id: String,
            /// The item.
            pub item_id: String,
            /// The text.
            pub $field: String,
        }
    };
}

delta_type!(
    AgentMessageDelta,
    delta,
    "`item/agentMessage/delta`: append."
);
delta_type!(
    AgentMessageReplace,
    text,
    "`item/agentMessage/replace`: replace."
);
delta_type!(ReasoningDelta, delta, "`item/reasoning/delta`: append.");
delta_type!(ReasoningReplace, text, "`item/reasoning/replace`: replace.");
delta_type!(
    ToolCallDelta,
    delta,
    "`item/toolCall/delta`: append to `arguments`."
);

/// `item/toolCall/outputDelta`: tool output as it streams.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ToolCallOutputDelta {
    /// The conversation.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The tool item.
    pub item_id: String,
    /// Output text.
    pub delta: String,
    /// `stdout` | `stderr` for commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<String>,
}

/// `protocol/error`: a problem with a line that had no usable id.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProtocolError {
    /// Error code.
    pub code: String,
    /// Detail.
    pub message: String,
}

/// `turn/queued {queued, message}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnQueued {
    /// The entry.
    pub queued: crate::input::QueuedTurn,
    /// The message.
    pub message: crate::input::HeldUserMessage,
}

/// `turn/dequeued {thread_id, queue_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnDequeued {
    /// The conversation.
    pub thread_id: String,
    /// The entry.
    pub queue_id: String,
}

/// `turn/steered {message}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnSteered {
    /// The steer (origin `steer`).
    pub message: crate::input::HeldUserMessage,
}

/// `turn/unsteered {thread_id, steer_id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnUnsteered {
    /// The conversation.
    pub thread_id: String,
    /// The steer.
    pub steer_id: String,
}

/// `turn/held {thread_id, messages, error?}`: the complete current list of held
/// messages (replace, don't append).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnHeld {
    /// The conversation.
    pub thread_id: String,
    /// Every held message.
    pub messages: Vec<crate::input::HeldUserMessage>,
    /// Why an entry was moved to held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
