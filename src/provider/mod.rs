//! Model providers over blocking `ureq` (spec `providers.md`).
//!
//! A provider turns a provider-neutral [`ChatRequest`] into one HTTP request of its wire
//! protocol and parses the SSE response into normalized [`StreamEvent`]s. Each call runs
//! on a short-lived helper thread ([`start_stream`]) that sends events over a bounded
//! channel, so the session thread can `select!` over the stream and its mailbox.
//!
//! Protocols: `openai-responses` (§1), `openai-compatible` = Chat Completions (§2, §5),
//! `anthropic` = Messages (§3), and `replay` (recorded streams from a cassette file).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::ProviderConfig;

pub mod anthropic;
pub mod catalog;
pub(crate) mod http;
pub mod openai_chat;
pub mod openai_responses;
pub mod registry;
pub mod replay;
pub mod retry;
pub mod sse;

pub use http::HttpProvider;
pub use replay::ReplayProvider;

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

/// A tool offered to the model: name, description, JSON Schema of the parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Tool name (e.g. `bash`).
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema (`{"type":"object","properties":{…},"required":[…]}`).
    pub parameters: Value,
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
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
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
    /// `ReasoningDelta`, `ToolCallDelta`): the events a [`StreamSink`] may hold back
    /// until its next flush.
    pub fn is_delta(&self) -> bool {
        matches!(
            self,
            StreamEvent::TextDelta { .. }
                | StreamEvent::ReasoningDelta { .. }
                | StreamEvent::ToolCallDelta { .. }
        )
    }
}

// ---------------------------------------------------------------------------------------
// The provider trait, cancellation and the streaming helper thread.
// ---------------------------------------------------------------------------------------

/// Where a provider puts the events of one request.
///
/// A sink may hold delta events ([`StreamEvent::is_delta`]) back to hand them on
/// together; every other event, and [`StreamSink::flush`], hands over everything it
/// holds. A provider calls `flush` before each wait for more input (a socket read that
/// may block), so holding back never delays an event while the provider waits: it
/// only groups the events one read delivered (issue 15: a wake-up per delta was a
/// quarter of the CPU of a streamed delta). A closure `FnMut(StreamEvent) -> bool` is a
/// sink that holds nothing back.
pub trait StreamSink {
    /// Takes one event. `false` = stop (the consumer is gone or the request cancelled).
    fn event(&mut self, ev: StreamEvent) -> bool;
    /// Hands over what is held back, before the provider waits for input. `false` =
    /// stop.
    fn flush(&mut self) -> bool {
        true
    }
}

impl<F: FnMut(StreamEvent) -> bool> StreamSink for F {
    fn event(&mut self, ev: StreamEvent) -> bool {
        self(ev)
    }
}

/// A model provider: one configured connection (`providers.<id>` in the config).
///
/// Implementations: [`HttpProvider`] (the three wire protocols over `ureq`) and
/// [`ReplayProvider`] (cassette files, no network).
pub trait Provider: Send + Sync {
    /// Config key, e.g. `"openai"`.
    fn id(&self) -> &str;

    /// Wire protocol: `"openai-responses"` | `"openai-compatible"` | `"anthropic"` |
    /// `"replay"`.
    fn protocol(&self) -> &'static str;

    /// Runs one logical request (with retries) and sends events to `sink`; stops early
    /// when `sink` returns false (receiver gone / cancelled). Always ends with exactly one
    /// [`StreamEvent::Done`] or [`StreamEvent::Failed`] unless stopped.
    fn stream(&self, req: &ChatRequest, sink: &mut dyn StreamSink) {
        self.stream_with_cancel(req, &CancelToken::new(), sink)
    }

    /// [`Provider::stream`] with a cancellation token: after [`CancelToken::cancel`] the
    /// call returns promptly without a terminal event (an HTTP read blocked on a silent
    /// socket is interrupted by shutting the connection down; a backoff wait is cut short).
    fn stream_with_cancel(
        &self,
        req: &ChatRequest,
        cancel: &CancelToken,
        sink: &mut dyn StreamSink,
    );

