//! Error classification and the retry loop (providers.md §4, §6.6).
//!
//! An error body may be JSON or (some servers answering a streaming request) an SSE
//! stream whose first `data:` payload is the JSON error; either way the message is the
//! provider's own text, never raw `data:` lines.
//!
//! Classification turns an HTTP status + body (+ `retry-after`/`retry-after-ms`/
//! `x-should-retry` headers), or an in-stream error event, into an [`AttemptError`] with a
//! [`FailureKind`] and a retryable flag:
//!
//! | input | kind | retried |
//! |---|---|---|
//! | 401, 403 | `Authentication` (`Quota` when the body says quota/billing) | no |
//! | 404 | `NotFound` | no |
//! | 408, 409, 425, 5xx | `Server` | yes |
//! | 413 | `RequestTooLarge` | no |
//! | 429 | `RateLimit`; `Quota` when the body names a quota/usage limit (`insufficient_quota`, `usage_limit_reached`, …) or the server asks to wait more than [`USAGE_LIMIT_WAIT`] | yes (quota: no) |
//! | 402, 400 with quota text | `Quota` | no |
//! | 529, `overloaded_error` | `Overloaded` | yes |
//! | 400 with overflow text (incl. llama.cpp `exceed_context_size_error`) | `ContextOverflow` | no |
//! | other 4xx | `InvalidRequest` | no |
//! | connection errors | `Network` | yes |
//! | EOF / stall before the terminal event | `IncompleteStream` | yes |
//!
//! The loop ([`run_with_retries`]) retries with bounded exponential backoff
//! (`initial · 2^(n-1)` capped at `max`, plus 0–25 % jitter; a server `retry-after` wins,
//! capped at `max`), but **only while replay is safe**: an attempt that emitted a
//! [`StreamEvent::ToolCallEnd`] is never replayed (stop reason `replay_unsafe`). Before
//! each retry a [`StreamEvent::Retrying`] is sent so the consumer can void the partial
//! output of the failed attempt.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::chat::{FailureKind, ProviderError, StreamEvent};
use super::{CancelToken, StreamSink};
use crate::config::ProviderConfig;

/// Default initial backoff (1 s).
pub const DEFAULT_INITIAL_BACKOFF_MS: u64 = 1_000;
/// Default backoff cap (30 s).
pub const DEFAULT_MAX_BACKOFF_MS: u64 = 30_000;
/// Default retries after the first attempt.
pub const DEFAULT_MAX_RETRIES: u32 = 4;
/// Default cap of the time a request may go without progress before it stops retrying
/// (`max_retry_time_ms`, 120 s): counted from the request's start or the last event any
/// attempt delivered; a retry whose backoff would end past it is not made. With the
/// default idle timeout (90 s) a provider that never answers fails after two attempts,
/// about three minutes, instead of five idle periods.
pub const DEFAULT_MAX_RETRY_TIME_MS: u64 = 120_000;

/// Backoff and budget of one logical request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// First backoff wait.
    pub initial_backoff: Duration,
    /// Cap of one wait (also caps `retry-after`).
    pub max_backoff: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// Longest time without progress (no event from any attempt, counted from the start)
    /// after which no retry is made ([`DEFAULT_MAX_RETRY_TIME_MS`]).
    pub max_retry_time: Duration,
    /// Whether to actually sleep between attempts (the replay provider does not).
    pub sleep: bool,
}

impl RetryPolicy {
    /// Reads `initial_backoff_ms`, `max_backoff_ms`, `max_retries`, `max_retry_time_ms`
    /// (defaults 1 s, 30 s, 4, 120 s).
    pub fn from_config(cfg: &ProviderConfig) -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_millis(
                cfg.initial_backoff_ms.unwrap_or(DEFAULT_INITIAL_BACKOFF_MS),
            ),
            max_backoff: Duration::from_millis(
                cfg.max_backoff_ms.unwrap_or(DEFAULT_MAX_BACKOFF_MS),
            ),
            max_retries: cfg.max_retries.unwrap_or(DEFAULT_MAX_RETRIES),
            max_retry_time: Duration::from_millis(
                cfg.max_retry_time_ms.unwrap_or(DEFAULT_MAX_RETRY_TIME_MS),
            ),
            sleep: true,
        }
    }

    /// Attempts in total (first included).
    pub fn max_attempts(&self) -> u32 {
        self.max_retries.saturating_add(1)
    }

    /// Wait before attempt `failed_attempt + 1`: the server's `retry_after` when given,
    /// else `initial · 2^(failed_attempt-1)` plus 0–25 % jitter; always ≤ `max_backoff`.
    pub fn delay(&self, failed_attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(ra) = retry_after {
            return ra.min(self.max_backoff);
        }
        let exp = failed_attempt.saturating_sub(1).min(30);
        let base = self
            .initial_backoff
            .saturating_mul(1u32 << exp)
            .min(self.max_backoff);
        let jitter = base.mul_f64(jitter_fraction() * 0.25);
        (base + jitter).min(self.max_backoff)
    }
}

