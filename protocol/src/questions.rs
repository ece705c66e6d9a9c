//! User questions (`user-question/*`, spec `app-server.md` §3.5, §4.7; seed "回答原生引擎
//! 问题"): the model's `ask_user` tool raises a question, the client shows it and answers
//! (or cancels, skips, holds) through the methods below.
//!
//! Opt-in: a client receives questions only when it lists `"user-question"` in
//! `initialize.params.capabilities.notifications`; otherwise `ask_user` is not offered.
//!
//! Life of a question (`request_id`): `user-question/requested` → zero or more
//! `user-question/hold` → exactly one `user-question/resolved` whose `outcome` is
//! `answered` | `cancelled` | `skipped` | `expired` | `revoked`. After it, every method
//! naming the `request_id` fails with code `error` ("already answered", "was revoked",
//! …). Only `answered` returns an answer to the model; every other outcome returns
//! "no answer" — never an automatically chosen option.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One option of a question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct QuestionOption {
    /// What the user picks; answers name options by this label.
    pub label: String,
    /// Longer explanation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// One question of a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Question {
    /// Id of the question inside its request (answers name it); unique per request.
    pub id: String,
    /// The question text.
    pub question: String,
    /// Short heading (a chip or tab label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub header: Option<String>,
    /// Extra detail shown under the question.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Choices; empty → a free-text question.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<QuestionOption>,
    /// Several options may be selected.
    #[serde(default)]
    pub multi_select: bool,
    /// Free text (`custom`) is accepted besides the options (always true when there
    /// are no options).
    #[serde(default)]
    pub allow_custom: bool,
}

/// An open (or settled) question request, as listed and notified.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserQuestionRequest {
    /// Server-minted id (`uq_…`), valid only while this host process runs.
    pub request_id: String,
    /// The owning conversation.
    pub thread_id: String,
    /// The owning turn; the question is revoked when this turn ends.
    pub turn_id: String,
    /// The model's tool call that asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// `ask` (a form: waits until answered, cancelled or the turn ends) | `offer` (a
    /// skippable card that expires after 20 s unless held).
    pub mode: String,
    /// The questions, in order.
    pub questions: Vec<Question>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339; only for `offer` questions that are not held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// `user-question/hold` paused the expiry.
    #[serde(default)]
    pub held: bool,
    /// The answer returns directly to the waiting tool call: the client must not also
    /// send it as a message or steer. Always true for the built-in `ask_user` tool.
    pub reply_to_tool: bool,
}

/// The answer to one question.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionAnswer {
    /// The question's `id`.
    pub id: String,
    /// Labels of the selected options (at most one unless `multi_select`).
    #[serde(default)]
    pub selected: Vec<String>,
    /// Free text (only where `allow_custom` or the question has no options).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom: Option<String>,
}

/// `{answers: [...]}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionAnswerSet {
    /// One entry per answered question (at least one).
    pub answers: Vec<QuestionAnswer>,
}

/// `user-question/list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserQuestionListParams {
    /// Only this conversation's questions.
    #[serde(default)]
    pub thread_id: Option<String>,
}

/// `user-question/list` result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserQuestionListResult {
    /// Open questions, oldest first.
    pub questions: Vec<UserQuestionRequest>,
}

/// `user-question/respond`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserQuestionRespondParams {
    /// The request.
    pub request_id: String,
    /// The answers.
    pub answer: QuestionAnswerSet,
    /// Accepted for compatibility; must be true when given (answers always return to the
    /// waiting tool call).
    #[serde(default)]
    pub reply_to_tool: Option<bool>,
}

/// `user-question/cancel`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserQuestionCancelParams {
    /// The request.
    pub request_id: String,
    /// Skip an `offer` card (outcome `skipped` instead of `cancelled`; refused for
    /// `ask` questions).
    #[serde(default)]
    pub skip: Option<bool>,
}

/// `user-question/hold`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UserQuestionHoldParams {
    /// The request.
    pub request_id: String,
}

/// Result of `user-question/respond`, `cancel` (`resolved: true`) and `hold`
/// (`resolved: false`: the question stays open without expiry).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserQuestionResolveResult {
    /// The request.
    pub request_id: String,
    /// Whether the question is now settled.
    pub resolved: bool,
}

/// `user-question/requested`: a question awaits the user.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserQuestionRequested {
    /// The owning conversation.
    pub thread_id: String,
    /// The owning turn.
    pub turn_id: String,
    /// The request id.
    pub request_id: String,
    /// The request.
    pub request: UserQuestionRequest,
}

/// `user-question/resolved`: the question settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UserQuestionResolved {
    /// The owning conversation.
    pub thread_id: String,
    /// The owning turn.
    pub turn_id: String,
    /// The request id.
    pub request_id: String,
    /// `answered` | `cancelled` | `skipped` | `expired` | `revoked`.
    pub outcome: String,
    /// The answer (only for `answered`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<QuestionAnswerSet>,
    /// Why (e.g. "the turn ended", "the server is shutting down").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// RFC 3339.
    pub resolved_at: String,
}