    /// `GET {base_url}/models` (OpenAI shape `{data:[{id}]}`; Anthropic
    /// `{data:[{id,display_name}]}`): the model ids the provider offers, in its order.
    /// Errors are classified like stream errors (no retries).
    fn list_models(&self) -> Result<Vec<String>, ProviderError>;
}

impl std::fmt::Debug for dyn Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Provider({}, {})", self.id(), self.protocol())
    }
}

/// Builds the provider `id` from its config. `config_dir` resolves relative paths (the
/// replay cassette). Types: `openai-responses`, `openai-compatible`, `anthropic`, `replay`.
///
/// API key: the environment variable named by `api_key_env`; when that is unset, the
/// default variable (`OPENAI_API_KEY` / `ANTHROPIC_API_KEY`) is used only if the base URL
/// is the vendor's own host, so a user's key is never sent to a third-party endpoint
/// implicitly. No key = no auth header (local servers).
///
/// Errors: unknown type, missing `base_url`, unreadable or malformed cassette.
pub fn build(
    id: &str,
    cfg: &ProviderConfig,
    config_dir: &Path,
) -> Result<Arc<dyn Provider>, String> {
    match cfg.provider_type.as_str() {
        "replay" => Ok(Arc::new(ReplayProvider::from_config(id, cfg, config_dir)?)),
        t => match WireProtocol::from_type(t) {
            Some(proto) => Ok(Arc::new(HttpProvider::from_config(id, proto, cfg)?)),
            None => Err(format!(
                "provider `{id}`: unknown type `{t}` (expected openai-responses, \
                 openai-compatible, anthropic or replay)"
            )),
        },
    }
}

/// One of the three HTTP wire protocols (used by both the HTTP and the replay provider).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireProtocol {
    /// OpenAI Responses API (§1).
    OpenAiResponses,
    /// OpenAI Chat Completions and compatible servers (§2, §5).
    OpenAiChat,
    /// Anthropic Messages (§3).
    Anthropic,
}

impl WireProtocol {
    /// From a config `type` / cassette `protocol` value.
    pub fn from_type(t: &str) -> Option<Self> {
        match t {
            "openai-responses" => Some(WireProtocol::OpenAiResponses),
            "openai-compatible" => Some(WireProtocol::OpenAiChat),
            "anthropic" => Some(WireProtocol::Anthropic),
            _ => None,
        }
    }

    /// The config `type` name.
    pub fn name(self) -> &'static str {
        match self {
            WireProtocol::OpenAiResponses => "openai-responses",
            WireProtocol::OpenAiChat => "openai-compatible",
            WireProtocol::Anthropic => "anthropic",
        }
    }

    /// The JSON request body for `req`, sent by provider `provider_id`.
    pub fn build_body(self, provider_id: &str, base_url: &str, req: &ChatRequest) -> Value {
        match self {
            WireProtocol::OpenAiResponses => openai_responses::build_body(provider_id, req),
            WireProtocol::OpenAiChat => openai_chat::build_body(provider_id, base_url, req),
            WireProtocol::Anthropic => anthropic::build_body(provider_id, req),
        }
    }

    /// A fresh stream parser for one attempt.
    pub(crate) fn parser(self, provider_id: &str, model: &str) -> Box<dyn WireParser> {
        match self {
            WireProtocol::OpenAiResponses => {
                Box::new(openai_responses::Parser::new(provider_id, model))
            }
            WireProtocol::OpenAiChat => Box::new(openai_chat::Parser::new(provider_id, model)),
            WireProtocol::Anthropic => Box::new(anthropic::Parser::new(provider_id, model)),
        }
    }
}

/// A protocol's SSE → [`StreamEvent`] state machine for one attempt.
pub(crate) trait WireParser: Send {
    /// Handles one SSE event, pushing normalized events to `out`. Returns `Some` when the
    /// event is terminal: the `Done` event, or the attempt's failure.
    fn on_event(
        &mut self,
        ev: &sse::SseEvent,
        out: &mut Vec<StreamEvent>,
    ) -> Option<Result<StreamEvent, retry::AttemptError>>;

    /// The stream ended (EOF) without a terminal event.
    fn on_eof(&mut self, out: &mut Vec<StreamEvent>) -> Result<StreamEvent, retry::AttemptError>;

