//! A fake model provider: a real HTTP/1.1 server on `127.0.0.1` (ephemeral port) that
//! speaks OpenAI Responses, OpenAI Chat Completions and Anthropic Messages, with scripted
//! answers and failures (bodies shaped after providers.md §7).
//!
//! Std + serde_json only, so tests and benches can include it with
//! `#[path = "support/fake_provider.rs"] mod fake_provider;`.
//!
//! Routes: `POST /v1/responses` and `/responses`, `POST /v1/chat/completions` and
//! `/chat/completions`, `POST /v1/messages` and `/messages`, `GET /v1/models` and
//! `/models`. Each POST pops the next [`Script`] (FIFO) and renders it in the protocol of
//! the path; with no script left it answers 500 `fake provider: no script left`. Every
//! request is recorded ([`FakeProvider::requests`]).
//!
//! Validation (on by default, [`FakeProvider::set_validate`]): requests that break the
//! providers' history rules get the providers' 400 answers without consuming a script —
//! Anthropic prefill (last message `assistant`) and `tool_use`/`tool_result` pairing
//! (§3.3), Chat `tool_calls`/`tool` pairing (§2.1), Responses `function_call`/
//! `function_call_output` pairing (§1.2).
//!
//! Streams use `Transfer-Encoding: chunked` (one chunk per SSE event, flushed) with
//! keep-alive, or close-delimited bodies after [`FakeProvider::set_close_delimited`].
//! Buffered scripts ([`Script::many_deltas`], for throughput) are rendered once to their
//! complete wire bytes (head, chunks of at most 64 KiB, terminator) and sent with one
//! `write_all`; the same script answered again reuses those bytes.
#![allow(dead_code)]

use std::collections::{HashSet, VecDeque};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The wire protocol of a request path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// `/v1/responses`
    Responses,
    /// `/v1/chat/completions`
    Chat,
    /// `/v1/messages`
    Anthropic,
}

impl Proto {
    /// The protocol of a request path, if it is one of the three.
    pub fn of_path(path: &str) -> Option<Proto> {
        let p = path.split('?').next().unwrap_or(path);
        if p.ends_with("/responses") {
            Some(Proto::Responses)
        } else if p.ends_with("/chat/completions") {
            Some(Proto::Chat)
        } else if p.ends_with("/messages") {
            Some(Proto::Anthropic)
        } else {
            None
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// `GET` / `POST`.
    pub method: String,
    /// Path with query.
    pub path: String,
    /// Headers, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON (`Null` when empty or not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Roles of the body's `messages` (Chat, Anthropic) or the `type`/`role` of its
    /// `input` items (Responses: `message:user`, `function_call`, …), in order.
    pub fn roles(&self) -> Vec<String> {
        if let Some(msgs) = self.body.get("messages").and_then(Value::as_array) {
            return msgs
                .iter()
                .map(|m| m["role"].as_str().unwrap_or("?").to_string())
                .collect();
        }
        if let Some(items) = self.body.get("input").and_then(Value::as_array) {
            return items
                .iter()
                .map(
                    |i| match i.get("type").and_then(Value::as_str).unwrap_or("message") {
                        "message" => format!("message:{}", i["role"].as_str().unwrap_or("?")),
                        t => t.to_string(),
                    },
                )
                .collect();
        }
        vec![]
    }
}

/// Token counts of a scripted answer, rendered in each protocol's own shape (Responses
/// and Chat count cached tokens inside `input`; Anthropic reports `input − cached`
/// as `input_tokens` and `cached` as `cache_read_input_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FakeUsage {
    /// Prompt tokens, cached included.
    pub input: u64,
    /// Cached prompt tokens.
    pub cached: u64,
    /// Output tokens, reasoning included.
    pub output: u64,
    /// Reasoning tokens.
    pub reasoning: u64,
}

impl Default for FakeUsage {
    fn default() -> Self {
        FakeUsage {
            input: 12,
            cached: 0,
            output: 2,
            reasoning: 0,
        }
    }
}

/// One piece of a scripted answer.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    /// Visible text, as deltas.
    Text(Vec<String>),
    /// Reasoning / thinking text, as deltas.
    Reasoning(Vec<String>),
    /// A tool call: id, name, argument JSON text as deltas.
    ToolCall {
        /// Call id (`call_…` / `toolu_…`).
        id: String,
        /// Tool name.
        name: String,
        /// Argument fragments (concatenated = the JSON text).
        args: Vec<String>,
    },
}

/// How a scripted stream ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Ending {
    /// Normal terminal events (`response.completed`, finish chunk + usage + `[DONE]`,
    /// `message_delta` + `message_stop`).
    Complete,
    /// The last part is left unfinished (no closing events) and the connection is closed
    /// without a terminal event.
    Truncate,
    /// Like `Truncate`, but the server then sleeps this long with the connection open,
    /// then closes.
    Stall(Duration),
    /// Like `Stall` (the last part unfinished, the connection silent this long), then
    /// the rest of the stream and its normal terminal events (a provider that holds
    /// mid-stream, then completes). Not for buffered scripts.
    Late(Duration),
    /// After the parts, an in-stream error event of this kind (Responses `error` +
    /// `response.failed`, Chat error chunk with `finish_reason:"error"`, Anthropic
    /// `event: error`).
    Error(StreamError),
    /// The output limit cut the answer after the parts as given (a tool call's argument
    /// fragments are then usually not complete JSON): Chat `finish_reason:"length"`,
    /// Responses `response.incomplete` (`incomplete_details.reason:"max_output_tokens"`,
    /// the last item `status:"incomplete"`; [`ServerKind::LlamaServer`] reports
    /// `response.completed` regardless, as llama-server does), Messages
    /// `stop_reason:"max_tokens"`.
    Length,
}

/// Which server's dialect a stream imitates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// The vendors' own shapes (OpenAI, Anthropic).
    Vendor,
    /// llama.cpp's `llama-server` (tools/server/server-task.cpp): Responses events carry
    /// no `output_index` and no `sequence_number` (`item_id` only), function-call items
    /// have no `id` and a `call_id` of `fc_<id>` that the argument deltas use as
    /// `item_id`; the terminal event is always `response.completed`, and usage has no
    /// details objects.
    LlamaServer,
}

/// The class of an in-stream error event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    /// `overloaded_error`.
    Overloaded,
    /// `server_error` / `api_error` ("boom").
    Server,
    /// `rate_limit_error` / `rate_limit_exceeded`.
    RateLimit,
    /// `invalid_request_error` (not retryable).
    InvalidRequest,
}

/// An HTTP error answer, with the body in the path's protocol shape (§4.1).
#[derive(Debug, Clone, PartialEq)]
pub enum HttpError {
    /// 429 `rate_limit_error` / `rate_limit_exceeded`.
    RateLimit,
    /// 429 `insufficient_quota` (OpenAI shape).
    Quota,
    /// 529 `overloaded_error`.
    Overloaded,
    /// 500 `api_error` / `server_error`.
    Server,
    /// 401 `authentication_error` / `invalid_api_key`.
    Unauthorized,
    /// 404 model not found.
    ModelNotFound,
    /// 400 `invalid_request_error` with this message.
    BadRequest(String),
}

impl HttpError {
    fn status(&self) -> u16 {
        match self {
            HttpError::RateLimit | HttpError::Quota => 429,
            HttpError::Overloaded => 529,
            HttpError::Server => 500,
            HttpError::Unauthorized => 401,
            HttpError::ModelNotFound => 404,
            HttpError::BadRequest(_) => 400,
        }
    }

