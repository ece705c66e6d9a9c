//! Anthropic Messages (`POST {base}/v1/messages`, providers.md §3, lowering §6.3).
//!
//! Request: `model`, `max_tokens` (request's limit, default [`DEFAULT_MAX_TOKENS`], or
//! [`DEFAULT_MAX_TOKENS_THINKING`] with an effort), `stream:true`, `system` (the system
//! prompt), `tools` (`{name, description, input_schema}`), and with an effort
//! `thinking:{"type":"adaptive"}` + `output_config:{"effort"}`, `temperature` when set
//! and no effort is (Messages refuses a temperature with thinking). Output schemas are not
//! sent (Messages has no equivalent in this layer).
//!
//! History lowering (§3.2, §3.3, §6.3):
//! - `user` → text block (empty text becomes `" "`) plus image blocks;
//! - `assistant` → replayed `thinking` (with signature) / `redacted_thinking` blocks first —
//!   only those from the same provider and model, unchanged — then text (if any), then
//!   `tool_use` blocks (`input` parsed from the arguments, `{}` when unparsable); an
//!   assistant message with no blocks is dropped;
//! - `tool` → a user message with one `tool_result` block;
//! - consecutive same-role messages are merged, `tool_result` blocks first in a user
//!   message;
//! - a history that ends with an assistant message gets a user guide message
//!   ([`CONTINUE_GUIDE`]) appended in the request only (Claude 4.6+ reject prefill); a
//!   history that starts with an assistant message gets a `" "` user message before it.
//!
//! Stream (§3.4): keyed off the JSON `type` (the `event:` line is not required):
//! `message_start` (id, input/cache usage), `content_block_start/delta/stop` for text,
//! tool_use (`input_json_delta`; the call ends at `content_block_stop` — one without any
//! input at `message_stop`, withdrawn when the stop reason is `max_tokens` — and is
//! withdrawn, [`StreamEvent::ToolCallCutOff`], when its input is not complete JSON),
//! thinking
//! (`thinking_delta` + `signature_delta`, ends as a `ReasoningDone` carrying the
//! signature) and redacted_thinking; `message_delta` (stop reason, cumulative output
//! usage, repeated input/cache fields); `message_stop` terminal; `error` terminal and
//! classified; `ping` ignored. EOF before `message_stop` = incomplete stream. Usage §3.5.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::chat::{ChatRequest, ReasoningBlock, Role, StreamEvent, ToolCall, ToolSpec, Usage};
use super::request::{normalize_schema, same_origin};
use super::retry::{classify_stream_error, error_fields, AttemptError};
use super::sse::SseEvent;
use super::wire::{finished_arguments, parse_data, Out, WireParser};

mod block_delta;
use block_delta::{scan_block_delta, BlockDelta};

/// `max_tokens` when the request sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;
/// `max_tokens` when the request sets none and thinking is on.
pub const DEFAULT_MAX_TOKENS_THINKING: u32 = 32000;
/// The user message appended (in the request only) after a trailing assistant message.
pub const CONTINUE_GUIDE: &str = "Continue from where you left off.";

/// The `tools` array of a request offering `tools` (`input_schema`).
pub fn tools_json(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| json!({"name": t.name, "description": t.description, "input_schema": normalize_schema(&t.parameters)}))
        .collect()
}