    /// A complete (non-streamed) JSON answer `v` to a streaming request, as the `data:`
    /// payloads of the equivalent stream (fed through [`WireParser::on_event`]); `None`
    /// when `v` is not an answer of this protocol.
    fn json_body_events(&self, v: &Value) -> Option<Vec<String>>;
}

/// Feeds the `data:` payloads `datas` through `parser` as SSE events (see
/// [`WireParser::json_body_events`]), forwarding events to `sink`.
pub(crate) fn drive_payloads(
    datas: Vec<String>,
    parser: &mut dyn WireParser,
    sink: &mut dyn StreamSink,
) -> retry::AttemptOutcome {
    use retry::AttemptOutcome;
    let mut out = Vec::new();
    let mut end = None;
    for data in datas {
        let ev = sse::SseEvent {
            event: None,
            data,
            id: None,
        };
        if let Some(t) = parser.on_event(&ev, &mut out) {
            end = Some(t);
            break;
        }
    }
    let end = end.unwrap_or_else(|| parser.on_eof(&mut out));
    for ev in out {
        if !sink.event(ev) {
            return AttemptOutcome::Stopped;
        }
    }
    match end {
        Ok(done) => AttemptOutcome::Done(done),
        Err(e) => AttemptOutcome::Failed(e),
    }
}

/// Test helper: feeds a whole SSE `body` through `parser`, returning the events it
/// pushed and its terminal result (or its end-of-stream verdict).
#[cfg(test)]
pub(crate) fn parse_body(
    parser: &mut dyn WireParser,
    body: &str,
) -> (Vec<StreamEvent>, Result<StreamEvent, retry::AttemptError>) {
    let mut out = vec![];
    let mut r = sse::SseReader::new(body.as_bytes());
    while let Some(ev) = r.next_event().expect("in-memory SSE") {
        if let Some(t) = parser.on_event(&ev, &mut out) {
            return (out, t);
        }
    }
    let t = parser.on_eof(&mut out);
    (out, t)
}

/// Parses a `data:` payload as JSON; `None` (logged) when it is not JSON.
pub(crate) fn parse_data(ev: &sse::SseEvent) -> Option<Value> {
    match serde_json::from_str::<Value>(&ev.data) {
        Ok(v) => Some(v),
        Err(e) => {
            // The length only: a piece of a secret split across events would pass the
            // log redactor, which sees one line at a time.
            log::warn!("ignoring non-JSON SSE data ({e}; {} bytes)", ev.data.len());
            None
        }
    }
}

/// Feeds an SSE body through `parser`, forwarding events to `sink`, until a terminal
/// event, EOF, an I/O error (a read timeout = stalled stream), or cancellation. The sink
/// is flushed before every read of `reader` ([`StreamSink::flush`]).
pub(crate) fn drive_sse<R: std::io::BufRead>(
    reader: R,
    parser: &mut dyn WireParser,
    cancel: &CancelToken,
    sink: &mut dyn StreamSink,
) -> retry::AttemptOutcome {
    use retry::{AttemptError, AttemptOutcome};
    let mut sse = sse::SseReader::new(reader);
    let mut out = Vec::new();
    loop {
        if cancel.is_cancelled() {
            return AttemptOutcome::Stopped;
        }
        // Before a read that may wait, the sink hands over what it holds.
        let mut stopped = false;
        let mut flush = || {
            stopped = !sink.flush();
            !stopped
        };
        let step = match sse.next_event_ref_or(&mut flush) {
            Ok(Some(ev)) => parser.on_event(ev, &mut out),
            Ok(None) => {
                if stopped || cancel.is_cancelled() {
                    return AttemptOutcome::Stopped;
                }
                Some(parser.on_eof(&mut out))
            }
            Err(e) => {
                if cancel.is_cancelled() {
                    return AttemptOutcome::Stopped;
                }
                let stalled = matches!(
                    e.kind(),
                    std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
                ) || e.to_string().to_ascii_lowercase().contains("timeout");
                Some(Err(AttemptError::incomplete(if stalled {
                    format!("stream stalled: no data within the idle timeout ({e})")
                } else {
                    format!("stream interrupted: {e}")
                })))
            }
        };
        for ev in out.drain(..) {
            if !sink.event(ev) {
                return AttemptOutcome::Stopped;
            }
        }
        match step {
            None => {}
            Some(Ok(done)) => return AttemptOutcome::Done(done),
            Some(Err(e)) => return AttemptOutcome::Failed(e),
        }
    }
}

