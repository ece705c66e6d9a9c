//! OpenAI Chat Completions and compatible servers (`POST {base}/chat/completions`,
//! providers.md §2, quirks §5, lowering §6.4).
//!
//! Request: `stream:true`, `stream_options:{include_usage:true}`, `messages` (system
//! first; adjacent content-only user/assistant messages merged; assistant `tool_calls`;
//! `tool` messages with `tool_call_id`), function tools nested under `function`,
//! `tool_choice:"auto"` when tools exist, `max_tokens`, `temperature` when set,
//! `reasoning_effort` (OpenRouter:
//! `reasoning:{effort}`), `response_format` json_schema when an output schema is set.
//! Assistant messages carry `reasoning_content` when they had reasoning from this provider
//! and model, and always (possibly `""`) for DeepSeek models (model id contains
//! `deepseek`), which reject later requests without it.
//!
//! Stream: `data:` chunks only. Text from `delta.content`; reasoning from
//! `delta.reasoning_content` or `delta.reasoning`; tool calls merged by `index` (a new
//! `id` under the same index starts a new call; missing ids are synthesized as
//! `call_<hex>`; a first fragment that already carries id, name and complete JSON arguments
//! — Ollama — is start + end at once; other calls end at the `finish_reason` chunk, at
//! `[DONE]`, or at a clean EOF after a finish reason). Usage from whichever chunk carries
//! it (DeepSeek `prompt_cache_hit_tokens` accepted). A chunk with `error` (or vLLM
//! `object:"error"`) or `finish_reason:"error"` is a stream error. EOF after a non-null
//! finish reason without `[DONE]` = complete; EOF otherwise = incomplete (retryable).
//! SSE comments (OpenRouter, DeepSeek keep-alives) are skipped by the SSE reader.

use std::collections::HashMap;

use serde_json::{json, Value};

mod chunk;
use chunk::{Chunk, Fragment};

use super::chat::{
    ChatMessage, ChatRequest, ReasoningBlock, Role, StreamEvent, ToolCall, ToolSpec, Usage,
};
use super::request::{normalize_schema, output_schema_parts, same_origin};
use super::retry::{classify_stream_error, error_fields, AttemptError};
use super::sse::SseEvent;
use super::wire::{finished_arguments, parse_data, synth_call_id, Out, WireParser};

/// Whether a `data:` payload is the `[DONE]` sentinel (surrounding whitespace allowed);
/// a JSON chunk is told apart by its first byte.
fn is_done(data: &str) -> bool {
    let t = data.trim_start();
    t.starts_with("[DONE]") && t.trim_end() == "[DONE]"
}

fn is_deepseek(model: &str) -> bool {
    model.to_ascii_lowercase().contains("deepseek")
}

/// The `tools` array of a request offering `tools` (function tools nested under
/// `function`).
pub fn tools_json(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name,
                "description": t.description,
                "parameters": normalize_schema(&t.parameters),
            }})
        })
        .collect()
}

/// The request body for `req` without its `tools` array ([`WireProtocol::build_body`]
/// adds [`tools_json`]).
///
/// [`WireProtocol::build_body`]: crate::provider::wire::WireProtocol::build_body
pub fn base_body(provider_id: &str, base_url: &str, req: &ChatRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    if !req.system.is_empty() {
        messages.push(json!({"role": "system", "content": req.system}));
    }
    // Index into `messages` of the last content-only message (for merging), by role.
    let mut last_plain: Option<(Role, usize)> = None;
    for m in &req.messages {
        let plain = m.tool_calls.is_empty()
            && m.reasoning.is_empty()
            && m.images.is_empty()
            && m.role != Role::Tool;
        if plain {
            if let Some((role, i)) = last_plain {
                if role == m.role && i + 1 == messages.len() {
                    if let Some(Value::String(c)) = messages[i].get_mut("content") {
                        if !c.is_empty() && !m.content.is_empty() {
                            c.push_str("\n\n");
                        }
                        c.push_str(&m.content);
                        continue;
                    }
                }
            }
        }
        messages.push(lower_message(provider_id, req, m));
        last_plain = plain.then(|| (m.role, messages.len() - 1));
    }
    let mut body = json!({
        "model": req.model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let o = body.as_object_mut().expect("object");
    if !req.tools.is_empty() {
        o.insert("tool_choice".into(), json!("auto"));
    }
    if let Some(n) = req.max_output_tokens {
        o.insert("max_tokens".into(), json!(n));
    }
    if let Some(t) = req.temperature {
        o.insert("temperature".into(), json!(t));
    }
    if let Some(effort) = &req.effort {
        if base_url.contains("openrouter.ai") {
            o.insert("reasoning".into(), json!({"effort": effort}));
        } else {
            o.insert("reasoning_effort".into(), json!(effort));
        }
    }
    if let Some(schema) = &req.output_schema {
        let (name, schema, strict) = output_schema_parts(schema);
        o.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}),
        );
    }
    body
}