/// A number in `[0, 1)` from a cheap xorshift seeded by the clock.
fn jitter_fraction() -> f64 {
    static STATE: AtomicU64 = AtomicU64::new(0);
    let mut x = STATE.load(Ordering::Relaxed);
    if x == 0 {
        x = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x9E37_79B9_7F4A_7C15)
            | 1;
    }
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    STATE.store(x, Ordering::Relaxed);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// The failure of one attempt, before the retry decision.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptError {
    /// Category.
    pub kind: FailureKind,
    /// Provider error text (or our description).
    pub message: String,
    /// HTTP status, when the failure came with one.
    pub status: Option<u16>,
    /// Server-requested wait (`retry-after-ms` / `retry-after`).
    pub retry_after: Option<Duration>,
    /// Whether the category may be retried at all.
    pub retryable: bool,
}

impl AttemptError {
    /// A failure of `kind` with the default retryability of that kind.
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        AttemptError {
            kind,
            message: message.into(),
            status: None,
            retry_after: None,
            retryable: kind_is_retryable(kind),
        }
    }

    /// A stream that ended or stalled before its terminal event (retryable).
    pub fn incomplete(message: impl Into<String>) -> Self {
        Self::new(FailureKind::IncompleteStream, message)
    }
}

/// Default retryability of a category.
pub fn kind_is_retryable(kind: FailureKind) -> bool {
    matches!(
        kind,
        FailureKind::RateLimit
            | FailureKind::Overloaded
            | FailureKind::Server
            | FailureKind::Network
            | FailureKind::IncompleteStream
    )
}

/// Body-text markers of a prompt that exceeds the context window (§4.2, §6.6).
const OVERFLOW_MARKERS: &[&str] = &[
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "input is too long",
    "too many tokens",
    "context window",
    "model_context_window_exceeded",
    // llama.cpp's llama-server: `{"error":{"code":400,"type":"exceed_context_size_error",
    // "message":"the request exceeds the available context size, try increasing it"}}`.
    "exceed_context_size_error",
    "exceeds the available context size",
];

/// Body-text markers of an exhausted quota or usage limit: waiting seconds does not help
/// (OpenAI `insufficient_quota`, ChatGPT/Codex `usage_limit_reached`, Anthropic "credit
/// balance is too low" / "reached your specified API usage limits", generic "quota
/// exceeded").
const QUOTA_MARKERS: &[&str] = &[
    "insufficient_quota",
    "exceeded your current quota",
    "credit balance",
    "usage_limit_reached",
    "usage limit",
    "usage_limit_exceeded",
    "billing_hard_limit_reached",
    "quota_exceeded",
    "quota exceeded",
    "reached your specified api usage limits",
    "spend limit",
];

/// A server-requested wait longer than this on a 429 means a usage limit, not a transient
/// rate limit: the request is not retried (10 min).
pub const USAGE_LIMIT_WAIT: Duration = Duration::from_secs(600);

fn is_overflow_text(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    OVERFLOW_MARKERS.iter().any(|m| t.contains(m))
}

fn is_quota_text(text: &str) -> bool {
    let t = text.to_ascii_lowercase();
    QUOTA_MARKERS.iter().any(|m| t.contains(m))
}

/// A reset time given in an error body (ChatGPT/Codex `resets_in_seconds`, or
/// `resets_at` as Unix seconds), as a wait from now.
fn body_reset_wait(v: &Value) -> Option<Duration> {
    let e = v.get("error").filter(|e| e.is_object()).unwrap_or(v);
    if let Some(s) = e.get("resets_in_seconds").and_then(Value::as_f64) {
        if s.is_finite() && s >= 0.0 {
            return Some(Duration::from_secs_f64(s.min(30.0 * 86_400.0)));
        }
    }
    let at = e.get("resets_at").and_then(Value::as_i64)?;
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    Some(Duration::from_secs(
        at.saturating_sub(now).clamp(0, 30 * 86_400) as u64,
    ))
}

