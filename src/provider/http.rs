//! The HTTP provider: one of the three wire protocols over blocking `ureq`.
//!
//! Each attempt uses its own `ureq::Agent` (registered with the [`CancelToken`] so a
//! cancel can shut its socket down) with `http_status_as_error(false)` so error bodies and
//! `retry-after` headers can be read (§0), a connect + first-header timeout
//! (`stream_connect_timeout_ms`, default 60 s) and a per-read idle timeout
//! (`stream_idle_timeout_ms`, default [`DEFAULT_IDLE_TIMEOUT_MS`] = 90 s). A request
//! whose reading thread serves more than it (a [`Wake`] on the token) waits for its
//! response head on the head pool ([`super::head`]) while that thread serves what wakes
//! it, then reads its body on that thread.

use std::io::{BufReader, Read};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::TryRecvError;
use serde_json::Value;

use super::chat::{ChatRequest, FailureKind, ProviderError};
use super::retry::{self, AttemptError, AttemptOutcome, RetryPolicy};
use super::wake::{Parked, ReadWake};
use super::wire::{drive_payloads, drive_sse, WireParser, WireProtocol};
use super::{CancelToken, Provider, StreamSink, Wake};
use crate::config::ProviderConfig;

/// Default idle timeout of a stream (90 s): the longest silence accepted between two
/// pieces of a streaming answer (the socket read timeout once the headers arrived).
/// Healthy streams send something far more often: tokens, Anthropic `ping`s, SSE comment
/// keep-alives (OpenRouter, DeepSeek); a reasoning model that thinks silently for longer
/// needs a larger `stream_idle_timeout_ms`.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 90_000;
/// Default connect / first-header timeout (60 s).
pub const DEFAULT_CONNECT_TIMEOUT_MS: u64 = 60_000;
/// Largest response head (status line and headers) accepted, 64 KiB (ureq's default).
const RESPONSE_HEAD_LIMIT: usize = 64 * 1024;
/// Largest error body read from a non-2xx response (1 MiB).
const MAX_ERROR_BODY: u64 = 1024 * 1024;
/// Largest complete JSON answer read from a 2xx response to a streaming request (64 MiB).
const MAX_JSON_ANSWER: u64 = 64 * 1024 * 1024;

/// A provider reached over HTTP(S).
#[derive(Debug)]
pub struct HttpProvider {
    id: String,
    protocol: WireProtocol,
    base_url: String,
    api_key: Option<String>,
    headers: Vec<(String, String)>,
    policy: RetryPolicy,
    idle_timeout: Duration,
    connect_timeout: Duration,
    max_output_tokens: Option<u32>,
    model_max_output_tokens: std::collections::BTreeMap<String, u32>,
}

