//! Model providers over blocking `ureq` (spec `providers.md`).
//!
//! A provider turns a provider-neutral [`ChatRequest`] into one HTTP request of its wire
//! protocol and parses the SSE response into normalized [`StreamEvent`]s, handed to a
//! [`StreamSink`] on the calling thread. The built-in engine reads its streams inline
//! (cancelled through a [`CancelToken`] that shuts the socket down); one-shot helpers
//! (titles, polish, side chats) run a call on a helper thread ([`start_stream`]) and
//! `select!` over its bounded channel.
//!
//! Protocols: `openai-responses` (§1), `openai-compatible` = Chat Completions (§2, §5),
//! `anthropic` = Messages (§3), and `replay` (recorded streams from a cassette file).
//!
//! Layout: [`chat`] holds the neutral vocabulary, [`wire`] the protocols' shared parsing
//! machinery, `request` what their body builders share, [`stream`] the helper thread,
//! [`wake`] and `transport` the reads a consumer's thread can be woken from, `head` the
//! pool of threads that wait for a response head meanwhile, and one module per protocol.

use std::path::Path;
use std::sync::Arc;

use crate::config::ProviderConfig;
use wire::WireProtocol;

pub mod anthropic;
mod cancel;
pub mod catalog;
pub mod chat;
pub(crate) mod head;
pub(crate) mod http;
pub mod openai_chat;
pub mod openai_responses;
pub mod registry;
pub mod replay;
pub(crate) mod request;
pub mod retry;
pub(crate) mod scan;
pub mod sse;
pub mod stream;
pub mod toolset;
pub(crate) mod transport;
pub mod wake;
pub mod wire;

pub use cancel::CancelToken;
// The neutral vocabulary a caller of a provider hands over and gets back, at the door of
// the library's provider API (home: `chat`).
pub use chat::{
    ChatMessage, ChatRequest, FailureKind, ImageInput, ProviderError, ReasoningBlock, Role,
    StreamEvent, ToolCall, ToolSpec, Usage,
};
pub use http::HttpProvider;
pub use replay::ReplayProvider;
pub use stream::{start_stream, StreamHandle};
pub use wake::Wake;

/// Where a provider puts the events of one request.
///
/// A sink may hold delta events ([`StreamEvent::is_delta`]) back to hand them on
/// together; every other event, and [`StreamSink::flush`], hands over everything it
/// holds. A provider calls `flush` before each wait for more input (a socket read that
/// may block), so holding back never delays an event while the provider waits: it
/// only groups the events one read delivered (a wake-up per delta would cost more CPU
/// than handling the delta itself). A closure `FnMut(StreamEvent) -> bool` is a
/// sink that holds nothing back.
pub trait StreamSink {
    /// Takes one event. `false` = stop (the consumer is gone or the request cancelled).
    fn event(&mut self, ev: StreamEvent) -> bool;
    /// Takes one text delta, lent: reasoning text when `reasoning`, else the answer's
    /// text. The same as [`StreamSink::event`] with a `ReasoningDelta` / `TextDelta`
    /// (what the default does); a sink that copies the text into a buffer of its own
    /// spares the allocation of an owned event per delta. `false` = stop.
    fn text(&mut self, reasoning: bool, text: &str) -> bool {
        let text = text.to_owned();
        self.event(if reasoning {
            StreamEvent::ReasoningDelta { text }
        } else {
            StreamEvent::TextDelta { text }
        })
    }
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