/// The JSON error object carried by a non-JSON body that is an SSE stream (some servers
/// answer a streaming request's failure with `data: {"error":…}` and a 4xx/5xx status):
/// the first `data:` payload that parses as JSON.
fn sse_error_payload(body: &str) -> Option<Value> {
    let t = body.trim_start();
    if !(t.starts_with("data:") || t.starts_with("event:") || t.starts_with(':')) {
        return None;
    }
    let mut r = super::sse::SseReader::new(body.as_bytes());
    while let Ok(Some(ev)) = r.next_event() {
        if let Ok(v @ Value::Object(_)) = serde_json::from_str::<Value>(&ev.data) {
            return Some(v);
        }
    }
    None
}

/// `(code, type, message)` of an error body in OpenAI (`{"error":{…}}`), Anthropic
/// (`{"type":"error","error":{…}}`), vLLM (`{"object":"error","message"}`) or plain shapes.
pub fn error_fields(v: &Value) -> (Option<String>, Option<String>, Option<String>) {
    fn s(v: Option<&Value>) -> Option<String> {
        match v? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }
    match v.get("error") {
        Some(e @ Value::Object(_)) => (
            s(e.get("code")),
            s(e.get("type")),
            s(e.get("message")).or_else(|| s(v.get("message"))),
        ),
        Some(Value::String(m)) => (s(v.get("code")), None, Some(m.clone())),
        _ => {
            let ty = s(v.get("type")).filter(|t| t != "error");
            (s(v.get("code")), ty, s(v.get("message")))
        }
    }
}

/// Classifies a non-2xx HTTP response. `header` looks up a response header by lowercase
/// name; `body` is the (possibly truncated) response body.
pub fn classify_http(
    status: u16,
    header: &dyn Fn(&str) -> Option<String>,
    body: &str,
) -> AttemptError {
    let parsed: Option<Value> = serde_json::from_str(body)
        .ok()
        .or_else(|| sse_error_payload(body));
    let (code, etype, msg) = parsed.as_ref().map(error_fields).unwrap_or_default();
    let message = match &msg {
        Some(m) => m.clone(),
        None if body.trim().is_empty() => format!("HTTP {status}"),
        None if parsed.is_some() => format!("HTTP {status}"),
        None => {
            let mut b: String = body.trim().chars().take(500).collect();
            if b.len() < body.trim().len() {
                b.push('…');
            }
            format!("HTTP {status}: {b}")
        }
    };
    let code_s = code.as_deref().unwrap_or("");
    let type_s = etype.as_deref().unwrap_or("");
    let all_text = format!("{code_s} {type_s} {body}");
    let retry_after = parse_retry_after(header);
    let long_wait = retry_after
        .or_else(|| parsed.as_ref().and_then(body_reset_wait))
        .is_some_and(|w| w > USAGE_LIMIT_WAIT);
    let kind = match status {
        401 | 403 if is_quota_text(&all_text) => FailureKind::Quota,
        401 | 403 => FailureKind::Authentication,
        404 => FailureKind::NotFound,
        408 | 409 | 425 => FailureKind::Server,
        413 => FailureKind::RequestTooLarge,
        // Not plain "billing": OpenAI's ordinary rate-limit text links the billing page.
        429 if is_quota_text(&all_text) || long_wait => FailureKind::Quota,
        429 => FailureKind::RateLimit,
        402 => FailureKind::Quota,
        400 if is_quota_text(&all_text) => FailureKind::Quota,
        529 => FailureKind::Overloaded,
        _ if type_s == "overloaded_error" => FailureKind::Overloaded,
        500..=599 => FailureKind::Server,
        _ if is_overflow_text(&all_text) => FailureKind::ContextOverflow,
        _ => FailureKind::InvalidRequest,
    };
    let mut retryable = kind_is_retryable(kind);
    match header("x-should-retry").as_deref() {
        Some("true") if kind != FailureKind::Quota => retryable = true,
        Some("false") => retryable = false,
        _ => {}
    }
    AttemptError {
        kind,
        message,
        status: Some(status),
        retry_after,
        retryable,
    }
}