    fn body(&self, proto: Proto) -> String {
        let (a_type, o_type, code, msg): (&str, &str, Value, String) = match self {
            HttpError::RateLimit => (
                "rate_limit_error",
                "requests",
                json!("rate_limit_exceeded"),
                "rate limited".into(),
            ),
            HttpError::Quota => (
                "rate_limit_error",
                "insufficient_quota",
                json!("insufficient_quota"),
                "You exceeded your current quota".into(),
            ),
            HttpError::Overloaded => (
                "overloaded_error",
                "overloaded_error",
                Value::Null,
                "Overloaded".into(),
            ),
            HttpError::Server => (
                "api_error",
                "server_error",
                json!("server_error"),
                "Internal server error".into(),
            ),
            HttpError::Unauthorized => (
                "authentication_error",
                "invalid_request_error",
                json!("invalid_api_key"),
                "invalid x-api-key".into(),
            ),
            HttpError::ModelNotFound => (
                "not_found_error",
                "invalid_request_error",
                json!("model_not_found"),
                "The model `nope` does not exist or you do not have access to it.".into(),
            ),
            HttpError::BadRequest(m) => (
                "invalid_request_error",
                "invalid_request_error",
                Value::Null,
                m.clone(),
            ),
        };
        error_body(proto, a_type, o_type, code, &msg)
    }
}

fn error_body(proto: Proto, a_type: &str, o_type: &str, code: Value, msg: &str) -> String {
    match proto {
        Proto::Anthropic => json!({"type": "error", "error": {"type": a_type, "message": msg}, "request_id": "req_fake"}),
        _ => json!({"error": {"message": msg, "type": o_type, "param": null, "code": code}}),
    }
    .to_string()
}

/// What the server does for one POST request.
#[derive(Debug, Clone, PartialEq)]
pub enum Script {
    /// A 200 event stream.
    Stream {
        /// The answer's parts, in output order.
        parts: Vec<Part>,
        /// Reported usage.
        usage: FakeUsage,
        /// How the stream ends.
        ending: Ending,
        /// Write each SSE event that contains a multi-byte character in two TCP writes
        /// split *inside* that character (flush + 5 ms sleep between).
        split_utf8: bool,
        /// Chat only: send each tool call complete in one delta (Ollama style).
        whole_tool_calls: bool,
        /// Buffer writes (64 KiB) instead of one flushed chunk per event (throughput).
        buffered: bool,
        /// The dialect.
        server: ServerKind,
        /// Answer with one complete JSON body (`content-type: application/json`) instead
        /// of an event stream, as servers that ignore `stream:true` do.
        json_body: bool,
    },
    /// An HTTP error status with a protocol-shaped JSON body.
    Status {
        /// The error.
        error: HttpError,
        /// `retry-after` header value, if any.
        retry_after: Option<String>,
    },
    /// A raw answer: status, extra headers, body bytes (e.g. an SSE body from §7).
    Raw {
        /// HTTP status.
        status: u16,
        /// Extra headers (a `content-type` here replaces the default
        /// `text/event-stream`).
        headers: Vec<(String, String)>,
        /// Body text, sent as is.
        body: String,
    },
}

fn split3(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.len() < 3 {
        return vec![s.to_string()];
    }
    let a = chars.len() / 3;
    let b = 2 * chars.len() / 3;
    vec![
        chars[..a].iter().collect(),
        chars[a..b].iter().collect(),
        chars[b..].iter().collect(),
    ]
}

impl Script {
    /// A stream of `parts` with default usage, ending normally.
    pub fn stream(parts: Vec<Part>) -> Script {
        Script::Stream {
            parts,
            usage: FakeUsage::default(),
            ending: Ending::Complete,
            split_utf8: false,
            whole_tool_calls: false,
            buffered: false,
            server: ServerKind::Vendor,
            json_body: false,
        }
    }

    /// A text answer streamed as `chunks`.
    pub fn text(chunks: &[&str]) -> Script {
        Script::stream(vec![Part::Text(
            chunks.iter().map(|s| s.to_string()).collect(),
        )])
    }

    /// One tool call (`call_fake_1` / `toolu_fake_1` style id `id`), arguments streamed in
    /// three deltas.
    pub fn tool_call(id: &str, name: &str, args: &str) -> Script {
        Script::tool_calls(&[(id, name, args)])
    }

    /// Several tool calls in one answer (parallel calls).
    pub fn tool_calls(calls: &[(&str, &str, &str)]) -> Script {
        Script::stream(
            calls
                .iter()
                .map(|(id, name, args)| Part::ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    args: split3(args),
                })
                .collect(),
        )
    }

    /// Reasoning deltas, then text deltas.
    pub fn reasoning_then_text(reasoning: &[&str], text: &[&str]) -> Script {
        Script::stream(vec![
            Part::Reasoning(reasoning.iter().map(|s| s.to_string()).collect()),
            Part::Text(text.iter().map(|s| s.to_string()).collect()),
        ])
    }

    /// A short text, then one tool call.
    pub fn text_then_tool_call(text: &str, id: &str, name: &str, args: &str) -> Script {
        Script::stream(vec![
            Part::Text(vec![text.to_string()]),
            Part::ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                args: split3(args),
            },
        ])
    }

    /// `n` text deltas of `delta`, buffered writes, as fast as possible (throughput).
    pub fn many_deltas(n: usize, delta: &str) -> Script {
        Script::Stream {
            parts: vec![Part::Text(vec![delta.to_string(); n])],
            usage: FakeUsage::default(),
            ending: Ending::Complete,
            split_utf8: false,
            whole_tool_calls: false,
            buffered: true,
            server: ServerKind::Vendor,
            json_body: false,
        }
    }

    /// Text deltas, then the connection closes without a terminal event.
    pub fn truncated(chunks: &[&str]) -> Script {
        Script::text(chunks).ending(Ending::Truncate)
    }

    /// Text deltas, then silence for `stall` with the connection open.
    pub fn stall(chunks: &[&str], stall: Duration) -> Script {
        Script::text(chunks).ending(Ending::Stall(stall))
    }

    /// Text deltas, then an in-stream error event.
    pub fn stream_error(chunks: &[&str], kind: StreamError) -> Script {
        Script::text(chunks).ending(Ending::Error(kind))
    }

    /// 429 with `retry-after: <retry_after>`.
    pub fn rate_limited(retry_after: &str) -> Script {
        Script::Status {
            error: HttpError::RateLimit,
            retry_after: Some(retry_after.to_string()),
        }
    }

    /// 529 overloaded (`retry-after: 0`).
    pub fn overloaded() -> Script {
        Script::Status {
            error: HttpError::Overloaded,
            retry_after: Some("0".into()),
        }
    }

    /// An HTTP error without `retry-after`.
    pub fn status(error: HttpError) -> Script {
        Script::Status {
            error,
            retry_after: None,
        }
    }

    /// A raw SSE body with status 200.
    pub fn raw_sse(body: &str) -> Script {
        Script::Raw {
            status: 200,
            headers: vec![],
            body: body.to_string(),
        }
    }

    /// Replaces the ending (stream scripts only).
    pub fn ending(mut self, e: Ending) -> Script {
        if let Script::Stream { ending, .. } = &mut self {
            *ending = e;
        }
        self
    }

    /// Replaces the usage (stream scripts only).
    pub fn usage(mut self, u: FakeUsage) -> Script {
        if let Script::Stream { usage, .. } = &mut self {
            *usage = u;
        }
        self
    }

    /// Splits multi-byte characters across TCP writes (stream scripts only).
    pub fn split_utf8(mut self) -> Script {
        if let Script::Stream { split_utf8, .. } = &mut self {
            *split_utf8 = true;
        }
        self
    }

    /// Imitates `server`'s dialect (stream scripts only).
    pub fn server(mut self, k: ServerKind) -> Script {
        if let Script::Stream { server, .. } = &mut self {
            *server = k;
        }
        self
    }

    /// Answers with one complete JSON body instead of a stream (stream scripts only).
    pub fn json_body(mut self) -> Script {
        if let Script::Stream { json_body, .. } = &mut self {
            *json_body = true;
        }
        self
    }

    /// Chat: each tool call in one delta (stream scripts only).
    pub fn whole_tool_calls(mut self) -> Script {
        if let Script::Stream {
            whole_tool_calls, ..
        } = &mut self
        {
            *whole_tool_calls = true;
        }
        self
    }
}