/// The request body for `req` without its `tools` array ([`WireProtocol::build_body`]
/// adds [`tools_json`]).
///
/// [`WireProtocol::build_body`]: crate::provider::wire::WireProtocol::build_body
pub fn base_body(provider_id: &str, req: &ChatRequest) -> Value {
    let mut msgs: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in &req.messages {
        let (role, blocks) = match m.role {
            Role::User => {
                let mut blocks = Vec::new();
                for img in &m.images {
                    blocks.push(json!({"type": "image", "source": {
                        "type": "base64", "media_type": img.media_type, "data": img.data,
                    }}));
                }
                if !m.content.is_empty() || blocks.is_empty() {
                    let text = if m.content.trim().is_empty() {
                        " "
                    } else {
                        &m.content
                    };
                    blocks.push(json!({"type": "text", "text": text}));
                }
                ("user", blocks)
            }
            Role::Assistant => {
                let mut blocks = Vec::new();
                for r in &m.reasoning {
                    if !same_origin(&r.provider, &r.model, provider_id, &req.model) {
                        continue;
                    }
                    if let Some(data) = &r.redacted {
                        blocks.push(json!({"type": "redacted_thinking", "data": data}));
                    } else if let Some(sig) = r.signature.as_deref().filter(|s| !s.is_empty()) {
                        blocks.push(
                            json!({"type": "thinking", "thinking": r.text, "signature": sig}),
                        );
                    }
                }
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    let input = serde_json::from_str::<Value>(&c.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
            Role::Tool => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": m.tool_call_id.clone().unwrap_or_default(),
                    "content": m.content,
                });
                if m.is_error {
                    block["is_error"] = json!(true);
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match msgs.last_mut() {
            Some((r, prev)) if *r == role => prev.extend(blocks),
            _ => msgs.push((role, blocks)),
        }
    }
    if msgs.first().is_none_or(|(r, _)| *r == "assistant") {
        msgs.insert(0, ("user", vec![json!({"type": "text", "text": " "})]));
    }
    if msgs.last().is_some_and(|(r, _)| *r == "assistant") {
        msgs.push((
            "user",
            vec![json!({"type": "text", "text": CONTINUE_GUIDE})],
        ));
    }
    let messages: Vec<Value> = msgs
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // tool_result blocks first (§3.3); stable otherwise.
                blocks
                    .sort_by_key(|b| b.get("type").and_then(Value::as_str) != Some("tool_result"));
            }
            json!({"role": role, "content": blocks})
        })
        .collect();
    let thinking = req.effort.is_some();
    let mut body = json!({
        "model": req.model,
        "max_tokens": req.max_output_tokens.unwrap_or(if thinking { DEFAULT_MAX_TOKENS_THINKING } else { DEFAULT_MAX_TOKENS }),
        "messages": messages,
        "stream": true,
    });
    let o = body.as_object_mut().expect("object");
    if !req.system.is_empty() {
        o.insert("system".into(), json!(req.system));
    }
    if let Some(effort) = &req.effort {
        o.insert("thinking".into(), json!({"type": "adaptive"}));
        o.insert("output_config".into(), json!({"effort": effort}));
    }
    match req.temperature {
        // Messages refuse a temperature together with extended thinking.
        Some(t) if thinking => log::debug!("temperature {t} not sent: thinking is on"),
        Some(t) => {
            o.insert("temperature".into(), json!(t));
        }
        None => {}
    }
    body
}

#[derive(Debug)]
enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Thinking {
        text: String,
        signature: String,
    },
    Redacted {
        data: String,
    },
    Other,
}

/// Stream parser for one Messages attempt.
pub struct Parser {
    provider: String,
    model: String,
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<String>,
    message_id: Option<String>,
    any_tool_call: bool,
    /// A started call was withdrawn ([`StreamEvent::ToolCallCutOff`]).
    cut_off: bool,
    /// Calls whose block stopped without any input, decided at `message_stop`.
    empty_calls: Vec<(String, String)>,
    /// Block deltas are scanned ([`scan_block_delta`]) before the `Value` path (false
    /// only in tests, to compare the two).
    scan: bool,
    /// Unescaped strings of the scanned event, kept from event to event.
    scratch: String,
}

impl Parser {
    /// A parser attributing reasoning blocks to `provider`/`model`.
    pub fn new(provider: &str, model: &str) -> Self {
        Parser {
            provider: provider.into(),
            model: model.into(),
            blocks: BTreeMap::new(),
            usage: Usage::default(),
            stop_reason: None,
            message_id: None,
            any_tool_call: false,
            cut_off: false,
            empty_calls: Vec::new(),
            scan: true,
            scratch: String::new(),
        }
    }