impl HttpProvider {
    /// Builds from config (see [`super::build`] for the API-key rules).
    /// Errors: empty `base_url`.
    pub fn from_config(
        id: &str,
        protocol: WireProtocol,
        cfg: &ProviderConfig,
    ) -> Result<Self, String> {
        let base_url = cfg.base_url.trim().trim_end_matches('/').to_string();
        if base_url.is_empty() {
            return Err(format!("provider `{id}`: `base_url` is required"));
        }
        if !crate::secrets::url_userinfo(&base_url).is_empty() {
            return Err(format!(
                "provider `{id}`: credentials in `base_url` (`user:key@`) are refused; put the key in an environment variable named by `api_key_env`"
            ));
        }
        let env_name = match &cfg.api_key_env {
            Some(n) => Some(n.clone()),
            None => {
                let host = host_of(&base_url);
                match protocol {
                    WireProtocol::Anthropic if host.ends_with("anthropic.com") => {
                        Some("ANTHROPIC_API_KEY".to_string())
                    }
                    WireProtocol::OpenAiResponses | WireProtocol::OpenAiChat
                        if host == "api.openai.com" =>
                    {
                        Some("OPENAI_API_KEY".to_string())
                    }
                    _ => None,
                }
            }
        };
        let api_key = env_name.as_deref().and_then(|n| match std::env::var(n) {
            Ok(v) if !v.trim().is_empty() => Some(v.trim().to_string()),
            _ => {
                log::warn!(
                    "provider `{id}`: environment variable {n} is not set; sending no API key"
                );
                None
            }
        });
        Ok(HttpProvider {
            id: id.to_string(),
            protocol,
            base_url,
            api_key,
            headers: cfg
                .headers
                .as_ref()
                .map(|h| h.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            policy: RetryPolicy::from_config(cfg),
            idle_timeout: Duration::from_millis(
                cfg.stream_idle_timeout_ms
                    .unwrap_or(DEFAULT_IDLE_TIMEOUT_MS),
            ),
            connect_timeout: Duration::from_millis(
                cfg.stream_connect_timeout_ms
                    .unwrap_or(DEFAULT_CONNECT_TIMEOUT_MS),
            ),
            max_output_tokens: cfg.max_output_tokens.filter(|n| *n > 0),
            model_max_output_tokens: cfg
                .model_max_output_tokens
                .clone()
                .unwrap_or_default()
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
        })
    }

    /// The configured output limit for `model`: `model_max_output_tokens[model]`, else
    /// `max_output_tokens`, else none (the protocol default applies).
    pub fn output_limit(&self, model: &str) -> Option<u32> {
        self.model_max_output_tokens
            .get(model)
            .copied()
            .or(self.max_output_tokens)
    }

    /// The wire protocol.
    pub fn wire_protocol(&self) -> WireProtocol {
        self.protocol
    }

    /// The URL requests are POSTed to (§1: `{base}/responses`, §2: `{base}/chat/completions`,
    /// §3: `{base}/v1/messages`, without doubling a `/v1` or `/v1/messages` already there).
    pub fn endpoint(&self) -> String {
        match self.protocol {
            WireProtocol::OpenAiResponses => format!("{}/responses", self.base_url),
            WireProtocol::OpenAiChat => format!("{}/chat/completions", self.base_url),
            WireProtocol::Anthropic => format!("{}/messages", anthropic_v1(&self.base_url)),
        }
    }

    /// The model-list URL (`{base}/models`; Anthropic `{root}/v1/models`).
    pub fn models_url(&self) -> String {
        match self.protocol {
            WireProtocol::Anthropic => format!("{}/models", anthropic_v1(&self.base_url)),
            _ => format!("{}/models", self.base_url),
        }
    }

    /// An agent for one attempt; with `wake`, its streaming reads return when the
    /// reading thread is woken, once armed ([`super::transport`]).
    fn agent(&self, streaming: bool, wake: Option<Arc<ReadWake>>) -> ureq::Agent {
        let mut b = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_recv_response(Some(self.connect_timeout))
            .max_idle_connections(0)
            // Each connection's buffers are allocated and zero-filled per request (ureq's
            // defaults: 128 KiB each way). The input buffer must hold a whole response
            // head (ureq's header limit, 64 KiB); the output buffer one request header
            // line, the body goes through it in pieces.
            .input_buffer_size(RESPONSE_HEAD_LIMIT)
            .max_response_header_size(RESPONSE_HEAD_LIMIT)
            .output_buffer_size(16 * 1024)
            .user_agent(format!("wuu/{}", env!("CARGO_PKG_VERSION")));
        if streaming {
            b = b.timeout_per_read(Some(self.idle_timeout));
        } else {
            b = b.timeout_global(Some(self.connect_timeout + self.idle_timeout));
        }
        if is_loopback(host_of(&self.base_url)) {
            b = b.proxy(None);
        }
        match wake {
            None => ureq::Agent::new_with_config(b.build()),
            Some(w) => ureq::Agent::with_parts(
                b.build(),
                super::transport::connector(Some(w)),
                ureq::unversioned::resolver::DefaultResolver::default(),
            ),
        }
    }

    fn request_headers(&self) -> Vec<(String, String)> {
        let mut h: Vec<(String, String)> = Vec::new();
        match self.protocol {
            WireProtocol::Anthropic => {
                if let Some(k) = &self.api_key {
                    h.push(("x-api-key".into(), k.clone()));
                }
                h.push(("anthropic-version".into(), "2023-06-01".into()));
            }
            _ => {
                if let Some(k) = &self.api_key {
                    h.push(("authorization".into(), format!("Bearer {k}")));
                }
            }
        }
        for (k, v) in &self.headers {
            h.retain(|(hk, _)| !hk.eq_ignore_ascii_case(k));
            h.push((k.clone(), v.clone()));
        }
        h
    }

    fn attempt(
        &self,
        body: &Arc<Vec<u8>>,
        req: &ChatRequest,
        cancel: &CancelToken,
        sink: &mut dyn StreamSink,
    ) -> AttemptOutcome {
        let read_wake = cancel.wake().map(|w| Arc::new(ReadWake::new(w.clone())));
        let agent = self.agent(true, read_wake.clone());
        if !cancel.set_agent(&agent) {
            return AttemptOutcome::Stopped;
        }
        let url = self.endpoint();
        let mut rb = agent
            .post(&url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream");
        for (k, v) in self.request_headers() {
            rb = rb.header(k, v);
        }
        log::debug!("POST {url} ({} bytes)", body.len());
        let resp = match send_head(rb, body, &agent, cancel, sink) {
            Head::Response(r) => r,
            Head::Failed(e) => {
                cancel.clear_agent();
                if cancel.is_cancelled() {
                    return AttemptOutcome::Stopped;
                }
                return AttemptOutcome::Failed(e);
            }
            Head::Stopped => {
                cancel.clear_agent();
                return AttemptOutcome::Stopped;
            }
        };
        // The body is read on this thread: its reads return when the thread is woken.
        let _listening = cancel.wake().map(|w| w.listen());
        if let Some(w) = &read_wake {
            w.arm();
        }
        let (parts, body) = resp.into_parts();
        let content_type = header_value(&parts.headers, "content-type").unwrap_or_default();
        let outcome = handle_response(
            parts.status.as_u16(),
            &|name| header_value(&parts.headers, name),
            &content_type,
            body.into_reader(),
            &mut *self.protocol.parser(&self.id, &req.model),
            cancel,
            sink,
        );
        cancel.clear_agent();
        match outcome {
            AttemptOutcome::Failed(mut e)
                if e.kind == FailureKind::IncompleteStream
                    && e.message.starts_with("stream stalled") =>
            {
                e.message = format!(
                    "stream stalled: no data for {} s (stream_idle_timeout_ms {})",
                    self.idle_timeout.as_secs_f64(),
                    self.idle_timeout.as_millis()
                );
                AttemptOutcome::Failed(e)
            }
            other => other,
        }
    }
}

impl Provider for HttpProvider {
    fn id(&self) -> &str {
        &self.id
    }

    fn protocol(&self) -> &'static str {
        self.protocol.name()
    }

    fn stream_with_cancel(
        &self,
        req: &ChatRequest,
        cancel: &CancelToken,
        sink: &mut dyn StreamSink,
    ) {
        let mut body = self.protocol.base_body(&self.id, &self.base_url, req);
        if req.max_output_tokens.is_none() {
            if let (Some(n), Some(o)) = (self.output_limit(&req.model), body.as_object_mut()) {
                // The protocols' names: Responses `max_output_tokens`, Chat and Messages
                // `max_tokens` (replacing the Messages default).
                let field = match self.protocol {
                    WireProtocol::OpenAiResponses => "max_output_tokens",
                    WireProtocol::OpenAiChat | WireProtocol::Anthropic => "max_tokens",
                };
                o.insert(field.into(), Value::from(n));
            }
        }
        let bytes = self.protocol.body_bytes(&body, &req.tools);
        // Only the bytes live on: the `Value` tree is freed before the stream starts.
        // Shared with the head pool's thread that sends them.
        drop(body);
        let body = Arc::new(bytes);
        retry::run_with_retries(&self.policy, cancel, sink, |_, sink| {
            self.attempt(&body, req, cancel, sink)
        });
    }

    fn list_models(&self) -> Result<Vec<String>, ProviderError> {
        let agent = self.agent(false, None);
        let mut rb = agent.get(self.models_url());
        for (k, v) in self.request_headers() {
            rb = rb.header(k, v);
        }
        let fail = |e: AttemptError| ProviderError {
            kind: e.kind,
            message: e.message,
            status_code: e.status,
            attempts: 1,
            max_attempts: 1,
            stop_reason: "non_retryable".into(),
        };
        let mut resp = rb.call().map_err(|e| fail(transport_error(e)))?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(16 * 1024 * 1024)
            .lossy_utf8(true)
            .read_to_string()
            .map_err(|e| fail(transport_error(e)))?;
        if !(200..300).contains(&status) {
            return Err(fail(retry::classify_http(
                status,
                &|n| header_value(resp.headers(), n),
                &text,
            )));
        }
        let v: Value = serde_json::from_str(&text).map_err(|e| {
            fail(AttemptError::new(
                FailureKind::InvalidRequest,
                format!("model list is not JSON: {e}"),
            ))
        })?;
        Ok(parse_model_list(&v))
    }
}

/// Model ids of an OpenAI (`{data:[{id}]}`), Anthropic (`{data:[{id,display_name}]}`) or
/// Ollama-native (`{models:[{name}]}`) list.
pub(crate) fn parse_model_list(v: &Value) -> Vec<String> {
    let items = v
        .get("data")
        .or_else(|| v.get("models"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    items
        .iter()
        .filter_map(|m| {
            m.get("id")
                .or_else(|| m.get("name"))
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// Handles one HTTP (or replayed) response: a non-2xx status is classified from its body
/// and headers; a 2xx JSON body (no stream) is an error object, or a complete answer of
/// the protocol (read as the equivalent stream, [`WireParser::json_body_events`]), or
/// refused as unexpected; anything else is parsed as SSE.
pub(crate) fn handle_response(
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    content_type: &str,
    body: impl Read,
    parser: &mut dyn WireParser,
    cancel: &CancelToken,
    sink: &mut dyn StreamSink,
) -> AttemptOutcome {
    if !(200..300).contains(&status) {
        let mut text = Vec::new();
        let read = read_resuming(body.take(MAX_ERROR_BODY), &mut text);
        if cancel.is_cancelled() {
            return AttemptOutcome::Stopped;
        }
        if let Err(e) = read {
            log::debug!("error body of HTTP {status} unreadable: {e}");
        }
        return AttemptOutcome::Failed(retry::classify_http(
            status,
            header,
            &String::from_utf8_lossy(&text),
        ));
    }
    if content_type.starts_with("application/json") {
        let mut text = Vec::new();
        let _ = read_resuming(body.take(MAX_JSON_ANSWER), &mut text);
        let text = String::from_utf8_lossy(&text);
        let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let (code, ty, msg) = retry::error_fields(&v);
        if v.get("error").is_some_and(|e| !e.is_null()) {
            return AttemptOutcome::Failed(retry::classify_stream_error(
                code.as_deref(),
                ty.as_deref(),
                msg.as_deref().unwrap_or(""),
            ));
        }
        // Some servers ignore `stream:true` and answer with the whole response at once.
        if let Some(datas) = parser.json_body_events(&v) {
            return drive_payloads(datas, parser, sink);
        }
        let mut e = AttemptError::new(
            FailureKind::InvalidRequest,
            format!("expected an event stream, got JSON: {:.300}", text),
        );
        e.status = Some(status);
        return AttemptOutcome::Failed(e);
    }
    drive_sse(
        BufReader::with_capacity(16 * 1024, body),
        parser,
        cancel,
        sink,
    )
}

/// How the wait for a response head ended.
enum Head {
    /// The response, its body not read yet.
    Response(ureq::http::Response<ureq::Body>),
    /// The request failed before a response head arrived.
    Failed(AttemptError),
    /// The consumer stopped meanwhile; the request was shut down.
    Stopped,
}

impl From<Result<ureq::http::Response<ureq::Body>, ureq::Error>> for Head {
    fn from(r: Result<ureq::http::Response<ureq::Body>, ureq::Error>) -> Self {
        match r {
            Ok(resp) => Head::Response(resp),
            Err(e) => Head::Failed(transport_error(e)),
        }
    }
}

/// Signals a wake when dropped: the end of a head job, however it ends.
struct Ring(Arc<Wake>);

impl Drop for Ring {
    fn drop(&mut self) {
        self.0.signal();
    }
}

/// Sends the request and waits for its response head (connect, TLS, the request, the
/// head: a phase ureq cannot resume once begun). A reading thread with a wake (it
/// serves more than this request, [`CancelToken::set_wake`]) hands the phase to the
/// head pool ([`super::head`]) and meanwhile serves what wakes it through
/// `sink.flush()`; a stop (the flush says so, or the token is cancelled) shuts the
/// request down and returns at once. Without a wake, or when every pool thread is
/// busy, the phase runs on this thread (then a request that must end it cuts it from
/// outside, [`Wake::listening`] being unset).
fn send_head(
    rb: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: &Arc<Vec<u8>>,
    agent: &ureq::Agent,
    cancel: &CancelToken,
    sink: &mut dyn StreamSink,
) -> Head {
    let Some(wake) = cancel.wake().cloned() else {
        return rb.send(&body[..]).into();
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    let (ring, bytes) = (wake.clone(), body.clone());
    let job: super::head::Job = Box::new(move || {
        // Declared first, dropped last: the result is sent (or, after a panic, the
        // channel closed) before the waiting thread is rung.
        let _ring = Ring(ring);
        let tx = tx;
        let _ = tx.send(rb.send(&bytes[..]));
    });
    let result = match super::head::pool().run(job) {
        Err(job) => {
            job();
            rx.try_recv().ok()
        }
        Ok(()) => {
            let _listening = wake.listen();
            loop {
                match rx.try_recv() {
                    Ok(r) => break Some(r),
                    Err(TryRecvError::Disconnected) => break None,
                    Err(TryRecvError::Empty) => {}
                }
                // A cancel shut the agent down; its head thread returns on its own.
                if cancel.is_cancelled() {
                    return Head::Stopped;
                }
                match wake.park(None, None) {
                    Ok(Parked::Woken) => {
                        if !sink.flush() {
                            agent.clone().shutdown();
                            return Head::Stopped;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        log::debug!("cannot park for a response head ({e}); waiting for it alone");
                        break rx.recv().ok();
                    }
                }
            }
        }
    };
    match result {
        Some(r) => r.into(),
        None => Head::Failed(AttemptError::new(
            FailureKind::Network,
            "the request failed on its connection thread".to_string(),
        )),
    }
}

/// `read_to_end` that reads on after a wake ([`std::io::ErrorKind::WouldBlock`], see
/// [`super::wake`]): a whole body is wanted here, what woke the thread waits for it.
fn read_resuming(mut body: impl Read, out: &mut Vec<u8>) -> std::io::Result<usize> {
    loop {
        match body.read_to_end(out) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

fn header_value(h: &ureq::http::HeaderMap, name: &str) -> Option<String> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

/// Classifies a `ureq` error raised before a response arrived (or while reading a
/// non-stream body).
fn transport_error(e: ureq::Error) -> AttemptError {
    match e {
        ureq::Error::Timeout(t) => {
            AttemptError::new(FailureKind::Network, format!("timed out ({t})"))
        }
        ureq::Error::Io(io) => {
            AttemptError::new(FailureKind::Network, format!("connection error: {io}"))
        }
        e @ (ureq::Error::HostNotFound
        | ureq::Error::ConnectionFailed
        | ureq::Error::Protocol(_)) => AttemptError::new(FailureKind::Network, e.to_string()),
        e => AttemptError::new(FailureKind::InvalidRequest, format!("request failed: {e}")),
    }
}

/// The Anthropic `/v1` root: `{base}` when it ends with `/v1`, `{base minus /messages}`
/// when it ends with `/v1/messages`, else `{base}/v1` (§3: wuu accepts all three).
fn anthropic_v1(base: &str) -> String {
    let b = base.trim_end_matches('/');
    let b = b.strip_suffix("/messages").unwrap_or(b);
    if b.ends_with("/v1") {
        b.to_string()
    } else {
        format!("{b}/v1")
    }
}

/// The host part of `url` (`scheme://[user@]host[:port]/…`, IPv6 without brackets;
/// `""` when there is none), as written.
pub(crate) fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let authority = authority
        .rsplit_once('@')
        .map(|(_, h)| h)
        .unwrap_or(authority);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().unwrap_or("");
    }
    authority.split(':').next().unwrap_or("")
}

/// Whether `host` (from [`host_of`]) is this machine: `localhost`, `::1`, `127.0.0.0/8`.
pub(crate) fn is_loopback(host: &str) -> bool {
    host == "localhost"
        || host == "::1"
        || host
            .parse::<std::net::Ipv4Addr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(proto: WireProtocol, base: &str) -> HttpProvider {
        let cfg = ProviderConfig {
            provider_type: proto.name().into(),
            base_url: base.into(),
            ..Default::default()
        };
        HttpProvider::from_config("p", proto, &cfg).unwrap()
    }

    #[test]
    fn endpoints() {
        let a = |b| provider(WireProtocol::Anthropic, b).endpoint();
        assert_eq!(
            a("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(a("https://x.io/v1/"), "https://x.io/v1/messages");
        assert_eq!(a("https://x.io/v1/messages"), "https://x.io/v1/messages");
        assert_eq!(
            provider(WireProtocol::Anthropic, "https://x.io").models_url(),
            "https://x.io/v1/models"
        );
        assert_eq!(
            provider(WireProtocol::OpenAiChat, "http://localhost:11434/v1").endpoint(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert_eq!(
            provider(WireProtocol::OpenAiResponses, "https://api.openai.com/v1").endpoint(),
            "https://api.openai.com/v1/responses"
        );
    }

    #[test]
    fn hosts() {
        assert_eq!(
            host_of("https://user@api.openai.com:443/v1"),
            "api.openai.com"
        );
        assert_eq!(host_of("http://[::1]:8080/v1"), "::1");
        assert!(is_loopback(host_of("http://127.0.0.1:9/v1")));
        assert!(!is_loopback(host_of("https://openrouter.ai/api/v1")));
    }

    #[test]
    fn key_is_not_sent_to_third_parties_implicitly() {
        let p = provider(WireProtocol::OpenAiChat, "https://openrouter.ai/api/v1");
        assert!(p.api_key.is_none());
        assert!(!p
            .request_headers()
            .iter()
            .any(|(k, _)| k == "authorization"));
    }

    #[test]
    fn default_stream_timeouts_bound_a_silent_provider() {
        let p = provider(WireProtocol::OpenAiChat, "http://127.0.0.1:9/v1");
        assert_eq!(p.idle_timeout, Duration::from_secs(90));
        assert_eq!(p.policy.max_retry_time, Duration::from_secs(120));
        // A provider that never sends a byte: no retry starts once 120 s passed without
        // progress, so at most two idle periods (about 3 minutes), not five (25).
        let attempts = 1 + p.policy.max_retry_time.as_secs() / p.idle_timeout.as_secs();
        assert!(attempts <= 2);
        assert_eq!(p.output_limit("m"), None);
    }

    /// Answers `n` chat requests with a finished empty stream; returns their bodies.
    fn capture_bodies(listener: std::net::TcpListener, n: usize) -> Vec<Vec<u8>> {
        use std::io::Write;
        (0..n)
            .map(|_| {
                let (mut s, _) = listener.accept().unwrap();
                let body = crate::provider::transport::read_request(&mut BufReader::new(
                    s.try_clone().unwrap(),
                ));
                let sse = "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
                write!(
                    s,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncontent-length: {}\r\n\r\n{sse}",
                    sse.len()
                )
                .unwrap();
                body
            })
            .collect()
    }

    /// The bytes sent are those of the whole body built as a `Value` (the output limit
    /// included), the first request rendering the tools' text and the second reusing it.
    #[test]
    fn the_body_sent_is_the_whole_body_whether_its_tools_were_rendered_before_or_not() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let server = std::thread::spawn(move || capture_bodies(listener, 2));
        let cfg = ProviderConfig {
            provider_type: "openai-compatible".into(),
            base_url: url.clone(),
            max_output_tokens: Some(321),
            ..Default::default()
        };
        let p = HttpProvider::from_config("p", WireProtocol::OpenAiChat, &cfg).unwrap();
        let mut tools = crate::tools::specs(crate::tools::PermissionMode::ReadOnly);
        tools[0].description.push_str(" (sent-body test)");
        let req = ChatRequest {
            model: "m".into(),
            system: "sys".into(),
            messages: vec![crate::provider::chat::ChatMessage::text(
                crate::provider::chat::Role::User,
                "hi",
            )],
            tools: tools.into(),
            ..Default::default()
        };
        struct Ignore;
        impl StreamSink for Ignore {
            fn event(&mut self, _: crate::provider::chat::StreamEvent) -> bool {
                true
            }
        }
        for _ in 0..2 {
            p.stream_with_cancel(&req, &CancelToken::new(), &mut Ignore);
        }
        let mut whole = WireProtocol::OpenAiChat.build_body("p", &url, &req);
        whole["max_tokens"] = 321.into();
        let whole = serde_json::to_vec(&whole).unwrap();
        for body in server.join().unwrap() {
            assert_eq!(
                String::from_utf8(body).unwrap(),
                String::from_utf8(whole.clone()).unwrap()
            );
        }
    }

    #[test]
    fn model_lists() {
        let v = serde_json::json!({"data":[{"id":"a"},{"id":"b","display_name":"B"}]});
        assert_eq!(parse_model_list(&v), vec!["a", "b"]);
        let v = serde_json::json!({"models":[{"name":"llama3"}]});
        assert_eq!(parse_model_list(&v), vec!["llama3"]);
    }
}