/// Classifies an error event received inside a 200 stream (Responses `error` /
/// `response.failed`, Chat error chunk, Anthropic `event: error`), from its code/type and
/// message (§4.3: retryable classes retry like the HTTP status).
pub fn classify_stream_error(
    code: Option<&str>,
    etype: Option<&str>,
    message: &str,
) -> AttemptError {
    let c = code.unwrap_or("").to_ascii_lowercase();
    let t = etype.unwrap_or("").to_ascii_lowercase();
    let m = message.to_ascii_lowercase();
    let has = |s: &str| c == s || t == s;
    let kind = if is_quota_text(&format!("{c} {t} {m}")) {
        FailureKind::Quota
    } else if has("overloaded_error") || has("overloaded") || c == "529" || m.contains("overloaded")
    {
        FailureKind::Overloaded
    } else if has("rate_limit_error")
        || has("rate_limit_exceeded")
        || c == "429"
        || c == "1305"
        || m.contains("rate limit")
        || m.contains("too many requests")
    {
        FailureKind::RateLimit
    } else if is_overflow_text(&format!("{c} {t} {m}")) {
        FailureKind::ContextOverflow
    } else if has("authentication_error") || has("invalid_api_key") || has("permission_error") {
        FailureKind::Authentication
    } else if has("not_found_error") || has("model_not_found") {
        FailureKind::NotFound
    } else if has("request_too_large") {
        FailureKind::RequestTooLarge
    } else if has("invalid_request_error") || has("invalid_prompt") {
        FailureKind::InvalidRequest
    } else {
        // server_error, api_error, internal_error, numeric 5xx and unknown codes: a failure
        // on the provider's side, assumed transient.
        FailureKind::Server
    };
    let message = if message.is_empty() {
        format!("stream error {}", if c.is_empty() { &t } else { &c })
    } else {
        message.to_string()
    };
    AttemptError::new(kind, message)
}

/// `retry-after-ms` (milliseconds) or `retry-after` (seconds, or an HTTP date).
pub fn parse_retry_after(header: &dyn Fn(&str) -> Option<String>) -> Option<Duration> {
    if let Some(ms) = header("retry-after-ms").and_then(|v| v.trim().parse::<f64>().ok()) {
        if ms.is_finite() && ms >= 0.0 {
            return Some(Duration::from_secs_f64(ms / 1000.0));
        }
    }
    let v = header("retry-after")?;
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs.min(86_400.0)));
        }
        return None;
    }
    let when = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(v)
        .ok()?;
    let now = jiff::Timestamp::now();
    let secs = when.as_second() - now.as_second();
    Some(Duration::from_secs(secs.clamp(0, 86_400) as u64))
}

/// How one attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AttemptOutcome {
    /// The terminal [`StreamEvent::Done`] to forward.
    Done(StreamEvent),
    /// The attempt failed.
    Failed(AttemptError),
    /// The consumer stopped or the request was cancelled: emit nothing more.
    Stopped,
}

/// Runs `attempt` until it completes, fails for good, or is stopped; forwards its events
/// to `sink` and ends with exactly one `Done` or `Failed` unless stopped. `attempt` gets
/// the 1-based attempt number and a sink to emit into.
pub fn run_with_retries(
    policy: &RetryPolicy,
    cancel: &CancelToken,
    sink: &mut dyn StreamSink,
    mut attempt: impl FnMut(u32, &mut dyn StreamSink) -> AttemptOutcome,
) {
    let max_attempts = policy.max_attempts();
    let mut n = 1;
    let mut last_progress = Instant::now();
    loop {
        if cancel.is_cancelled() {
            return;
        }
        let mut attempt_sink = AttemptSink {
            sink: &mut *sink,
            cancel,
            tool_call_ended: false,
            progressed: false,
            last_progress: &mut last_progress,
        };
        let outcome = attempt(n, &mut attempt_sink);
        attempt_sink.note_progress();
        let tool_call_ended = attempt_sink.tool_call_ended;
        let err = match outcome {
            AttemptOutcome::Done(ev) => {
                sink.event(ev);
                return;
            }
            AttemptOutcome::Stopped => return,
            AttemptOutcome::Failed(err) => err,
        };
        if cancel.is_cancelled() {
            return;
        }
        let delay = if policy.sleep {
            policy.delay(n, err.retry_after)
        } else {
            Duration::ZERO
        };
        let stop_reason = if !err.retryable {
            Some("non_retryable")
        } else if tool_call_ended {
            Some("replay_unsafe")
        } else if n >= max_attempts {
            Some("retry_limit")
        } else if policy.sleep && last_progress.elapsed() + delay > policy.max_retry_time {
            Some("retry_time_limit")
        } else {
            None
        };
        if let Some(stop_reason) = stop_reason {
            let message = if stop_reason == "retry_time_limit" {
                format!(
                    "{} (gave up after {} s without progress, max_retry_time_ms {})",
                    err.message,
                    last_progress.elapsed().as_secs(),
                    policy.max_retry_time.as_millis()
                )
            } else {
                err.message.clone()
            };
            log::warn!(
                "provider request failed ({:?}, attempt {n}/{max_attempts}, {stop_reason}): {message}",
                err.kind,
            );
            sink.event(StreamEvent::Failed {
                error: ProviderError {
                    kind: err.kind,
                    message,
                    status_code: err.status,
                    attempts: n,
                    max_attempts,
                    stop_reason: stop_reason.to_string(),
                },
            });
            return;
        }
        log::info!(
            "provider attempt {n}/{max_attempts} failed ({:?}): {}; retrying in {} ms",
            err.kind,
            err.message,
            delay.as_millis()
        );
        if !sink.event(StreamEvent::Retrying {
            attempt: n + 1,
            max_attempts,
            delay_ms: delay.as_millis() as u64,
            kind: err.kind,
            message: err.message,
        }) {
            return;
        }
        if !delay.is_zero() && backoff(cancel, delay, sink) {
            return;
        }
        n += 1;
    }
}