fn lower_message(provider_id: &str, req: &ChatRequest, m: &ChatMessage) -> Value {
    match m.role {
        Role::User => {
            if m.images.is_empty() {
                return json!({"role": "user", "content": m.content});
            }
            let mut parts = Vec::new();
            if !m.content.is_empty() {
                parts.push(json!({"type": "text", "text": m.content}));
            }
            for img in &m.images {
                parts.push(json!({"type": "image_url", "image_url": {
                    "url": format!("data:{};base64,{}", img.media_type, img.data)
                }}));
            }
            json!({"role": "user", "content": parts})
        }
        Role::Assistant => {
            let mut v = json!({"role": "assistant"});
            v["content"] = if m.content.is_empty() && !m.tool_calls.is_empty() {
                Value::Null
            } else {
                json!(m.content)
            };
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| {
                        json!({"id": c.id, "type": "function", "function": {
                            "name": c.name,
                            "arguments": if c.arguments.is_empty() { "{}" } else { &c.arguments },
                        }})
                    })
                    .collect();
            }
            let rc: Vec<&str> = m
                .reasoning
                .iter()
                .filter(|r| same_origin(&r.provider, &r.model, provider_id, &req.model))
                .map(|r| r.text.as_str())
                .filter(|t| !t.is_empty())
                .collect();
            if !rc.is_empty() {
                v["reasoning_content"] = json!(rc.join("\n\n"));
            } else if is_deepseek(&req.model) {
                v["reasoning_content"] = json!("");
            }
            v
        }
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
    }
}

/// Usage of a chunk's `usage` object: fresh input = `prompt_tokens − cached`, cached from
/// `prompt_tokens_details.cached_tokens` or DeepSeek's `prompt_cache_hit_tokens`.
pub fn parse_usage(u: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let prompt = n(u.get("prompt_tokens"));
    let cached = u
        .pointer("/prompt_tokens_details/cached_tokens")
        .and_then(Value::as_u64)
        .or_else(|| u.get("prompt_cache_hit_tokens").and_then(Value::as_u64))
        .unwrap_or(0);
    Usage {
        input_tokens: prompt.saturating_sub(cached),
        output_tokens: n(u.get("completion_tokens")),
        cache_read_tokens: cached,
        cache_creation_tokens: 0,
        reasoning_tokens: n(u.pointer("/completion_tokens_details/reasoning_tokens")),
    }
}

#[derive(Debug)]
struct Call {
    id: String,
    id_given: bool,
    name: String,
    args: String,
    started: bool,
    ended: bool,
}

/// Stream parser for one Chat Completions attempt.
pub struct Parser {
    provider: String,
    model: String,
    calls: Vec<Call>,
    open: HashMap<u64, usize>,
    reasoning: String,
    reasoning_done: bool,
    finish_reason: Option<String>,
    usage: Option<Usage>,
    response_id: Option<String>,
    /// Whether any chunk carried a choice (an answer of some kind).
    saw_choice: bool,
    /// A started call was withdrawn ([`StreamEvent::ToolCallCutOff`]).
    cut_off: bool,
    /// The readings a chunk goes through, fastest first ([`Readings::All`] but in
    /// tests, which compare them with the `Value` path).
    readings: Readings,
    /// Unescaped strings of the scanned chunk, kept from chunk to chunk.
    scratch: String,
    /// The shape of the last text chunk scanned.
    template: chunk::Template,
}