    fn apply_usage(&mut self, u: &Value, initial: bool) {
        let get = |k: &str| u.get(k).and_then(Value::as_u64);
        if let Some(n) = get("input_tokens") {
            if initial || n > 0 {
                self.usage.input_tokens = n;
            }
        }
        if let Some(n) = get("cache_read_input_tokens") {
            if initial || n > 0 {
                self.usage.cache_read_tokens = n;
            }
        }
        if let Some(n) = get("cache_creation_input_tokens") {
            if initial || n > 0 {
                self.usage.cache_creation_tokens = n;
            }
        }
        if let Some(n) = get("output_tokens") {
            self.usage.output_tokens = n;
        }
    }

    fn reasoning_block(
        &self,
        text: String,
        signature: Option<String>,
        redacted: Option<String>,
    ) -> StreamEvent {
        StreamEvent::ReasoningDone {
            block: ReasoningBlock {
                provider: self.provider.clone(),
                model: self.model.clone(),
                text,
                signature,
                redacted,
                raw: None,
            },
        }
    }
}

impl Parser {
    /// `message_start`: the message id and the initial usage.
    fn message_start(&mut self, v: &Value) {
        let Some(msg) = v.get("message") else { return };
        self.message_id = msg.get("id").and_then(Value::as_str).map(str::to_string);
        if let Some(u) = msg.get("usage") {
            self.apply_usage(u, true);
        }
    }