/// Sleeps `delay` between attempts; true = stop (cancelled, or the sink refused). A
/// reading thread with a wake ([`CancelToken::set_wake`]) serves what wakes it
/// meanwhile, through the sink's flush.
fn backoff(cancel: &CancelToken, delay: Duration, sink: &mut dyn StreamSink) -> bool {
    let Some(wake) = cancel.wake() else {
        return cancel.sleep(delay);
    };
    let end = Instant::now() + delay;
    loop {
        if cancel.is_cancelled() {
            return true;
        }
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        match wake.park(None, Some(left)) {
            Ok(super::wake::Parked::Woken) => {
                if !sink.flush() {
                    return true;
                }
            }
            Ok(_) => {}
            // No eventfd: sleep as without a wake.
            Err(_) => return cancel.sleep(left),
        }
    }
}

/// The sink one attempt emits into: forwards to the request's sink and notes what the
/// retry decision needs (a complete tool call was handed on; output arrived).
struct AttemptSink<'a> {
    sink: &'a mut dyn StreamSink,
    cancel: &'a CancelToken,
    tool_call_ended: bool,
    /// Output arrived since `last_progress` was last set.
    progressed: bool,
    last_progress: &'a mut Instant,
}

impl AttemptSink<'_> {
    /// Sets `last_progress` to now if output arrived since (a clock read per read of the
    /// stream, not per event).
    fn note_progress(&mut self) {
        if std::mem::take(&mut self.progressed) {
            *self.last_progress = Instant::now();
        }
    }
}