/// Which readings of a chunk [`Parser`] tries before the `Value` path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
enum Readings {
    /// The scan ([`chunk::scan`]), then the typed path ([`chunk::parse_typed`]).
    All,
    /// The typed path only.
    Typed,
    /// The `Value` path only.
    Value,
}

impl Parser {
    /// A parser attributing reasoning blocks to `provider`/`model`.
    pub fn new(provider: &str, model: &str) -> Self {
        Parser {
            provider: provider.into(),
            model: model.into(),
            calls: Vec::new(),
            open: HashMap::new(),
            reasoning: String::new(),
            reasoning_done: false,
            finish_reason: None,
            usage: None,
            response_id: None,
            saw_choice: false,
            cut_off: false,
            readings: Readings::All,
            scratch: String::new(),
            template: chunk::Template::default(),
        }
    }

    fn flush_reasoning(&mut self, out: &mut Out) {
        if self.reasoning_done || self.reasoning.is_empty() {
            return;
        }
        self.reasoning_done = true;
        out.push(StreamEvent::ReasoningDone {
            block: ReasoningBlock {
                provider: self.provider.clone(),
                model: self.model.clone(),
                text: self.reasoning.clone(),
                signature: None,
                redacted: None,
                raw: None,
            },
        });
    }

    /// Ends `call`: a [`StreamEvent::ToolCallEnd`] when its arguments are complete JSON,
    /// else a [`StreamEvent::ToolCallCutOff`] (returns false then).
    fn end_call(call: &mut Call, truncated: bool, out: &mut Out) -> bool {
        if call.ended {
            return true;
        }
        let arguments = match finished_arguments(&call.args, truncated) {
            Ok(a) => a,
            Err(reason) => {
                call.ended = true;
                log::warn!("tool call {} ({}) not run: {reason}", call.id, call.name);
                if call.started {
                    out.push(StreamEvent::ToolCallCutOff {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        reason,
                    });
                }
                return false;
            }
        };
        if !call.started {
            call.started = true;
            out.push(StreamEvent::ToolCallStart {
                id: call.id.clone(),
                name: call.name.clone(),
            });
            if !call.args.is_empty() {
                out.push(StreamEvent::ToolCallDelta {
                    id: call.id.clone(),
                    delta: call.args.clone(),
                });
            }
        }
        call.ended = true;
        out.push(StreamEvent::ToolCallEnd {
            call: ToolCall {
                id: call.id.clone(),
                name: call.name.clone(),
                arguments,
                item_id: None,
            },
        });
        true
    }

    fn end_all(&mut self, out: &mut Out) {
        self.flush_reasoning(out);
        let truncated = self.finish_reason.as_deref() == Some("length");
        for c in &mut self.calls {
            if !Self::end_call(c, truncated, out) {
                self.cut_off = true;
            }
        }
        self.open.clear();
    }