// ---------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------

/// SSE events of a stream: `events[..cut]` are the parts up to the body of the last part;
/// the rest closes the last part and terminates the stream.
struct Rendered {
    events: Vec<String>,
    cut: usize,
    error: Vec<String>,
}

fn sse(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(e) => format!("event: {e}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

/// How a stream is rendered besides its parts.
#[derive(Debug, Clone, Copy)]
struct RenderOpts {
    whole_calls: bool,
    err: Option<StreamError>,
    /// [`Ending::Length`].
    length: bool,
    server: ServerKind,
}

fn render(proto: Proto, model: &str, parts: &[Part], usage: FakeUsage, o: RenderOpts) -> Rendered {
    match proto {
        Proto::Responses if o.server == ServerKind::LlamaServer => {
            render_responses_llama(model, parts, usage)
        }
        Proto::Responses => render_responses(model, parts, usage, o.err, o.length),
        Proto::Chat => render_chat(model, parts, usage, o.whole_calls, o.err, o.length),
        Proto::Anthropic => render_anthropic(model, parts, usage, o.err, o.length),
    }
}

/// The complete (non-streamed) JSON answer of `parts` in `proto`'s shape.
fn render_json_body(proto: Proto, model: &str, parts: &[Part], u: FakeUsage) -> Value {
    let text: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(c) => Some(c.concat()),
            _ => None,
        })
        .collect();
    let reasoning: String = parts
        .iter()
        .filter_map(|p| match p {
            Part::Reasoning(c) => Some(c.concat()),
            _ => None,
        })
        .collect();
    let calls: Vec<(&String, &String, String)> = parts
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall { id, name, args } => Some((id, name, args.concat())),
            _ => None,
        })
        .collect();
    match proto {
        Proto::Chat => {
            let mut msg = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }});
            if !reasoning.is_empty() {
                msg["reasoning_content"] = json!(reasoning);
            }
            if !calls.is_empty() {
                msg["tool_calls"] = calls
                    .iter()
                    .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
                    .collect();
            }
            json!({"id": "chatcmpl-fake", "object": "chat.completion", "created": 1700000000, "model": model,
                "choices": [{"index": 0, "message": msg, "finish_reason": if calls.is_empty() { "stop" } else { "tool_calls" }}],
                "usage": {"prompt_tokens": u.input, "completion_tokens": u.output, "total_tokens": u.input + u.output}})
        }
        Proto::Responses => {
            let mut output = vec![];
            if !reasoning.is_empty() {
                output.push(json!({"id": "rs_fake", "type": "reasoning", "summary": [{"type": "summary_text", "text": reasoning}], "status": "completed"}));
            }
            if !text.is_empty() {
                output.push(json!({"id": "msg_fake", "type": "message", "role": "assistant", "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]}));
            }
            for (id, name, args) in &calls {
                output.push(json!({"id": format!("fc_{}", id.trim_start_matches("call_")), "type": "function_call", "status": "completed", "call_id": id, "name": name, "arguments": args}));
            }
            json!({"id": "resp_fake", "object": "response", "status": "completed", "model": model, "output": output,
                "usage": {"input_tokens": u.input, "output_tokens": u.output, "total_tokens": u.input + u.output}})
        }
        Proto::Anthropic => {
            let mut content = vec![];
            if !text.is_empty() {
                content.push(json!({"type": "text", "text": text}));
            }
            for (id, name, args) in &calls {
                let input: Value = serde_json::from_str(args).unwrap_or(json!({}));
                content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
            }
            json!({"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": content,
                "stop_reason": if calls.is_empty() { "end_turn" } else { "tool_use" }, "stop_sequence": null,
                "usage": {"input_tokens": u.input, "output_tokens": u.output}})
        }
    }
}

/// llama-server's Responses stream (see [`ServerKind::LlamaServer`]): partial events
/// up to `cut`, then the final `output_item.done` events (reasoning, message, calls, in
/// that order) and `response.completed`.
fn render_responses_llama(model: &str, parts: &[Part], u: FakeUsage) -> Rendered {
    let ev = |v: Value| {
        let t = v["type"].as_str().unwrap_or("").to_string();
        sse(Some(&t), &v)
    };
    let mut events = vec![
        ev(
            json!({"type": "response.created", "response": {"id": "resp_llama", "object": "response", "status": "in_progress"}}),
        ),
        ev(
            json!({"type": "response.in_progress", "response": {"id": "resp_llama", "object": "response", "status": "in_progress"}}),
        ),
    ];
    let (rs_id, msg_id) = ("rs_llama", "msg_llama");
    let mut reasoning = String::new();
    let mut text = String::new();
    let mut calls = vec![];
    for part in parts {
        match part {
            Part::Reasoning(chunks) => {
                if reasoning.is_empty() {
                    events.push(ev(json!({"type": "response.output_item.added", "item": {"id": rs_id, "summary": [], "type": "reasoning", "content": [], "encrypted_content": "", "status": "in_progress"}})));
                }
                for c in chunks {
                    reasoning.push_str(c);
                    events.push(ev(json!({"type": "response.reasoning_text.delta", "delta": c, "item_id": rs_id})));
                }
            }
            Part::Text(chunks) => {
                if text.is_empty() {
                    events.push(ev(json!({"type": "response.output_item.added", "item": {"content": [], "id": msg_id, "role": "assistant", "status": "in_progress", "type": "message"}})));
                    events.push(ev(json!({"type": "response.content_part.added", "item_id": msg_id, "part": {"type": "output_text", "text": ""}})));
                }
                for c in chunks {
                    text.push_str(c);
                    events.push(ev(json!({"type": "response.output_text.delta", "item_id": msg_id, "delta": c})));
                }
            }
            Part::ToolCall { id, name, args } => {
                let call_id = format!("fc_{id}");
                events.push(ev(json!({"type": "response.output_item.added", "item": {"arguments": "", "call_id": call_id, "name": name, "type": "function_call", "status": "in_progress"}})));
                for a in args {
                    events.push(ev(json!({"type": "response.function_call_arguments.delta", "delta": a, "item_id": call_id})));
                }
                calls.push((call_id, name.clone(), args.concat()));
            }
        }
    }
    let cut = events.len();
    let mut output = vec![];
    if !reasoning.is_empty() {
        let item = json!({"id": rs_id, "summary": [], "type": "reasoning", "content": [{"text": reasoning, "type": "reasoning_text"}], "encrypted_content": ""});
        events.push(ev(
            json!({"type": "response.output_item.done", "item": item}),
        ));
        output.push(item);
    }
    if !text.is_empty() {
        events.push(ev(
            json!({"type": "response.output_text.done", "item_id": msg_id, "text": text}),
        ));
        let part = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": text});
        events.push(ev(
            json!({"type": "response.content_part.done", "item_id": msg_id, "part": part}),
        ));
        let item = json!({"type": "message", "status": "completed", "id": msg_id, "content": [part], "role": "assistant"});
        events.push(ev(
            json!({"type": "response.output_item.done", "item": item}),
        ));
        output.push(item);
    }
    for (call_id, name, args) in calls {
        let item = json!({"type": "function_call", "status": "completed", "arguments": args, "call_id": call_id, "name": name});
        events.push(ev(
            json!({"type": "response.output_item.done", "item": item}),
        ));
        output.push(item);
    }
    events.push(ev(json!({"type": "response.completed", "response": {"id": "resp_llama", "object": "response", "created_at": 1700000000, "status": "completed", "model": model, "output": output,
        "usage": {"input_tokens": u.input, "output_tokens": u.output, "total_tokens": u.input + u.output}}})));
    Rendered {
        events,
        cut,
        error: vec![],
    }
}

fn render_responses(
    model: &str,
    parts: &[Part],
    u: FakeUsage,
    err: Option<StreamError>,
    length: bool,
) -> Rendered {
    let mut seq = 0u64;
    let mut ev = |v: Value| {
        let mut v = v;
        v["sequence_number"] = json!(seq);
        seq += 1;
        let t = v["type"].as_str().unwrap_or("").to_string();
        sse(Some(&t), &v)
    };
    let resp = |status: &str, output: Value, usage: Value| json!({"id": "resp_fake", "object": "response", "status": status, "model": model, "output": output, "usage": usage});
    let mut events = vec![
        ev(
            json!({"type": "response.created", "response": resp("in_progress", json!([]), Value::Null)}),
        ),
        ev(
            json!({"type": "response.in_progress", "response": resp("in_progress", json!([]), Value::Null)}),
        ),
    ];
    let mut cut = events.len();
    let mut output = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match part {
            Part::Text(chunks) => {
                let id = format!("msg_fake_{i}");
                let text: String = chunks.concat();
                events.push(ev(json!({"type": "response.output_item.added", "output_index": i, "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})));
                events.push(ev(json!({"type": "response.content_part.added", "item_id": id, "output_index": i, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
                for c in chunks {
                    events.push(ev(json!({"type": "response.output_text.delta", "item_id": id, "output_index": i, "content_index": 0, "delta": c})));
                }
                if last {
                    cut = events.len();
                }
                let item = json!({"id": id, "type": "message", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": text, "annotations": []}]});
                events.push(ev(json!({"type": "response.output_text.done", "item_id": id, "output_index": i, "content_index": 0, "text": text})));
                events.push(ev(json!({"type": "response.content_part.done", "item_id": id, "output_index": i, "content_index": 0, "part": {"type": "output_text", "text": text, "annotations": []}})));
                events.push(ev(
                    json!({"type": "response.output_item.done", "output_index": i, "item": item}),
                ));
                output.push(item);
            }
            Part::Reasoning(chunks) => {
                let id = format!("rs_fake_{i}");
                let text: String = chunks.concat();
                events.push(ev(json!({"type": "response.output_item.added", "output_index": i, "item": {"id": id, "type": "reasoning", "summary": []}})));
                events.push(ev(json!({"type": "response.reasoning_summary_part.added", "item_id": id, "output_index": i, "summary_index": 0, "part": {"type": "summary_text", "text": ""}})));
                for c in chunks {
                    events.push(ev(json!({"type": "response.reasoning_summary_text.delta", "item_id": id, "output_index": i, "summary_index": 0, "delta": c})));
                }
                if last {
                    cut = events.len();
                }
                let item = json!({"id": id, "type": "reasoning", "status": "completed", "summary": [{"type": "summary_text", "text": text}], "encrypted_content": "enc_fake"});
                events.push(ev(json!({"type": "response.reasoning_summary_text.done", "item_id": id, "output_index": i, "summary_index": 0, "text": text})));
                events.push(ev(json!({"type": "response.reasoning_summary_part.done", "item_id": id, "output_index": i, "summary_index": 0, "part": {"type": "summary_text", "text": text}})));
                events.push(ev(
                    json!({"type": "response.output_item.done", "output_index": i, "item": item}),
                ));
                output.push(item);
            }
            Part::ToolCall { id, name, args } => {
                let item_id = format!("fc_{}", id.trim_start_matches("call_"));
                let full: String = args.concat();
                events.push(ev(json!({"type": "response.output_item.added", "output_index": i, "item": {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "", "call_id": id, "name": name}})));
                for a in args {
                    events.push(ev(json!({"type": "response.function_call_arguments.delta", "item_id": item_id, "output_index": i, "delta": a})));
                }
                if last {
                    cut = events.len();
                }
                if last && length {
                    output.push(json!({"id": item_id, "type": "function_call", "status": "incomplete", "arguments": full, "call_id": id, "name": name}));
                    continue;
                }
                let item = json!({"id": item_id, "type": "function_call", "status": "completed", "arguments": full, "call_id": id, "name": name});
                events.push(ev(json!({"type": "response.function_call_arguments.done", "item_id": item_id, "output_index": i, "name": name, "arguments": full})));
                events.push(ev(
                    json!({"type": "response.output_item.done", "output_index": i, "item": item}),
                ));
                output.push(item);
            }
        }
    }
    let usage = json!({"input_tokens": u.input, "input_tokens_details": {"cached_tokens": u.cached}, "output_tokens": u.output, "output_tokens_details": {"reasoning_tokens": u.reasoning}, "total_tokens": u.input + u.output});
    if length {
        let mut r = resp("incomplete", Value::Array(output), usage);
        r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        events.push(ev(json!({"type": "response.incomplete", "response": r})));
    } else {
        events.push(ev(json!({"type": "response.completed", "response": resp("completed", Value::Array(output), usage)})));
    }
    let mut error = Vec::new();
    if let Some(k) = err {
        let (code, msg) = match k {
            StreamError::Overloaded => ("overloaded", "Overloaded"),
            StreamError::Server => ("server_error", "boom"),
            StreamError::RateLimit => ("rate_limit_exceeded", "rate limited"),
            StreamError::InvalidRequest => ("invalid_request_error", "bad request"),
        };
        error.push(ev(
            json!({"type": "error", "code": code, "message": msg, "param": null}),
        ));
        error.push(ev(json!({"type": "response.failed", "response": {"id": "resp_fake", "status": "failed", "error": {"code": code, "message": msg}}})));
    }
    Rendered { events, cut, error }
}

fn render_chat(
    model: &str,
    parts: &[Part],
    u: FakeUsage,
    whole: bool,
    err: Option<StreamError>,
    length: bool,
) -> Rendered {
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], "usage": null}),
        )
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let mut call_index = 0;
    let mut any_call = false;
    for part in parts {
        match part {
            Part::Text(chunks) => {
                for c in chunks {
                    events.push(chunk(json!({"content": c}), Value::Null));
                }
            }
            Part::Reasoning(chunks) => {
                for c in chunks {
                    events.push(chunk(json!({"reasoning_content": c}), Value::Null));
                }
            }
            Part::ToolCall { id, name, args } => {
                any_call = true;
                if whole {
                    events.push(chunk(json!({"tool_calls": [{"index": call_index, "id": id, "type": "function", "function": {"name": name, "arguments": args.concat()}}]}), Value::Null));
                } else {
                    events.push(chunk(json!({"tool_calls": [{"index": call_index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}), Value::Null));
                    for a in args {
                        events.push(chunk(json!({"tool_calls": [{"index": call_index, "function": {"arguments": a}}]}), Value::Null));
                    }
                }
                call_index += 1;
            }
        }
    }
    let cut = events.len();
    events.push(chunk(
        json!({}),
        json!(if length {
            "length"
        } else if any_call {
            "tool_calls"
        } else {
            "stop"
        }),
    ));
    events.push(sse(None, &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model, "choices": [], "usage": {"prompt_tokens": u.input, "completion_tokens": u.output, "total_tokens": u.input + u.output, "prompt_tokens_details": {"cached_tokens": u.cached}, "completion_tokens_details": {"reasoning_tokens": u.reasoning}}})));
    events.push("data: [DONE]\n\n".to_string());
    let mut error = Vec::new();
    if let Some(k) = err {
        let (code, msg) = match k {
            StreamError::Overloaded => (json!(529), "Overloaded"),
            StreamError::Server => (json!(500), "boom"),
            StreamError::RateLimit => (json!(429), "rate limited"),
            StreamError::InvalidRequest => (json!("invalid_request_error"), "bad request"),
        };
        error.push(sse(None, &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 1700000000, "model": model, "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}], "error": {"code": code, "message": msg}})));
    }
    Rendered { events, cut, error }
}

fn render_anthropic(
    model: &str,
    parts: &[Part],
    u: FakeUsage,
    err: Option<StreamError>,
    length: bool,
) -> Rendered {
    let ev = |v: Value| {
        let t = v["type"].as_str().unwrap_or("").to_string();
        sse(Some(&t), &v)
    };
    let mut events = vec![ev(
        json!({"type": "message_start", "message": {"id": "msg_fake", "type": "message", "role": "assistant", "model": model, "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": u.input - u.cached, "cache_creation_input_tokens": 0, "cache_read_input_tokens": u.cached, "output_tokens": 1}}}),
    )];
    let mut cut = events.len();
    let mut any_call = false;
    for (i, part) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match part {
            Part::Text(chunks) => {
                events.push(ev(json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})));
                if i == 0 {
                    events.push(ev(json!({"type": "ping"})));
                }
                for c in chunks {
                    events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": c}})));
                }
            }
            Part::Reasoning(chunks) => {
                events.push(ev(json!({"type": "content_block_start", "index": i, "content_block": {"type": "thinking", "thinking": "", "signature": ""}})));
                for c in chunks {
                    events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "thinking_delta", "thinking": c}})));
                }
            }
            Part::ToolCall { id, name, args } => {
                any_call = true;
                events.push(ev(json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}})));
                events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": ""}})));
                for a in args {
                    events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": a}})));
                }
            }
        }
        if last {
            cut = events.len();
        }
        if let Part::Reasoning(_) = part {
            events.push(ev(json!({"type": "content_block_delta", "index": i, "delta": {"type": "signature_delta", "signature": "sig_fake"}})));
        }
        events.push(ev(json!({"type": "content_block_stop", "index": i})));
    }
    let stop = if length {
        "max_tokens"
    } else if any_call {
        "tool_use"
    } else {
        "end_turn"
    };
    events.push(ev(json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": u.output}})));
    events.push(ev(json!({"type": "message_stop"})));
    let mut error = Vec::new();
    if let Some(k) = err {
        let (t, msg) = match k {
            StreamError::Overloaded => ("overloaded_error", "Overloaded"),
            StreamError::Server => ("api_error", "boom"),
            StreamError::RateLimit => ("rate_limit_error", "rate limited"),
            StreamError::InvalidRequest => ("invalid_request_error", "bad request"),
        };
        error.push(ev(
            json!({"type": "error", "error": {"type": t, "message": msg}}),
        ));
    }
    Rendered { events, cut, error }
}

// ---------------------------------------------------------------------------------------
// Validation (providers' history rules)
// ---------------------------------------------------------------------------------------

fn validate(proto: Proto, body: &Value) -> Result<(), String> {
    match proto {
        Proto::Anthropic => {
            let msgs = body["messages"].as_array().cloned().unwrap_or_default();
            if msgs.last().is_some_and(|m| m["role"] == "assistant") {
                return Err("This model does not support assistant message prefill. The conversation must end with a user message.".into());
            }
            for (k, m) in msgs.iter().enumerate() {
                let blocks = m["content"].as_array().cloned().unwrap_or_default();
                if m["role"] == "assistant" {
                    let ids: Vec<String> = blocks
                        .iter()
                        .filter(|b| b["type"] == "tool_use")
                        .filter_map(|b| b["id"].as_str().map(str::to_string))
                        .collect();
                    if ids.is_empty() {
                        continue;
                    }
                    let next: HashSet<String> = msgs
                        .get(k + 1)
                        .filter(|n| n["role"] == "user")
                        .and_then(|n| n["content"].as_array())
                        .map(|bs| {
                            bs.iter()
                                .filter(|b| b["type"] == "tool_result")
                                .filter_map(|b| b["tool_use_id"].as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                    let missing: Vec<&String> = ids.iter().filter(|i| !next.contains(*i)).collect();
                    if !missing.is_empty() {
                        return Err(format!(
                            "messages.{k}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                            missing.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                        ));
                    }
                } else {
                    let prev: HashSet<String> = k
                        .checked_sub(1)
                        .and_then(|p| msgs.get(p))
                        .and_then(|p| p["content"].as_array())
                        .map(|bs| {
                            bs.iter()
                                .filter(|b| b["type"] == "tool_use")
                                .filter_map(|b| b["id"].as_str().map(str::to_string))
                                .collect()
                        })
                        .unwrap_or_default();
                    for b in blocks.iter().filter(|b| b["type"] == "tool_result") {
                        let id = b["tool_use_id"].as_str().unwrap_or("");
                        if !prev.contains(id) {
                            return Err(format!("messages.{k}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."));
                        }
                    }
                }
            }
            Ok(())
        }
        Proto::Chat => {
            let msgs = body["messages"].as_array().cloned().unwrap_or_default();
            let mut pending: Vec<String> = Vec::new();
            let mut answerable: HashSet<String> = HashSet::new();
            for m in &msgs {
                let role = m["role"].as_str().unwrap_or("");
                if role == "tool" {
                    let id = m["tool_call_id"].as_str().unwrap_or("");
                    if !answerable.contains(id) {
                        return Err(format!("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'. (tool_call_id {id})"));
                    }
                    pending.retain(|p| p != id);
                    continue;
                }
                if !pending.is_empty() {
                    return Err(format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", pending.join(", ")));
                }
                answerable.clear();
                if role == "assistant" {
                    if let Some(calls) = m["tool_calls"].as_array() {
                        for c in calls {
                            let id = c["id"].as_str().unwrap_or("").to_string();
                            pending.push(id.clone());
                            answerable.insert(id);
                        }
                    }
                }
            }
            if !pending.is_empty() {
                return Err(format!("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: {}", pending.join(", ")));
            }
            Ok(())
        }
        Proto::Responses => {
            let items = body["input"].as_array().cloned().unwrap_or_default();
            let calls: HashSet<&str> = items
                .iter()
                .filter(|i| i["type"] == "function_call")
                .filter_map(|i| i["call_id"].as_str())
                .collect();
            let outputs: HashSet<&str> = items
                .iter()
                .filter(|i| i["type"] == "function_call_output")
                .filter_map(|i| i["call_id"].as_str())
                .collect();
            if let Some(o) = outputs.iter().find(|o| !calls.contains(*o)) {
                return Err(format!(
                    "No tool call found for function call output with call_id {o}."
                ));
            }
            if let Some(c) = calls.iter().find(|c| !outputs.contains(*c)) {
                return Err(format!("No tool output found for function call {c}."));
            }
            Ok(())
        }
    }
}

// ---------------------------------------------------------------------------------------
// The server
// ---------------------------------------------------------------------------------------

/// Chooses the answer of a POST from its body (see [`FakeProvider::set_responder`]).
pub type Responder = Box<dyn Fn(&Value) -> Option<Script> + Send + Sync>;

struct Shared {
    scripts: Mutex<VecDeque<Script>>,
    /// When set, asked first for every POST's script; `None` falls back to the queue.
    responder: Mutex<Option<Arc<Responder>>>,
    requests: Mutex<Vec<RecordedRequest>>,
    models: Mutex<Vec<String>>,
    validate: AtomicBool,
    close_delimited: AtomicBool,
    stop: AtomicBool,
    connections_closed: Mutex<usize>,
    /// The last buffered stream rendered to wire bytes (key: protocol, model, chunked,
    /// script), reused while the same script is answered again (benches push the same
    /// `many_deltas` script for hundreds of streams).
    wire_cache: Mutex<Option<WireCache>>,
    /// The barrier of [`FakeProvider::hold_posts`], and its wake-up.
    gate: Mutex<Option<Gate>>,
    gate_cv: Condvar,
    /// Answers a POST when no script is queued ([`FakeProvider::set_fallback`]).
    fallback: Mutex<Option<Fallback>>,
    /// The context window in tokens ([`FakeProvider::set_context_window`]).
    window: Mutex<Option<u64>>,
}

/// Makes the answer to a request from its protocol and body.
pub type Fallback = Arc<dyn Fn(Proto, &Value) -> Script + Send + Sync>;

/// Estimated tokens of a request body as the fake counts them (4 bytes per token).
pub fn body_tokens(body: &Value) -> u64 {
    body.to_string().len() as u64 / 4
}

/// The 400 body of a context overflow in `proto`'s shape: Anthropic's `prompt is too
/// long`, OpenAI's `context_length_exceeded` (Responses) and llama.cpp's
/// `exceed_context_size_error` (Chat).
fn overflow_body(proto: Proto, tokens: u64, window: u64) -> String {
    match proto {
        Proto::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": format!("prompt is too long: {tokens} tokens > {window} maximum")}}),
        Proto::Responses => json!({"error": {"message": format!("Your input exceeds the context window of this model ({tokens} > {window} tokens)"),
            "type": "invalid_request_error", "param": "input", "code": "context_length_exceeded"}}),
        Proto::Chat => json!({"error": {"code": 400, "type": "exceed_context_size_error",
            "message": "the request exceeds the available context size, try increasing it",
            "n_prompt_tokens": tokens, "n_ctx": window}}),
    }
    .to_string()
}

/// [`FakeProvider::hold_posts`]: POSTs wait until `need` of them arrived; then their
/// buffered answers are written by one pump thread ([`pump`]), interleaved.
struct Gate {
    need: usize,
    arrived: usize,
    released: Option<Instant>,
    /// The pump's queue, while the pump runs.
    pump: Option<mpsc::Sender<PumpJob>>,
}

/// Bytes of a held answer the pump writes per turn (~120 deltas of `many_deltas`).
const PACE_BYTES: usize = 16 * 1024;

/// A held answer for the pump: the connection, the bytes, and where to say it is done.
struct PumpJob {
    stream: TcpStream,
    bytes: Arc<Vec<u8>>,
    done: mpsc::Sender<io::Result<()>>,
}

/// A buffered stream's complete answer on the wire: status line, headers, framed body
/// and, when the stream ends normally, the chunked terminator.
struct WireCache {
    proto: Proto,
    model: String,
    chunked: bool,
    script: Script,
    bytes: Arc<Vec<u8>>,
}

/// The running fake server. Dropping it stops accepting and wakes sleeping stalls.
pub struct FakeProvider {
    shared: Arc<Shared>,
    port: u16,
}

impl FakeProvider {
    /// Binds `127.0.0.1:0` and starts the accept thread.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind fake provider");
        let port = listener.local_addr().expect("addr").port();
        let shared = Arc::new(Shared {
            scripts: Mutex::new(VecDeque::new()),
            responder: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            models: Mutex::new(vec!["fake-model".to_string()]),
            validate: AtomicBool::new(true),
            close_delimited: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            connections_closed: Mutex::new(0),
            wire_cache: Mutex::new(None),
            gate: Mutex::new(None),
            gate_cv: Condvar::new(),
            fallback: Mutex::new(None),
            window: Mutex::new(None),
        });
        let s = shared.clone();
        thread::Builder::new()
            .name("fake-provider-accept".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    if s.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(conn) = conn else { continue };
                    let s2 = s.clone();
                    let _ = thread::Builder::new()
                        .name("fake-provider-conn".into())
                        .spawn(move || {
                            let _ = serve_connection(&s2, conn);
                            *s2.connections_closed.lock().unwrap() += 1;
                        });
                }
            })
            .expect("spawn accept thread");
        FakeProvider { shared, port }
    }

    /// `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("{}/v1", self.root_url())
    }

    /// `http://127.0.0.1:PORT`.
    pub fn root_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Queues a script for the next POST.
    pub fn push(&self, s: Script) {
        self.shared.scripts.lock().unwrap().push_back(s);
    }

    /// Answers each POST by its request body (tests whose requests arrive concurrently
    /// from several conversations tell them apart by content); `None` from `f` falls
    /// back to the queue of [`FakeProvider::push`].
    pub fn set_responder(&self, f: impl Fn(&Value) -> Option<Script> + Send + Sync + 'static) {
        *self.shared.responder.lock().unwrap() = Some(Arc::new(Box::new(f)));
    }

    /// Scripts not yet used.
    pub fn scripts_left(&self) -> usize {
        self.shared.scripts.lock().unwrap().len()
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// Waits until at least `n` requests were recorded (false on timeout).
    pub fn wait_requests(&self, n: usize, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        while Instant::now() < end {
            if self.shared.requests.lock().unwrap().len() >= n {
                return true;
            }
            thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// The ids listed by `GET /models` (default `["fake-model"]`).
    pub fn set_models(&self, models: &[&str]) {
        *self.shared.models.lock().unwrap() = models.iter().map(|s| s.to_string()).collect();
    }

    /// Answers every POST that finds no queued script (and no answer from
    /// [`FakeProvider::set_responder`]) with `f(protocol, body)`.
    pub fn set_fallback(&self, f: impl Fn(Proto, &Value) -> Script + Send + Sync + 'static) {
        *self.shared.fallback.lock().unwrap() = Some(Arc::new(f));
    }

    /// Refuses, with the protocol's context-overflow error (HTTP 400), every POST whose
    /// body exceeds `tokens` ([`body_tokens`]).
    pub fn set_context_window(&self, tokens: u64) {
        *self.shared.window.lock().unwrap() = Some(tokens);
    }

    /// Turns request validation (prefill, tool pairing) on or off (default on).
    pub fn set_validate(&self, on: bool) {
        self.shared.validate.store(on, Ordering::SeqCst);
    }

    /// Streams with `Connection: close` and no chunked framing (default off).
    pub fn set_close_delimited(&self, on: bool) {
        self.shared.close_delimited.store(on, Ordering::SeqCst);
    }

    /// Holds the answers of the next `n` POST requests until all `n` arrived, then
    /// answers them together (benches: `n` streams that really run at once, whatever
    /// the clients' start-up spread). Buffered answers are then written interleaved by
    /// one thread: up to 16 KiB of each in turn, skipping a connection whose socket is
    /// full, as `n` providers streaming at once would (written whole one after another,
    /// the first answers were read completely before the last ones were sent). A held
    /// request waits at most 60 s; later POSTs pass at once. Only buffered stream
    /// scripts go through the pump (the benches' `many_deltas`); any other held answer
    /// is written by its connection, and the pump then waits up to 5 s for the `n`
    /// answers it expected before it starts.
    pub fn hold_posts(&self, n: usize) {
        let (tx, rx) = mpsc::channel();
        *self.shared.gate.lock().unwrap() = Some(Gate {
            need: n,
            arrived: 0,
            released: None,
            pump: Some(tx),
        });
        let shared = self.shared.clone();
        thread::Builder::new()
            .name("fake-provider-pump".into())
            .spawn(move || pump(&shared, n, rx))
            .expect("spawn the pump thread");
    }

    /// When the answers held by [`FakeProvider::hold_posts`] were released: when the
    /// pump began writing them (all of them handed over), else when the last request
    /// arrived.
    pub fn released_at(&self) -> Option<Instant> {
        self.shared.gate.lock().unwrap().as_ref()?.released
    }

    /// Connections whose handler has finished (the client hung up or the server closed).
    pub fn connections_closed(&self) -> usize {
        *self.shared.connections_closed.lock().unwrap()
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Body writer: chunked framing or raw (close-delimited).
struct BodyWriter<'a> {
    stream: &'a TcpStream,
    chunked: bool,
}

impl Write for BodyWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let mut s = self.stream;
        if self.chunked {
            let mut frame = Vec::with_capacity(buf.len() + 16);
            write!(frame, "{:x}\r\n", buf.len())?;
            frame.extend_from_slice(buf);
            frame.extend_from_slice(b"\r\n");
            s.write_all(&frame)?;
        } else {
            s.write_all(buf)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut s = self.stream;
        s.flush()
    }
}

fn serve_connection(shared: &Shared, stream: TcpStream) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut reader = BufReader::new(stream.try_clone()?);
    loop {
        // Request line.
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end().to_string();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let method = it.next().unwrap_or("").to_string();
        let path = it.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h)? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let header = |n: &str| headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
        let mut body = Vec::new();
        if let Some(len) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(len, 0);
            reader.read_exact(&mut body)?;
        } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)
                    .unwrap_or(0);
                let mut chunk = vec![0; n + 2];
                reader.read_exact(&mut chunk)?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
        }
        let client_close = header("connection").is_some_and(|v| v.eq_ignore_ascii_case("close"));
        let json_body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        shared.requests.lock().unwrap().push(RecordedRequest {
            method: method.clone(),
            path: path.clone(),
            headers: headers.clone(),
            body: json_body.clone(),
        });
        let held = method == "POST" && wait_at_gate(shared);
        let keep = respond(shared, &stream, &method, &path, &json_body, held)?;
        if !keep || client_close {
            let _ = stream.shutdown(Shutdown::Both);
            return Ok(());
        }
    }
}

/// Waits at the [`FakeProvider::hold_posts`] barrier, if one is set and not yet full.
/// Returns whether this request was held (a buffered answer then goes through the
/// pump, [`pumped`]).
fn wait_at_gate(shared: &Shared) -> bool {
    let mut gate = shared.gate.lock().unwrap();
    let Some(g) = gate.as_mut() else {
        return false;
    };
    if g.arrived >= g.need {
        return false;
    }
    g.arrived += 1;
    if g.arrived == g.need {
        g.released = Some(Instant::now());
        shared.gate_cv.notify_all();
        return true;
    }
    let end = Instant::now() + Duration::from_secs(60);
    while gate.as_ref().is_some_and(|g| g.arrived < g.need) && Instant::now() < end {
        gate = shared
            .gate_cv
            .wait_timeout(gate, Duration::from_secs(1))
            .unwrap()
            .0;
    }
    true
}

/// Writes `bytes` through the pump of the gate (see [`FakeProvider::hold_posts`]) and
/// waits until they are written; without a pump, writes them here.
fn pumped(shared: &Shared, stream: &TcpStream, bytes: Arc<Vec<u8>>) -> io::Result<()> {
    let pump = shared
        .gate
        .lock()
        .unwrap()
        .as_ref()
        .and_then(|g| g.pump.clone());
    let (done, result) = mpsc::channel();
    let job = PumpJob {
        stream: stream.try_clone()?,
        bytes: bytes.clone(),
        done,
    };
    if pump.is_some_and(|p| p.send(job).is_ok()) {
        if let Ok(r) = result.recv() {
            stream.set_nonblocking(false)?;
            return r;
        }
    }
    let mut s = stream;
    s.write_all(&bytes)
}

/// The pump: takes the `n` held answers from `jobs` as their connections hand them over,
/// then writes them round-robin, at most [`PACE_BYTES`] of one before going on to the next,
/// with non-blocking writes (a connection whose socket is full is skipped until it has
/// room: one slow reader holds no one else back). Ends when all `n` were written or
/// failed, or after 60 s without progress.
fn pump(shared: &Shared, n: usize, jobs: mpsc::Receiver<PumpJob>) {
    let mut live: Vec<(PumpJob, usize)> = Vec::new();
    let mut taken = 0;
    // All n start together: the answers are taken as their connections hand them over
    // (each connection thread has to wake up first), and only then written (up to 5 s).
    let start_by = Instant::now() + Duration::from_secs(5);
    while taken < n && Instant::now() < start_by {
        let Ok(job) = jobs.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        taken += 1;
        match job.stream.set_nonblocking(true) {
            Ok(()) => live.push((job, 0)),
            Err(e) => {
                let _ = job.done.send(Err(e));
            }
        }
    }
    // The answers are released now: their first bytes go out in this pass.
    if let Some(g) = shared.gate.lock().unwrap().as_mut() {
        g.released = Some(Instant::now());
    }
    let mut idle_since = Instant::now();
    while taken < n || !live.is_empty() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let first = if live.is_empty() {
            // Nothing to write: wait for the next answer.
            jobs.recv_timeout(Duration::from_secs(1)).ok()
        } else {
            None
        };
        for job in first
            .into_iter()
            .chain(std::iter::from_fn(|| jobs.try_recv().ok()))
        {
            taken += 1;
            match job.stream.set_nonblocking(true) {
                Ok(()) => live.push((job, 0)),
                Err(e) => {
                    let _ = job.done.send(Err(e));
                }
            }
        }
        let mut progress = false;
        live.retain_mut(|(job, at)| {
            let end = (*at + PACE_BYTES).min(job.bytes.len());
            let mut s = &job.stream;
            match s.write(&job.bytes[*at..end]) {
                Ok(k) => {
                    *at += k;
                    progress |= k > 0;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    let _ = job.done.send(Err(e));
                    return false;
                }
            }
            if *at < job.bytes.len() {
                return true;
            }
            let _ = job.done.send(Ok(()));
            false
        });
        if progress {
            idle_since = Instant::now();
        } else if idle_since.elapsed() > Duration::from_secs(60) {
            break;
        } else if !live.is_empty() {
            // Every socket is full: the readers have plenty to read meanwhile.
            thread::sleep(Duration::from_micros(200));
        }
    }
    for (job, _) in live {
        let _ = job.done.send(Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "fake provider: the pump gave up",
        )));
    }
    if let Some(g) = shared.gate.lock().unwrap().as_mut() {
        g.pump = None;
    }
}