/// Cancellation of one logical request, shared between the consumer and the thread
/// running it. Cloning shares the token.
#[derive(Clone, Debug)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Debug)]
struct CancelInner {
    cancelled: AtomicBool,
    /// Dropped on cancel: wakes every `select!`/`recv_timeout` on `wake_rx` at once.
    wake_tx: Mutex<Option<Sender<()>>>,
    wake_rx: Receiver<()>,
    /// The HTTP agent of the attempt in flight; shut down on cancel.
    agent: Mutex<Option<ureq::Agent>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(0);
        CancelToken {
            inner: Arc::new(CancelInner {
                cancelled: AtomicBool::new(false),
                wake_tx: Mutex::new(Some(tx)),
                wake_rx: rx,
                agent: Mutex::new(None),
            }),
        }
    }

    /// Cancels: sets the flag, wakes waiters and shuts down the connection in flight.
    /// Idempotent.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        lock(&self.inner.wake_tx).take();
        if let Some(agent) = lock(&self.inner.agent).take() {
            agent.shutdown();
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// A receiver that becomes disconnected when the token is cancelled (for `select!`).
    pub fn wake_receiver(&self) -> &Receiver<()> {
        &self.inner.wake_rx
    }

    /// Sleeps up to `d`; returns true (early) if cancelled.
    pub fn sleep(&self, d: Duration) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let _ = self.inner.wake_rx.recv_timeout(d);
        self.is_cancelled()
    }

    /// Registers the agent of the attempt in flight (replacing the previous one). When
    /// already cancelled, shuts it down at once and returns false.
    pub(crate) fn set_agent(&self, agent: &ureq::Agent) -> bool {
        let mut slot = lock(&self.inner.agent);
        if self.is_cancelled() {
            drop(slot);
            agent.clone().shutdown();
            return false;
        }
        *slot = Some(agent.clone());
        true
    }

    /// Forgets the attempt's agent.
    pub(crate) fn clear_agent(&self) {
        lock(&self.inner.agent).take();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Most events in one batch of a [`StreamHandle`]. A provider thread with much of an
/// answer in its socket buffer (a fast server, a replayed stream) hands on at most this
/// many deltas at once.
pub const STREAM_BATCH_EVENTS: usize = 32;

/// Capacity of the [`StreamHandle`] batch channel, in batches: with
/// [`STREAM_BATCH_EVENTS`] at most 128 events wait for the consumer. Small enough that a
/// provider thread with a whole answer in its socket parses a slice of it and yields,
/// instead of the entire answer in one go while 199 other conversations wait for a CPU
/// to start theirs (issue 15: with 1,024 events the first streams to be scheduled
/// finished before the last ones began).
pub const STREAM_CHANNEL_CAPACITY: usize = 4;

/// A provider stream running on a helper thread.
///
/// Events arrive in order on `batches` (bounded, [`STREAM_CHANNEL_CAPACITY`] batches of
/// 1..=[`STREAM_BATCH_EVENTS`] events; a full channel blocks the helper — backpressure,
/// never drops). A batch is what one read of the provider's stream delivered, cut at
/// the batch size and after every event that is not a delta; it is sent before the
/// helper waits for more input, so grouping never delays an event. The channel
/// disconnects when the helper ends: after the terminal `Done`/`Failed`, or promptly
/// after [`StreamHandle::cancel`]. Dropping the handle cancels.
///
/// [`StreamHandle::recv_timeout`] reads event by event; `select!` over `batches` reads
/// batch by batch (not both on one handle: a batch taken by `select!` is the caller's).
#[derive(Debug)]
pub struct StreamHandle {
    /// Normalized events of the request, in batches (never empty).
    pub batches: Receiver<Vec<StreamEvent>>,
    /// The rest of the batch [`StreamHandle::recv_timeout`] is reading.
    pending: std::vec::IntoIter<StreamEvent>,
    cancel: CancelToken,
}

impl StreamHandle {
    /// The next event, waiting up to `timeout` for the next batch. Errors: `Timeout`, or
    /// `Disconnected` once the helper ended and every event was read.
    pub fn recv_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<StreamEvent, crossbeam_channel::RecvTimeoutError> {
        loop {
            if let Some(ev) = self.pending.next() {
                return Ok(ev);
            }
            self.pending = self.batches.recv_timeout(timeout)?.into_iter();
        }
    }

    /// Every event until the helper ends (blocking).
    pub fn events(&mut self) -> impl Iterator<Item = StreamEvent> + '_ {
        std::mem::take(&mut self.pending).chain(self.batches.iter().flatten())
    }

    /// Stops the helper at its next event or read (a blocked socket read is interrupted);
    /// no terminal event follows.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// The token, e.g. to cancel from another thread.
    pub fn cancel_token(&self) -> CancelToken {
        self.cancel.clone()
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// The helper thread's sink: groups deltas into batches of up to
/// [`STREAM_BATCH_EVENTS`] and sends them over the bounded channel.
struct Batcher {
    tx: Sender<Vec<StreamEvent>>,
    token: CancelToken,
    wake: Receiver<()>,
    batch: Vec<StreamEvent>,
}

impl Batcher {
    /// Sends the batch (waiting while the channel is full); false = stop.
    fn send(&mut self) -> bool {
        if self.batch.is_empty() {
            return true;
        }
        if self.token.is_cancelled() {
            return false;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(STREAM_BATCH_EVENTS));
        // Room in the channel (the usual case): no select.
        let batch = match self.tx.try_send(batch) {
            Ok(()) => return true,
            Err(crossbeam_channel::TrySendError::Full(b)) => b,
            Err(crossbeam_channel::TrySendError::Disconnected(_)) => return false,
        };
        crossbeam_channel::select! {
            send(self.tx, batch) -> r => r.is_ok(),
            recv(self.wake) -> _ => false,
        }
    }
}

impl StreamSink for Batcher {
    fn event(&mut self, ev: StreamEvent) -> bool {
        if self.token.is_cancelled() {
            return false;
        }
        let delta = ev.is_delta();
        self.batch.push(ev);
        if delta && self.batch.len() < STREAM_BATCH_EVENTS {
            return true;
        }
        self.send()
    }

    fn flush(&mut self) -> bool {
        self.send()
    }
}

/// Runs `p.stream(req)` on a helper thread (named `provider-<id>`); see [`StreamHandle`].
pub fn start_stream(p: Arc<dyn Provider>, req: ChatRequest) -> StreamHandle {
    let (tx, rx) = crossbeam_channel::bounded(STREAM_CHANNEL_CAPACITY);
    let cancel = CancelToken::new();
    let token = cancel.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("provider-{}", p.id()))
        .spawn(move || {
            let mut sink = Batcher {
                tx,
                wake: token.wake_receiver().clone(),
                token: token.clone(),
                batch: Vec::with_capacity(STREAM_BATCH_EVENTS),
            };
            p.stream_with_cancel(&req, &token, &mut sink);
            // A provider that returned without a last flush (stopped early).
            sink.flush();
        });
    if let Err(e) = spawned {
        log::error!("cannot spawn provider thread: {e}");
        let (tx2, rx2) = crossbeam_channel::bounded(1);
        let _ = tx2.send(vec![StreamEvent::Failed {
            error: ProviderError {
                kind: FailureKind::Network,
                message: format!("cannot spawn provider thread: {e}"),
                status_code: None,
                attempts: 0,
                max_attempts: 0,
                stop_reason: "non_retryable".into(),
            },
        }]);
        return StreamHandle {
            batches: rx2,
            pending: Vec::new().into_iter(),
            cancel,
        };
    }
    StreamHandle {
        batches: rx,
        pending: Vec::new().into_iter(),
        cancel,
    }
}

/// A tool's parameter schema as sent: a `{"type":"object"}` schema lacking `properties`
/// gets `"properties":{}` (some providers reject it otherwise; §1.1, what wuu does); a
/// null schema becomes an empty object schema.
pub(crate) fn normalize_schema(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Value::Object(m) = &mut s {
        if m.get("type").and_then(Value::as_str) == Some("object") && !m.contains_key("properties")
        {
            m.insert("properties".into(), Value::Object(Default::default()));
        }
    }
    if s.is_null() {
        return serde_json::json!({"type":"object","properties":{}});
    }
    s
}

/// `(name, schema, strict)` of [`ChatRequest::output_schema`]: either `{name, schema,
/// strict?}` or a bare JSON Schema (named `output`).
pub(crate) fn output_schema_parts(v: &Value) -> (String, Value, bool) {
    match v.get("schema") {
        Some(schema) if schema.is_object() => (
            v.get("name")
                .and_then(Value::as_str)
                .unwrap_or("output")
                .to_string(),
            schema.clone(),
            v.get("strict").and_then(Value::as_bool).unwrap_or(false),
        ),
        _ => ("output".to_string(), v.clone(), false),
    }
}

/// Whether replay state (reasoning, item ids) of `provider`/`model` may be sent to
/// `provider_id`/`req_model`.
pub(crate) fn same_origin(provider: &str, model: &str, provider_id: &str, req_model: &str) -> bool {
    provider == provider_id && model == req_model
}

/// How a finished call's argument text ends up: `Ok(arguments)` (an empty text becomes
/// `{}`, for tools without parameters) or `Err(reason)` when the call must not run: the
/// text is not complete JSON, or it is empty while the output was cut off (`truncated`).
pub(crate) fn finished_arguments(args: &str, truncated: bool) -> Result<String, String> {
    if args.trim().is_empty() {
        if truncated {
            return Err("the output limit cut the call off before its arguments".into());
        }
        return Ok("{}".into());
    }
    match serde_json::from_str::<Value>(args) {
        Ok(_) => Ok(args.to_string()),
        Err(_) if truncated => Err(format!(
            "the output limit cut the arguments off after {} bytes",
            args.len()
        )),
        Err(e) => Err(format!(
            "the arguments are not complete JSON ({e}) after {} bytes",
            args.len()
        )),
    }
}

/// A unique synthesized tool-call id (`call_<24 hex>`), for servers that send none.
pub(crate) fn synth_call_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("call_{}", &u[..24])
}