    fn tool_fragment(&mut self, pos_in_array: usize, tc: Fragment, out: &mut Out) {
        let index = tc.index.unwrap_or(pos_in_array as u64);
        let id = tc.id.as_deref().filter(|s| !s.is_empty());
        let name = tc.name.as_deref().filter(|s| !s.is_empty());
        let args: &str = &tc.arguments;
        let mut current = self.open.get(&index).copied();
        if let (Some(pos), Some(id)) = (current, id) {
            let c = &self.calls[pos];
            if c.id_given && c.id != id {
                current = None; // same index, new id: the next call (§5)
            }
        }
        let created = current.is_none();
        let pos = match current {
            Some(p) => p,
            None => {
                self.calls.push(Call {
                    id: id.map(str::to_string).unwrap_or_else(synth_call_id),
                    id_given: id.is_some(),
                    name: String::new(),
                    args: String::new(),
                    started: false,
                    ended: false,
                });
                let p = self.calls.len() - 1;
                self.open.insert(index, p);
                p
            }
        };
        let call = &mut self.calls[pos];
        if call.ended {
            if !args.is_empty() {
                log::warn!(
                    "ignoring argument text for already completed call {}",
                    call.id
                );
            }
            return;
        }
        if let Some(n) = name {
            if call.name.is_empty() {
                call.name = n.to_string();
            }
        }
        if !call.started && !call.name.is_empty() {
            call.started = true;
            out.push(StreamEvent::ToolCallStart {
                id: call.id.clone(),
                name: call.name.clone(),
            });
            if !call.args.is_empty() {
                out.push(StreamEvent::ToolCallDelta {
                    id: call.id.clone(),
                    delta: call.args.clone(),
                });
            }
        }
        if !args.is_empty() {
            call.args.push_str(args);
            if call.started {
                out.push(StreamEvent::ToolCallDelta {
                    id: call.id.clone(),
                    delta: args.to_string(),
                });
            }
        }
        // One delta carrying the whole call (Ollama): start + end at once.
        if created
            && call.started
            && !args.is_empty()
            && serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object())
        {
            Self::end_call(call, false, out);
            self.open.remove(&index);
        }
    }

    /// Applies one chunk. `v` is the chunk's `Value` when it was parsed as one; the
    /// typed path ([`chunk::parse_typed`]) never yields a `finish_reason:"error"` chunk,
    /// whose error fields are read from `v`.
    fn apply(
        &mut self,
        c: Chunk,
        v: Option<&Value>,
        out: &mut Out,
    ) -> Option<Result<StreamEvent, AttemptError>> {
        if self.response_id.is_none() {
            if let Some(id) = c.id {
                self.response_id = Some(id.into_owned());
            }
        }
        if let Some(u) = c.usage {
            self.usage = Some(u);
        }
        let choice = c.choice?;
        self.saw_choice = true;
        if let Some(delta) = choice.delta {
            let reasoning = delta.reasoning.unwrap_or_default();
            if !reasoning.is_empty() {
                self.reasoning.push_str(&reasoning);
                out.text(true, &reasoning);
            }
            if let Some(text) = delta.content {
                if !text.is_empty() {
                    self.flush_reasoning(out);
                    out.text(false, &text);
                }
            }
            if !delta.tool_calls.is_empty() {
                self.flush_reasoning(out);
            }
            for (i, tc) in delta.tool_calls.into_iter().enumerate() {
                self.tool_fragment(i, tc, out);
            }
        }
        if let Some(fr) = choice.finish_reason {
            if fr == "error" {
                let (code, ty, msg) = error_fields(v.unwrap_or(&Value::Null));
                return Some(Err(classify_stream_error(
                    code.as_deref(),
                    ty.as_deref(),
                    msg.as_deref().unwrap_or("stream finished with an error"),
                )));
            }
            self.finish_reason = Some(fr.into_owned());
            self.end_all(out);
        }
        None
    }

    fn done(&mut self, out: &mut Out) -> StreamEvent {
        self.end_all(out);
        let reason = self.finish_reason.clone();
        StreamEvent::Done {
            usage: self.usage.unwrap_or_default(),
            truncated: reason.as_deref() == Some("length") || self.cut_off,
            stop_reason: reason,
            response_id: self.response_id.clone(),
            message_item_id: None,
        }
    }
}