impl StreamSink for AttemptSink<'_> {
    fn event(&mut self, ev: StreamEvent) -> bool {
        if matches!(ev, StreamEvent::ToolCallEnd { .. }) {
            self.tool_call_ended = true;
        }
        self.progressed = true;
        !self.cancel.is_cancelled() && self.sink.event(ev)
    }

    fn text(&mut self, reasoning: bool, text: &str) -> bool {
        self.progressed = true;
        !self.cancel.is_cancelled() && self.sink.text(reasoning, text)
    }

    fn flush(&mut self) -> bool {
        self.note_progress();
        !self.cancel.is_cancelled() && self.sink.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn hdr(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn status_table() {
        let none = hdr(&[]);
        let c = |s, b: &str| classify_http(s, &none, b);
        assert_eq!(c(401, "").kind, FailureKind::Authentication);
        assert_eq!(c(403, "").kind, FailureKind::Authentication);
        assert_eq!(c(404, "").kind, FailureKind::NotFound);
        assert_eq!(c(413, "").kind, FailureKind::RequestTooLarge);
        assert!(c(408, "").retryable && c(409, "").retryable);
        assert!(c(500, "").retryable && c(503, "").retryable);
        let e = c(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
        assert_eq!(
            (e.kind, e.message.as_str(), e.retryable),
            (FailureKind::Overloaded, "Overloaded", true)
        );
        let e = c(
            429,
            r#"{"error":{"message":"slow down","type":"requests","code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!((e.kind, e.retryable), (FailureKind::RateLimit, true));
        let e = c(
            429,
            r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#,
        );
        assert_eq!((e.kind, e.retryable), (FailureKind::Quota, false));
        let e = c(
            429,
            r#"{"error":{"message":"Rate limit reached. Add a payment method at https://platform.openai.com/account/billing.","type":"requests","code":"rate_limit_exceeded"}}"#,
        );
        assert_eq!((e.kind, e.retryable), (FailureKind::RateLimit, true));
        let e = c(
            400,
            r#"{"error":{"message":"This model's maximum context length is 128000 tokens","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(e.kind, FailureKind::ContextOverflow);
        let e = c(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        );
        assert_eq!(e.kind, FailureKind::ContextOverflow);
        let e = c(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill."}}"#,
        );
        assert_eq!((e.kind, e.retryable), (FailureKind::InvalidRequest, false));
        assert_eq!(
            c(502, "<html>bad gateway</html>").message,
            "HTTP 502: <html>bad gateway</html>"
        );
        // llama.cpp's context error.
        let e = c(
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#,
        );
        assert_eq!(e.kind, FailureKind::ContextOverflow);
        // Usage limits are not transient.
        let e = c(
            429,
            r#"{"error":{"type":"usage_limit_reached","message":"The usage limit has been reached","resets_in_seconds":3600}}"#,
        );
        assert_eq!((e.kind, e.retryable), (FailureKind::Quota, false));
        let e = c(
            429,
            r#"{"error":{"type":"rate_limit","message":"slow down","resets_in_seconds":3600}}"#,
        );
        assert_eq!((e.kind, e.retryable), (FailureKind::Quota, false));
        let e = classify_http(429, &hdr(&[("retry-after", "7200")]), "{}");
        assert_eq!(e.kind, FailureKind::Quota);
        let e = classify_http(429, &hdr(&[("retry-after", "20")]), "{}");
        assert_eq!(e.kind, FailureKind::RateLimit);
        let e = c(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"Your credit balance is too low to access the Anthropic API."}}"#,
        );
        assert_eq!(e.kind, FailureKind::Quota);
        // An SSE error body: the message, not the raw `data:` line.
        let e = c(
            503,
            "data: {\"error\":{\"message\":\"loading model\",\"type\":\"unavailable_error\"}}\n\n",
        );
        assert_eq!(
            (e.kind, e.message.as_str()),
            (FailureKind::Server, "loading model")
        );
    }

    #[test]
    fn x_should_retry_overrides() {
        let h = hdr(&[("x-should-retry", "false")]);
        assert!(!classify_http(500, &h, "").retryable);
        let h = hdr(&[("x-should-retry", "true")]);
        assert!(classify_http(400, &h, "").retryable);
    }

    #[test]
    fn retry_after_forms() {
        assert_eq!(
            parse_retry_after(&hdr(&[("retry-after", "2")])),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            parse_retry_after(&hdr(&[("retry-after", "0")])),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after(&hdr(&[("retry-after-ms", "150"), ("retry-after", "9")])),
            Some(Duration::from_millis(150))
        );
        assert_eq!(
            parse_retry_after(&hdr(&[("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")])),
            Some(Duration::ZERO),
            "a date in the past means no wait"
        );
        let future = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let date = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&future)
            .unwrap();
        let d = parse_retry_after(&hdr(&[("retry-after", &date)])).unwrap();
        assert!(
            d >= Duration::from_secs(118) && d <= Duration::from_secs(120),
            "{d:?}"
        );
        assert_eq!(parse_retry_after(&hdr(&[("retry-after", "soon")])), None);
    }

    #[test]
    fn stream_error_classes() {
        let k = |c: Option<&str>, t: Option<&str>, m: &str| classify_stream_error(c, t, m).kind;
        assert_eq!(
            k(None, Some("overloaded_error"), "Overloaded"),
            FailureKind::Overloaded
        );
        assert_eq!(k(Some("server_error"), None, "boom"), FailureKind::Server);
        assert_eq!(k(Some("1305"), None, "busy"), FailureKind::RateLimit);
        assert_eq!(
            k(Some("context_length_exceeded"), None, "x"),
            FailureKind::ContextOverflow
        );
        assert_eq!(
            k(None, Some("invalid_request_error"), "bad"),
            FailureKind::InvalidRequest
        );
        assert!(classify_stream_error(None, None, "mystery").retryable);
    }

    #[test]
    fn backoff_is_bounded_and_exponential() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(1000),
            max_retries: 4,
            max_retry_time: Duration::from_secs(60),
            sleep: true,
        };
        for _ in 0..50 {
            let d1 = p.delay(1, None);
            assert!(
                d1 >= Duration::from_millis(100) && d1 <= Duration::from_millis(125),
                "{d1:?}"
            );
            let d3 = p.delay(3, None);
            assert!(d3 >= Duration::from_millis(400) && d3 <= Duration::from_millis(500));
            assert!(p.delay(10, None) <= Duration::from_millis(1000));
        }
        assert_eq!(
            p.delay(1, Some(Duration::from_secs(60))),
            Duration::from_millis(1000)
        );
        assert_eq!(p.delay(1, Some(Duration::ZERO)), Duration::ZERO);
    }

    fn policy(retries: u32) -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::from_millis(1),
            max_backoff: Duration::from_millis(2),
            max_retries: retries,
            max_retry_time: Duration::from_secs(60),
            sleep: true,
        }
    }

    fn done() -> StreamEvent {
        StreamEvent::Done {
            usage: Default::default(),
            stop_reason: None,
            truncated: false,
            response_id: None,
            message_item_id: None,
        }
    }

    #[test]
    fn loop_retries_then_succeeds() {
        let mut evs = vec![];
        run_with_retries(
            &policy(4),
            &CancelToken::new(),
            &mut |e| {
                evs.push(e);
                true
            },
            |n, _| {
                if n < 3 {
                    AttemptOutcome::Failed(AttemptError::incomplete("eof"))
                } else {
                    AttemptOutcome::Done(done())
                }
            },
        );
        assert_eq!(evs.len(), 3);
        assert!(matches!(
            evs[0],
            StreamEvent::Retrying {
                attempt: 2,
                max_attempts: 5,
                ..
            }
        ));
        assert!(matches!(evs[1], StreamEvent::Retrying { attempt: 3, .. }));
        assert_eq!(evs[2], done());
    }

    #[test]
    fn loop_stops_at_budget_and_on_non_retryable_and_after_tool_end() {
        let mut evs = vec![];
        run_with_retries(
            &policy(1),
            &CancelToken::new(),
            &mut |e| {
                evs.push(e);
                true
            },
            |_, _| AttemptOutcome::Failed(AttemptError::new(FailureKind::Server, "500")),
        );
        match evs.last().unwrap() {
            StreamEvent::Failed { error } => {
                assert_eq!((error.attempts, error.max_attempts), (2, 2));
                assert_eq!(error.stop_reason, "retry_limit");
            }
            e => panic!("{e:?}"),
        }

        let mut evs = vec![];
        run_with_retries(
            &policy(3),
            &CancelToken::new(),
            &mut |e| {
                evs.push(e);
                true
            },
            |_, _| AttemptOutcome::Failed(AttemptError::new(FailureKind::Authentication, "no")),
        );
        assert_eq!(evs.len(), 1);
        assert!(
            matches!(&evs[0], StreamEvent::Failed { error } if error.stop_reason == "non_retryable" && error.attempts == 1)
        );

        let mut evs = vec![];
        run_with_retries(
            &policy(3),
            &CancelToken::new(),
            &mut |e| {
                evs.push(e);
                true
            },
            |_, sink| {
                sink.event(StreamEvent::ToolCallEnd {
                    call: super::super::chat::ToolCall {
                        id: "c".into(),
                        name: "x".into(),
                        arguments: "{}".into(),
                        item_id: None,
                    },
                });
                AttemptOutcome::Failed(AttemptError::incomplete("eof"))
            },
        );
        assert_eq!(evs.len(), 2);
        assert!(
            matches!(&evs[1], StreamEvent::Failed { error } if error.stop_reason == "replay_unsafe")
        );
    }

    #[test]
    fn loop_stops_silently_when_sink_refuses() {
        let mut count = 0;
        run_with_retries(
            &policy(3),
            &CancelToken::new(),
            &mut |_| {
                count += 1;
                false
            },
            |_, _| AttemptOutcome::Failed(AttemptError::incomplete("eof")),
        );
        assert_eq!(count, 1, "only the refused Retrying event");
    }
}