/// The events a stream script sends, in order, per its ending.
fn events_to_send(r: &Rendered, ending: &Ending) -> Vec<String> {
    match ending {
        Ending::Complete | Ending::Length => r.events.clone(),
        Ending::Truncate | Ending::Stall(_) | Ending::Late(_) => r.events[..r.cut].to_vec(),
        Ending::Error(_) => r.events[..r.cut]
            .iter()
            .chain(r.error.iter())
            .cloned()
            .collect(),
    }
}

/// The head of a 200 event stream (chunked, or close-delimited).
fn stream_head(chunked: bool) -> String {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n",
    );
    head.push_str(if chunked {
        "transfer-encoding: chunked\r\n"
    } else {
        "connection: close\r\n"
    });
    head.push_str("\r\n");
    head
}

/// A buffered stream script (`buffered: true`) as its complete wire bytes: the head,
/// the SSE events framed in chunks of at most 64 KiB (chunk boundaries fall anywhere,
/// as on a real network), and the chunked terminator when the stream ends normally.
/// Rendered once and reused for the same (protocol, model, framing, script), so the
/// server sends a stream with a few large writes and no per-event work.
fn buffered_wire(
    shared: &Shared,
    proto: Proto,
    model: &str,
    chunked: bool,
    script: Script,
) -> Arc<Vec<u8>> {
    let mut cache = shared.wire_cache.lock().unwrap();
    if let Some(c) = cache.as_ref() {
        if c.proto == proto && c.model == model && c.chunked == chunked && c.script == script {
            return c.bytes.clone();
        }
    }
    let Script::Stream {
        parts,
        usage,
        ending,
        whole_tool_calls,
        server,
        ..
    } = &script
    else {
        unreachable!("buffered_wire takes stream scripts");
    };
    let err = match ending {
        Ending::Error(k) => Some(*k),
        _ => None,
    };
    let opts = RenderOpts {
        whole_calls: *whole_tool_calls,
        err,
        length: *ending == Ending::Length,
        server: *server,
    };
    let r = render(proto, model, parts, *usage, opts);
    let sse: Vec<u8> = events_to_send(&r, ending).concat().into_bytes();
    let mut bytes = stream_head(chunked).into_bytes();
    if chunked {
        for piece in sse.chunks(64 * 1024) {
            bytes.extend_from_slice(format!("{:x}\r\n", piece.len()).as_bytes());
            bytes.extend_from_slice(piece);
            bytes.extend_from_slice(b"\r\n");
        }
        if matches!(ending, Ending::Complete | Ending::Error(_) | Ending::Length) {
            bytes.extend_from_slice(b"0\r\n\r\n");
        }
    } else {
        bytes.extend_from_slice(&sse);
    }
    let bytes = Arc::new(bytes);
    *cache = Some(WireCache {
        proto,
        model: model.to_string(),
        chunked,
        script,
        bytes: bytes.clone(),
    });
    bytes
}