impl WireParser for Parser {
    fn on_event(
        &mut self,
        ev: &SseEvent,
        out: &mut Out,
    ) -> Option<Result<StreamEvent, AttemptError>> {
        if is_done(&ev.data) {
            // `[DONE]` without a finish reason after nothing at all, or while a tool
            // call is still open, is a broken stream: its calls must never run.
            if self.finish_reason.is_none() && (!self.saw_choice || !self.open.is_empty()) {
                return Some(Err(AttemptError::incomplete(
                    "stream ended with [DONE] before a finish reason",
                )));
            }
            return Some(Ok(self.done(out)));
        }
        if self.readings == Readings::All {
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            let scanned = chunk::scan(&ev.data, &mut scratch, &mut self.template)
                .map(|c| self.apply(c, None, out));
            self.scratch = scratch;
            if let Some(step) = scanned {
                return step;
            }
        }
        if self.readings != Readings::Value {
            if let Some(chunk) = chunk::parse_typed(&ev.data) {
                return self.apply(chunk, None, out);
            }
        }
        let v = parse_data(ev)?;
        let is_error_obj = v.get("error").is_some_and(|e| !e.is_null())
            || v.get("object").and_then(Value::as_str) == Some("error");
        if is_error_obj {
            let (code, ty, msg) = error_fields(&v);
            return Some(Err(classify_stream_error(
                code.as_deref(),
                ty.as_deref(),
                msg.as_deref().unwrap_or("stream error"),
            )));
        }
        self.apply(Chunk::from_value(&v), Some(&v), out)
    }

    /// A `chat.completion` object: its `choices[0].message` read as one delta chunk
    /// (content, reasoning, tool calls, finish reason, usage), then `[DONE]`.
    fn json_body_events(&self, v: &Value) -> Option<Vec<String>> {
        let first = v.get("choices")?.as_array()?.first()?;
        first.get("message")?;
        Some(vec![v.to_string(), "[DONE]".into()])
    }