    /// `content_block_start`: opens block `index` (text, tool call, thinking, redacted
    /// thinking), streaming what its start already carries.
    fn block_start(&mut self, index: u64, v: &Value, out: &mut Out) {
        let Some(cb) = v.get("content_block") else {
            return;
        };
        let s = |k: &str| cb.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let block = match cb.get("type").and_then(Value::as_str) {
            Some("text") => {
                let t = s("text");
                if !t.is_empty() {
                    out.push(StreamEvent::TextDelta { text: t });
                }
                Block::Text
            }
            Some("tool_use") | Some("server_tool_use") => {
                let (id, name) = (s("id"), s("name"));
                out.push(StreamEvent::ToolCallStart {
                    id: id.clone(),
                    name: name.clone(),
                });
                // Some compatible servers send the whole input here.
                let json = match cb.get("input") {
                    Some(Value::Object(m)) if !m.is_empty() => cb["input"].to_string(),
                    _ => String::new(),
                };
                if !json.is_empty() {
                    out.push(StreamEvent::ToolCallDelta {
                        id: id.clone(),
                        delta: json.clone(),
                    });
                }
                Block::Tool { id, name, json }
            }
            Some("thinking") => {
                let t = s("thinking");
                if !t.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text: t.clone() });
                }
                Block::Thinking {
                    text: t,
                    signature: s("signature"),
                }
            }
            Some("redacted_thinking") => Block::Redacted { data: s("data") },
            _ => Block::Other,
        };
        self.blocks.insert(index, block);
    }

    /// `content_block_delta`: text, tool input JSON, thinking text or signature of block
    /// `d.index`.
    fn block_delta(&mut self, d: BlockDelta, out: &mut Out) {
        let block = self.blocks.get_mut(&d.index);
        match (d.kind, block) {
            (Some("text_delta"), _) if !d.text.is_empty() => {
                out.text(false, d.text);
            }
            (Some("input_json_delta"), Some(Block::Tool { id, json, .. })) => {
                let piece = d.partial_json;
                if !piece.is_empty() {
                    json.push_str(piece);
                    out.push(StreamEvent::ToolCallDelta {
                        id: id.clone(),
                        delta: piece.to_string(),
                    });
                }
            }
            (Some("thinking_delta"), Some(Block::Thinking { text, .. })) => {
                let piece = d.thinking;
                if !piece.is_empty() {
                    text.push_str(piece);
                    out.text(true, piece);
                }
            }
            (Some("signature_delta"), Some(Block::Thinking { signature, .. })) => {
                signature.push_str(d.signature);
            }
            _ => {}
        }
    }

    /// `content_block_stop`: ends block `index`: a tool call with input ends or is
    /// withdrawn, one without input waits for `message_stop`; thinking becomes a
    /// `ReasoningDone`.
    fn block_stop(&mut self, index: u64, out: &mut Out) {
        match self.blocks.remove(&index) {
            Some(Block::Tool { id, name, json }) if json.trim().is_empty() => {
                // No input at all: a tool without parameters, or a call the output
                // limit cut off at once. `message_stop` decides (stop reason).
                self.empty_calls.push((id, name));
            }
            Some(Block::Tool { id, name, json }) => {
                let arguments = finished_arguments(&json, false);
                if let Err(reason) = &arguments {
                    log::warn!("tool call {id} ({name}) not run: {reason}");
                }
                self.end_call(id, name, arguments, out);
            }
            Some(Block::Thinking { text, signature }) => {
                let sig = (!signature.is_empty()).then_some(signature);
                let ev = self.reasoning_block(text, sig, None);
                out.push(ev);
            }
            Some(Block::Redacted { data }) => {
                let ev = self.reasoning_block(String::new(), None, Some(data));
                out.push(ev);
            }
            _ => {}
        }
    }

    /// A finished call: [`StreamEvent::ToolCallEnd`] with its `arguments`, or withdrawn
    /// ([`StreamEvent::ToolCallCutOff`]) with the reason they are not runnable.
    fn end_call(
        &mut self,
        id: String,
        name: String,
        arguments: Result<String, String>,
        out: &mut Out,
    ) {
        match arguments {
            Ok(arguments) => {
                self.any_tool_call = true;
                out.push(StreamEvent::ToolCallEnd {
                    call: ToolCall {
                        id,
                        name,
                        arguments,
                        item_id: None,
                    },
                });
            }
            Err(reason) => {
                self.cut_off = true;
                out.push(StreamEvent::ToolCallCutOff { id, name, reason });
            }
        }
    }

    /// `message_delta`: the stop reason and cumulative usage.
    fn message_delta(&mut self, v: &Value) {
        if let Some(r) = v.pointer("/delta/stop_reason").and_then(Value::as_str) {
            self.stop_reason = Some(r.to_string());
        }
        if let Some(u) = v.get("usage") {
            self.apply_usage(u, false);
        }
    }

    /// `message_stop`: withdraws tool blocks never stopped, decides the calls without
    /// input (withdrawn when the stop reason is `max_tokens`), and returns `Done`.
    fn message_stop(&mut self, out: &mut Out) -> StreamEvent {
        // Tool blocks never stopped were cut off.
        let open: Vec<u64> = self
            .blocks
            .iter()
            .filter(|(_, b)| matches!(b, Block::Tool { .. }))
            .map(|(i, _)| *i)
            .collect();
        for i in open {
            if let Some(Block::Tool { id, name, .. }) = self.blocks.remove(&i) {
                self.cut_off = true;
                out.push(StreamEvent::ToolCallCutOff {
                    id,
                    name,
                    reason: "the message ended before the call's input was complete".into(),
                });
            }
        }
        let cut = self.stop_reason.as_deref() == Some("max_tokens");
        for (id, name) in std::mem::take(&mut self.empty_calls) {
            self.end_call(id, name, finished_arguments("", cut), out);
        }
        let stop_reason = self
            .stop_reason
            .clone()
            .or_else(|| self.any_tool_call.then(|| "tool_use".to_string()));
        StreamEvent::Done {
            usage: self.usage,
            truncated: stop_reason.as_deref() == Some("max_tokens") || self.cut_off,
            stop_reason,
            response_id: self.message_id.clone(),
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
        if self.scan {
            // The usual event, a block's delta, read straight from its bytes.
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            let scanned =
                scan_block_delta(&ev.data, &mut scratch).map(|d| self.block_delta(d, out));
            self.scratch = scratch;
            if scanned.is_some() {
                return None;
            }
        }
        let v = parse_data(ev)?;
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .or(ev.event.as_deref())
            .unwrap_or("");
        let index = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        match ty {
            "message_start" => self.message_start(&v),
            "content_block_start" => self.block_start(index, &v, out),
            "content_block_delta" => self.block_delta(BlockDelta::from_value(index, &v), out),
            "content_block_stop" => self.block_stop(index, out),
            "message_delta" => self.message_delta(&v),
            "message_stop" => return Some(Ok(self.message_stop(out))),
            "error" => {
                let (code, ty, msg) = error_fields(&v);
                return Some(Err(classify_stream_error(
                    code.as_deref(),
                    ty.as_deref(),
                    msg.as_deref().unwrap_or("stream error"),
                )));
            }
            _ => {} // ping and unknown events
        }
        None
    }

    /// A `message` object: `message_start`, one start/stop pair per content block (whole
    /// text, thinking with its signature, tool input), `message_delta` with the stop
    /// reason and usage, `message_stop`.
    fn json_body_events(&self, v: &Value) -> Option<Vec<String>> {
        if v.get("type").and_then(Value::as_str) != Some("message") {
            return None;
        }
        let blocks = v.get("content")?.as_array()?;
        let usage = v.get("usage").cloned().unwrap_or(Value::Null);
        let mut start = v.clone();
        start["content"] = json!([]);
        let mut out = vec![json!({"type": "message_start", "message": start}).to_string()];
        for (i, b) in blocks.iter().enumerate() {
            out.push(
                json!({"type": "content_block_start", "index": i, "content_block": b}).to_string(),
            );
            out.push(json!({"type": "content_block_stop", "index": i}).to_string());
        }
        out.push(
            json!({"type": "message_delta", "delta": {"stop_reason": v.get("stop_reason")}, "usage": usage})
                .to_string(),
        );
        out.push(json!({"type": "message_stop"}).to_string());
        Some(out)
    }

    fn on_eof(&mut self, _out: &mut Out) -> Result<StreamEvent, AttemptError> {
        Err(AttemptError::incomplete(
            "stream closed before message_stop",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::chat::{ChatMessage, FailureKind};
    use crate::provider::wire::WireProtocol;

    fn run(body: &str) -> (Vec<StreamEvent>, Result<StreamEvent, AttemptError>) {
        crate::provider::wire::parse_body(&mut Parser::new("a", "claude"), body)
    }

    #[test]
    fn calls_without_complete_input_are_cut_off() {
        let call = |partial: &str, stop: &str| {
            format!(
                concat!(
                    "data: {{\"type\":\"message_start\",\"message\":{{\"id\":\"m\",\"usage\":{{\"input_tokens\":1}}}}}}\n\n",
                    "data: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"x\",\"input\":{{}}}}}}\n\n",
                    "data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"input_json_delta\",\"partial_json\":{}}}}}\n\n",
                    "data: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n",
                    "data: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"{}\"}},\"usage\":{{\"output_tokens\":3}}}}\n\n",
                    "data: {{\"type\":\"message_stop\"}}\n\n",
                ),
                serde_json::Value::String(partial.into()),
                stop
            )
        };
        let verdict = |body: String| {
            let (out, end) = run(&body);
            let ended = out
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCallEnd { .. }));
            let cut = out
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCallCutOff { .. }));
            let truncated = matches!(
                end.unwrap(),
                StreamEvent::Done {
                    truncated: true,
                    ..
                }
            );
            (ended, cut, truncated)
        };
        assert_eq!(verdict(call("{\"a\":", "max_tokens")), (false, true, true));
        assert_eq!(verdict(call("", "max_tokens")), (false, true, true));
        assert_eq!(verdict(call("", "tool_use")), (true, false, false));
        assert_eq!(verdict(call("{\"a\":1}", "tool_use")), (true, false, false));
    }

    #[test]
    fn thinking_with_signature_and_no_event_lines() {
        let body = concat!(
            "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":5,\"cache_read_input_tokens\":7,\"cache_creation_input_tokens\":3,\"output_tokens\":1}}}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"hmm\"}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"SIG\"}}\n\n",
            "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
            "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"redacted_thinking\",\"data\":\"OPAQUE\"}}\n\n",
            "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
            "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
            "data: {\"type\":\"message_stop\"}\n\n",
        );
        let (out, end) = run(body);
        assert_eq!(out[0], StreamEvent::ReasoningDelta { text: "hmm".into() });
        assert!(
            matches!(&out[1], StreamEvent::ReasoningDone { block } if block.signature.as_deref() == Some("SIG") && block.text == "hmm")
        );
        assert!(
            matches!(&out[2], StreamEvent::ReasoningDone { block } if block.redacted.as_deref() == Some("OPAQUE"))
        );
        match end.unwrap() {
            StreamEvent::Done {
                usage,
                stop_reason,
                response_id,
                ..
            } => {
                assert_eq!(
                    usage,
                    Usage {
                        input_tokens: 5,
                        output_tokens: 9,
                        cache_read_tokens: 7,
                        cache_creation_tokens: 3,
                        reasoning_tokens: 0
                    }
                );
                assert_eq!(stop_reason.as_deref(), Some("end_turn"));
                assert_eq!(response_id.as_deref(), Some("msg_1"));
            }
            e => panic!("{e:?}"),
        }
    }

    #[test]
    fn error_event_and_eof() {
        let (_, end) = run("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n");
        let e = end.unwrap_err();
        assert_eq!((e.kind, e.retryable), (FailureKind::Overloaded, true));
        let (out, end) = run(concat!(
            "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"x\",\"input\":{}}}\n\n",
            "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"a\"}}\n\n",
        ));
        assert_eq!(end.unwrap_err().kind, FailureKind::IncompleteStream);
        assert!(!out
            .iter()
            .any(|e| matches!(e, StreamEvent::ToolCallEnd { .. })));
    }

    #[test]
    fn lowering_rules() {
        let mut a = ChatMessage::text(Role::Assistant, "calling");
        a.reasoning.push(ReasoningBlock {
            provider: "a".into(),
            model: "claude".into(),
            text: "t".into(),
            signature: Some("S".into()),
            redacted: None,
            raw: None,
        });
        a.reasoning.push(ReasoningBlock {
            provider: "other".into(),
            model: "claude".into(),
            text: "x".into(),
            signature: Some("S2".into()),
            redacted: None,
            raw: None,
        });
        a.tool_calls.push(ToolCall {
            id: "toolu_1".into(),
            name: "t".into(),
            arguments: "not json".into(),
            item_id: None,
        });
        let mut t = ChatMessage::text(Role::Tool, "res");
        t.tool_call_id = Some("toolu_1".into());
        t.is_error = true;
        let req = ChatRequest {
            model: "claude".into(),
            system: "sys".into(),
            messages: vec![
                ChatMessage::text(Role::User, ""),
                a,
                t,
                ChatMessage::text(Role::User, "more"),
                ChatMessage::text(Role::Assistant, "partial"),
            ],
            tools: Default::default(),
            effort: None,
            max_output_tokens: None,
            prompt_cache_key: None,
            output_schema: None,
            temperature: None,
        };
        let b = WireProtocol::Anthropic.build_body("a", "", &req);
        assert_eq!(b["system"], "sys");
        assert_eq!(b["max_tokens"], DEFAULT_MAX_TOKENS);
        assert!(b.get("temperature").is_none());
        let hot = ChatRequest {
            temperature: Some(0.5),
            ..req.clone()
        };
        assert_eq!(
            WireProtocol::Anthropic.build_body("a", "", &hot)["temperature"],
            0.5
        );
        let thinking = ChatRequest {
            effort: Some("high".into()),
            ..hot
        };
        assert!(WireProtocol::Anthropic
            .build_body("a", "", &thinking)
            .get("temperature")
            .is_none());
        let m = b["messages"].as_array().unwrap();
        assert_eq!(m.len(), 5);
        assert_eq!(m[0]["content"][0]["text"], " ");
        let blocks = m[1]["content"].as_array().unwrap();
        let types: Vec<&str> = blocks.iter().map(|x| x["type"].as_str().unwrap()).collect();
        assert_eq!(types, ["thinking", "text", "tool_use"]);
        assert_eq!(blocks[0]["signature"], "S");
        assert_eq!(blocks[2]["input"], json!({}));
        assert_eq!(m[2]["role"], "user");
        assert_eq!(m[2]["content"][0]["type"], "tool_result");
        assert_eq!(m[2]["content"][0]["is_error"], true);
        assert_eq!(
            m[2]["content"][1]["text"], "more",
            "merged after the tool_result"
        );
        assert_eq!(m[3]["role"], "assistant");
        assert_eq!(m[4]["content"][0]["text"], CONTINUE_GUIDE);
    }
}