fn write_fixed(
    stream: &TcpStream,
    status: u16,
    headers: &[(String, String)],
    body: &str,
) -> io::Result<()> {
    let mut s = stream;
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    let has_ct = headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
    if !has_ct {
        head.push_str("content-type: application/json\r\n");
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes())?;
    s.write_all(body.as_bytes())?;
    s.flush()
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        529 => "Overloaded",
        _ => "Status",
    }
}

/// Answers one request; returns whether the connection may be kept alive.
fn respond(
    shared: &Shared,
    stream: &TcpStream,
    method: &str,
    path: &str,
    body: &Value,
    paced: bool,
) -> io::Result<bool> {
    let route = path.split('?').next().unwrap_or(path);
    if method == "GET" && (route == "/v1/models" || route == "/models") {
        let models = shared.models.lock().unwrap().clone();
        let data: Vec<Value> = models
            .iter()
            .map(|m| json!({"id": m, "object": "model", "type": "model", "display_name": m, "owned_by": "fake"}))
            .collect();
        write_fixed(
            stream,
            200,
            &[],
            &json!({"object": "list", "data": data}).to_string(),
        )?;
        return Ok(true);
    }
    let Some(proto) = (method == "POST").then(|| Proto::of_path(route)).flatten() else {
        write_fixed(stream, 404, &[], &json!({"error": {"message": format!("fake provider: no route {method} {path}"), "type": "not_found"}}).to_string())?;
        return Ok(true);
    };
    if shared.validate.load(Ordering::SeqCst) {
        if let Err(msg) = validate(proto, body) {
            let b = error_body(
                proto,
                "invalid_request_error",
                "invalid_request_error",
                Value::Null,
                &msg,
            );
            write_fixed(stream, 400, &[], &b)?;
            return Ok(true);
        }
    }
    let window = *shared.window.lock().unwrap();
    if let Some(window) = window {
        let tokens = body_tokens(body);
        if tokens > window {
            write_fixed(stream, 400, &[], &overflow_body(proto, tokens, window))?;
            return Ok(true);
        }
    }
    let responder = shared.responder.lock().unwrap().clone();
    let mut script = responder
        .and_then(|f| f(body))
        .or_else(|| shared.scripts.lock().unwrap().pop_front());
    if script.is_none() {
        let fallback = shared.fallback.lock().unwrap().clone();
        script = fallback.map(|f| f(proto, body));
    }
    let Some(script) = script else {
        let b = error_body(
            proto,
            "api_error",
            "server_error",
            json!("server_error"),
            "fake provider: no script left",
        );
        write_fixed(stream, 500, &[], &b)?;
        return Ok(true);
    };
    let model = body["model"].as_str().unwrap_or("fake-model").to_string();
    if let Script::Stream {
        buffered: true,
        json_body: false,
        ending,
        ..
    } = &script
    {
        let ending = ending.clone();
        let chunked = !shared.close_delimited.load(Ordering::SeqCst);
        let bytes = buffered_wire(shared, proto, &model, chunked, script);
        let mut s = stream;
        if paced {
            pumped(shared, stream, bytes)?;
        } else {
            s.write_all(&bytes)?;
        }
        s.flush()?;
        return match ending {
            Ending::Complete | Ending::Error(_) | Ending::Length => Ok(chunked),
            Ending::Truncate => Ok(false),
            Ending::Stall(d) => {
                let end = Instant::now() + d;
                while Instant::now() < end && !shared.stop.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(10));
                }
                Ok(false)
            }
            Ending::Late(_) => panic!("Ending::Late is not for buffered scripts"),
        };
    }
    match script {
        Script::Status { error, retry_after } => {
            let mut h = Vec::new();
            if let Some(ra) = retry_after {
                h.push(("retry-after".to_string(), ra));
            }
            write_fixed(stream, error.status(), &h, &error.body(proto))?;
            Ok(true)
        }
        Script::Raw {
            status,
            headers,
            body,
        } => {
            let mut h = headers.clone();
            if !h
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                h.push((
                    "content-type".into(),
                    if status == 200 {
                        "text/event-stream"
                    } else {
                        "application/json"
                    }
                    .into(),
                ));
            }
            write_fixed(stream, status, &h, &body)?;
            Ok(true)
        }
        Script::Stream {
            parts,
            usage,
            ending,
            split_utf8,
            whole_tool_calls,
            buffered: _,
            server,
            json_body,
        } => {
            if json_body {
                let b = render_json_body(proto, &model, &parts, usage);
                write_fixed(stream, 200, &[], &b.to_string())?;
                return Ok(true);
            }
            let err = match &ending {
                Ending::Error(k) => Some(*k),
                _ => None,
            };
            let opts = RenderOpts {
                whole_calls: whole_tool_calls,
                err,
                length: ending == Ending::Length,
                server,
            };
            let r = render(proto, &model, &parts, usage, opts);
            let to_send = events_to_send(&r, &ending);
            let chunked = !shared.close_delimited.load(Ordering::SeqCst);
            let mut s = stream;
            s.write_all(stream_head(chunked).as_bytes())?;
            s.flush()?;
            let mut w = BodyWriter { stream, chunked };
            // (Buffered scripts were answered above, from `buffered_wire`.)
            for e in &to_send {
                let bytes = e.as_bytes();
                let split = split_utf8
                    .then(|| bytes.iter().position(|&b| b >= 0xC0))
                    .flatten();
                match split {
                    Some(i) => {
                        w.write_all(&bytes[..=i])?;
                        w.flush()?;
                        thread::sleep(Duration::from_millis(5));
                        w.write_all(&bytes[i + 1..])?;
                    }
                    None => w.write_all(bytes)?,
                }
                w.flush()?;
            }
            match ending {
                Ending::Complete | Ending::Error(_) | Ending::Length => {
                    if chunked {
                        s.write_all(b"0\r\n\r\n")?;
                        s.flush()?;
                        Ok(true)
                    } else {
                        Ok(false)
                    }
                }
                Ending::Truncate => Ok(false),
                Ending::Stall(d) => {
                    let end = Instant::now() + d;
                    while Instant::now() < end && !shared.stop.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(10));
                    }
                    Ok(false)
                }
                Ending::Late(d) => {
                    let end = Instant::now() + d;
                    while Instant::now() < end && !shared.stop.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(10));
                    }
                    for e in &r.events[r.cut..] {
                        w.write_all(e.as_bytes())?;
                        w.flush()?;
                    }
                    if chunked {
                        s.write_all(b"0\r\n\r\n")?;
                        s.flush()?;
                    }
                    Ok(chunked)
                }
            }
        }
    }
}