    fn on_eof(&mut self, out: &mut Out) -> Result<StreamEvent, AttemptError> {
        if self.finish_reason.is_some() {
            Ok(self.done(out))
        } else {
            Err(AttemptError::incomplete("stream closed before [DONE]"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::chat::FailureKind;
    use crate::provider::wire::WireProtocol;

    fn run(body: &str) -> (Vec<StreamEvent>, Result<StreamEvent, AttemptError>) {
        crate::provider::wire::parse_body(&mut Parser::new("p", "m"), body)
    }

    fn chunk(delta: Value, finish: Option<&str>) -> String {
        format!(
            "data: {}\n\n",
            json!({"id":"c","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
        )
    }

    fn ends(out: &[StreamEvent]) -> Vec<ToolCall> {
        out.iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallEnd { call } => Some(call.clone()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn ollama_whole_call_in_one_delta_ends_at_once() {
        let body = chunk(
            json!({"tool_calls":[{"index":0,"id":"call_a","function":{"name":"x","arguments":"{\"a\":1}"}}]}),
            None,
        );
        let (out, end) = run(&body);
        assert!(end.is_err(), "no finish: incomplete");
        assert_eq!(ends(&out).len(), 1);
        assert!(matches!(&out[0], StreamEvent::ToolCallStart { id, .. } if id == "call_a"));
    }

    #[test]
    fn same_index_new_id_splits_and_missing_ids_are_synthesized() {
        let body = [
            chunk(json!({"tool_calls":[{"index":0,"id":"call_a","function":{"name":"x","arguments":""}}]}), None),
            chunk(json!({"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}), None),
            chunk(json!({"tool_calls":[{"index":0,"id":"call_b","function":{"name":"y","arguments":""}}]}), None),
            chunk(json!({"tool_calls":[{"index":1,"function":{"name":"z","arguments":""}}]}), None),
            chunk(json!({}), Some("tool_calls")),
        ]
        .concat();
        let (out, end) = run(&body);
        assert!(
            matches!(end, Ok(StreamEvent::Done { .. })),
            "EOF after finish = complete"
        );
        let calls = ends(&out);
        assert_eq!(calls.len(), 3);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].arguments.as_str()),
            ("call_a", "{}")
        );
        assert_eq!(
            (calls[1].id.as_str(), calls[1].name.as_str()),
            ("call_b", "y")
        );
        assert!(calls[2].id.starts_with("call_") && calls[2].id.len() > 6);
    }

    #[test]
    fn reasoning_fields_and_usage_and_errors() {
        let body = [
            chunk(json!({"reasoning":"th"}), None),
            chunk(json!({"reasoning_content":"ink"}), None),
            chunk(json!({"content":"ok"}), Some("stop")),
            format!("data: {}\n\n", json!({"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":5,"prompt_cache_hit_tokens":60}})),
            "data: [DONE]\n\n".to_string(),
        ]
        .concat();
        let (out, end) = run(&body);
        assert!(matches!(&out[2], StreamEvent::ReasoningDone { block } if block.text == "think"));
        match end.unwrap() {
            StreamEvent::Done {
                usage, stop_reason, ..
            } => {
                assert_eq!(
                    (
                        usage.input_tokens,
                        usage.cache_read_tokens,
                        usage.output_tokens
                    ),
                    (40, 60, 5)
                );
                assert_eq!(stop_reason.as_deref(), Some("stop"));
            }
            e => panic!("{e:?}"),
        }
        let (_, end) = run("data: {\"error\":{\"message\":\"Overloaded\",\"code\":529}}\n\n");
        assert_eq!(end.unwrap_err().kind, FailureKind::Overloaded);
        let (_, end) = run("data: {\"object\":\"error\",\"message\":\"boom\",\"code\":500}\n\n");
        assert_eq!(end.unwrap_err().kind, FailureKind::Server);
        let (_, end) = run(&format!(
            "data: {}\n\n",
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"error"}],"error":{"code":502,"message":"upstream"}})
        ));
        assert_eq!(end.unwrap_err().message, "upstream");
    }

    #[test]
    fn request_lowering() {
        let mut a1 = ChatMessage::text(Role::Assistant, "");
        a1.tool_calls.push(ToolCall {
            id: "call_1".into(),
            name: "t".into(),
            arguments: "{}".into(),
            item_id: None,
        });
        let mut t1 = ChatMessage::text(Role::Tool, "out");
        t1.tool_call_id = Some("call_1".into());
        let req = ChatRequest {
            model: "deepseek-chat".into(),
            system: "sys".into(),
            messages: vec![
                ChatMessage::text(Role::User, "a"),
                ChatMessage::text(Role::User, "b"),
                a1,
                t1,
            ],
            tools: Default::default(),
            effort: Some("high".into()),
            max_output_tokens: None,
            prompt_cache_key: None,
            output_schema: Some(json!({"type":"object"})),
            temperature: Some(0.3),
        };
        let b = WireProtocol::OpenAiChat.build_body("p", "https://api.deepseek.com", &req);
        assert_eq!(b["stream_options"]["include_usage"], true);
        assert_eq!(b["reasoning_effort"], "high");
        assert_eq!(b["temperature"], 0.3);
        assert_eq!(b["response_format"]["json_schema"]["name"], "output");
        let m = b["messages"].as_array().unwrap();
        let roles: Vec<&str> = m.iter().map(|x| x["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!(m[1]["content"], "a\n\nb");
        assert!(m[2]["content"].is_null());
        assert_eq!(
            m[2]["reasoning_content"], "",
            "DeepSeek always gets reasoning_content"
        );
        assert_eq!(m[3]["tool_call_id"], "call_1");
        let b = WireProtocol::OpenAiChat.build_body(
            "p",
            "https://openrouter.ai/api/v1",
            &ChatRequest {
                model: "x".into(),
                ..req
            },
        );
        assert_eq!(b["reasoning"]["effort"], "high");
        assert!(b["messages"][2].get("reasoning_content").is_none());
    }

    #[test]
    fn done_without_finish_reason_is_incomplete_when_empty_or_mid_tool_call() {
        let (_, t) = run("data: [DONE]\n\n");
        assert!(t.is_err(), "an empty stream is not an answer");
        let body = chunk(
            json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"command\": \"py"}}]}),
            None,
        ) + "data: [DONE]\n\n";
        let (out, t) = run(&body);
        assert!(t.is_err(), "a half tool call must not complete");
        assert!(!out
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCallEnd { .. })));
        let body = chunk(json!({"content":"hi"}), None) + "data: [DONE]\n\n";
        let (_, t) = run(&body);
        assert!(
            t.is_ok(),
            "text then [DONE] without a finish reason is tolerated"
        );
    }
}