/// Lists a provider's models (`GET …/models`) for the catalog refresh; errors are the
/// provider's message.
pub fn list_models(
    id: &str,
    cfg: &crate::config::ProviderConfig,
    config_dir: &Path,
) -> Result<Vec<String>, String> {
    build(id, cfg, config_dir)?
        .list_models()
        .map_err(|e| e.message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::io::Read;
    use std::rc::Rc;

    /// A body that hands out `chunks` one per read, logging each read.
    struct Chunks {
        chunks: std::collections::VecDeque<&'static str>,
        log: Rc<RefCell<Vec<String>>>,
    }

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some(c) = self.chunks.pop_front() else {
                return Ok(0);
            };
            self.log.borrow_mut().push(format!("read {c:?}"));
            buf[..c.len()].copy_from_slice(c.as_bytes());
            Ok(c.len())
        }
    }

    /// A sink that holds every delta until flushed, logging what each flush hands over.
    struct Holding {
        held: Vec<String>,
        log: Rc<RefCell<Vec<String>>>,
    }

    impl StreamSink for Holding {
        fn event(&mut self, ev: StreamEvent) -> bool {
            match ev {
                StreamEvent::TextDelta { text } => self.held.push(text),
                other => panic!("unexpected {other:?}"),
            }
            true
        }
        fn flush(&mut self) -> bool {
            if !self.held.is_empty() {
                let held = std::mem::take(&mut self.held).join(",");
                self.log.borrow_mut().push(format!("flush {held}"));
            }
            true
        }
    }

    fn chat_delta(text: &str) -> String {
        format!("data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}}}}]}}\n\n")
    }

    #[test]
    fn drive_sse_flushes_what_it_parsed_before_every_read_that_may_wait() {
        // The first read ends inside the third event: A and B must be handed over before
        // the read that waits for the rest of C (holding them there would delay them by
        // however long the network takes).
        let a = chat_delta("A") + &chat_delta("B");
        let c = chat_delta("C");
        let (c1, c2) = c.split_at(20);
        let first: &'static str = Box::leak(format!("{a}{c1}").into_boxed_str());
        let second: &'static str = Box::leak(c2.to_owned().into_boxed_str());
        let log = Rc::new(RefCell::new(vec![]));
        let body = Chunks {
            chunks: [first, second, "data: [DONE]\n\n"].into(),
            log: log.clone(),
        };
        let mut sink = Holding {
            held: vec![],
            log: log.clone(),
        };
        let mut parser = openai_chat::Parser::new("p", "m");
        let outcome = drive_sse(
            std::io::BufReader::new(body),
            &mut parser,
            &CancelToken::new(),
            &mut sink,
        );
        assert!(matches!(outcome, retry::AttemptOutcome::Done(_)));
        let log = log.borrow();
        let at = |what: &str| {
            log.iter()
                .position(|l| l == what)
                .unwrap_or_else(|| panic!("no {what:?} in {log:#?}"))
        };
        assert!(
            at("flush A,B") < at(&format!("read {second:?}")),
            "{log:#?}"
        );
        assert!(
            at("flush C") < at("read \"data: [DONE]\\n\\n\""),
            "{log:#?}"
        );
    }

    /// Emits `deltas` text deltas, flushes, waits for `gate`, then a tool call start and
    /// `Done`.
    struct Gated {
        deltas: usize,
        gate: Receiver<()>,
    }

    impl Provider for Gated {
        fn id(&self) -> &str {
            "gated"
        }
        fn protocol(&self) -> &'static str {
            "replay"
        }
        fn stream_with_cancel(
            &self,
            _req: &ChatRequest,
            _cancel: &CancelToken,
            sink: &mut dyn StreamSink,
        ) {
            for i in 0..self.deltas {
                if !sink.event(StreamEvent::TextDelta {
                    text: i.to_string(),
                }) {
                    return;
                }
            }
            if !sink.flush() || self.gate.recv().is_err() {
                return;
            }
            sink.event(StreamEvent::ToolCallStart {
                id: "c".into(),
                name: "t".into(),
            });
            sink.event(StreamEvent::TextDelta { text: "x".into() });
            sink.event(StreamEvent::Done {
                usage: Usage::default(),
                stop_reason: None,
                truncated: false,
                response_id: None,
                message_item_id: None,
            });
        }
        fn list_models(&self) -> Result<Vec<String>, ProviderError> {
            Ok(vec![])
        }
    }

    fn request() -> ChatRequest {
        ChatRequest {
            model: "m".into(),
            ..Default::default()
        }
    }

    #[test]
    fn stream_batches_are_bounded_in_order_and_a_flush_hands_them_over() {
        let n = STREAM_BATCH_EVENTS * 2 + 5;
        let (gate_tx, gate) = crossbeam_channel::bounded(1);
        let h = start_stream(Arc::new(Gated { deltas: n, gate }), request());
        // All the deltas arrive while the provider waits at its gate (after its flush).
        let mut texts = vec![];
        while texts.len() < n {
            let batch = h
                .batches
                .recv_timeout(Duration::from_secs(10))
                .expect("the flushed deltas arrive without the end of the stream");
            assert!(!batch.is_empty() && batch.len() <= STREAM_BATCH_EVENTS);
            for ev in batch {
                match ev {
                    StreamEvent::TextDelta { text } => texts.push(text),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        let expected: Vec<String> = (0..n).map(|i| i.to_string()).collect();
        assert_eq!(texts, expected);
        assert!(h.batches.is_empty());
        gate_tx.send(()).unwrap();
        // A non-delta event ends its batch at once; the delta after it travels with `Done`.
        let b1 = h.batches.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(b1.as_slice(), [StreamEvent::ToolCallStart { .. }]),
            "{b1:?}"
        );
        let b2 = h.batches.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            matches!(
                b2.as_slice(),
                [StreamEvent::TextDelta { .. }, StreamEvent::Done { .. }]
            ),
            "{b2:?}"
        );
        assert!(matches!(
            h.batches.recv_timeout(Duration::from_secs(10)),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected)
        ));
    }
}
