//! OpenAI Responses API (`POST {base}/responses`, providers.md §1, lowering per §6.5).
//!
//! Request: `stream:true`, `store:false`, `instructions` = system prompt, `input` items
//! (`message` / `function_call` / `function_call_output` / `reasoning`), flat function
//! tools with `strict:false`, `tool_choice:"auto"` when tools exist, `prompt_cache_key`
//! (clamped to 64 chars), `reasoning:{effort, summary:"auto"}` and
//! `include:["reasoning.encrypted_content"]` when an effort is set, `max_output_tokens`,
//! `temperature` when set, and `text.format` json_schema when an output schema is set.
//!
//! Replay rules (`store:false` means the server keeps nothing, §1.2): reasoning items are
//! replayed only to the same provider + model and only when they carry
//! `encrypted_content` (their `status` stripped); a `function_call` keeps its `fc_…` item
//! id only when its message's reasoning is replayed too (the server pairs them); message
//! item ids (`msg_…`) are never sent.
//!
//! Stream (§1.3): text from `response.output_text.delta` (or, when an item had no deltas,
//! from its `response.output_item.done` content); reasoning from
//! `response.reasoning_summary_text.delta` / `response.reasoning_text.delta`, finished by
//! the reasoning item's `output_item.done`; calls start at `output_item.added`, grow by
//! `function_call_arguments.delta`, and end at the call's `output_item.done` (the
//! authoritative arguments) or, failing that, from `response.completed`'s `output`.
//! Terminal: `response.completed` / `response.done`, `response.incomplete` (truncated
//! when `max_output_tokens`), `response.failed` and `error` (classified, nested
//! `error:{code,message}` preferred). `[DONE]` is tolerated. EOF before a terminal event =
//! incomplete stream. Usage per §1.4.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::chat::{
    ChatMessage, ChatRequest, ReasoningBlock, Role, StreamEvent, ToolCall, ToolSpec, Usage,
};
use super::request::{normalize_schema, output_schema_parts, same_origin};
use super::retry::{classify_stream_error, error_fields, AttemptError};
use super::sse::SseEvent;
use super::wire::{finished_arguments, parse_data, Out, WireParser};

mod text_delta;
use text_delta::TextDelta;

/// Longest `prompt_cache_key` sent (wuu clamps to 64).
pub const MAX_PROMPT_CACHE_KEY: usize = 64;

/// The `tools` array of a request offering `tools` (flat function tools, `strict:false`).
pub fn tools_json(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": normalize_schema(&t.parameters),
                "strict": false,
            })
        })
        .collect()
}

/// The request body for `req` without its `tools` array ([`WireProtocol::build_body`]
/// adds [`tools_json`]).
///
/// [`WireProtocol::build_body`]: crate::provider::wire::WireProtocol::build_body
pub fn base_body(provider_id: &str, req: &ChatRequest) -> Value {
    let mut input = Vec::new();
    for m in &req.messages {
        lower_message(provider_id, req, m, &mut input);
    }
    let mut body = json!({
        "model": req.model,
        "input": input,
        "stream": true,
        "store": false,
    });
    let o = body.as_object_mut().expect("object");
    if !req.system.is_empty() {
        o.insert("instructions".into(), json!(req.system));
    }
    if !req.tools.is_empty() {
        o.insert("tool_choice".into(), json!("auto"));
    }
    if let Some(k) = &req.prompt_cache_key {
        let k: String = k.chars().take(MAX_PROMPT_CACHE_KEY).collect();
        o.insert("prompt_cache_key".into(), json!(k));
    }
    if let Some(effort) = &req.effort {
        o.insert(
            "reasoning".into(),
            json!({"effort": effort, "summary": "auto"}),
        );
        o.insert("include".into(), json!(["reasoning.encrypted_content"]));
    }
    if let Some(n) = req.max_output_tokens {
        o.insert("max_output_tokens".into(), json!(n));
    }
    if let Some(t) = req.temperature {
        o.insert("temperature".into(), json!(t));
    }
    if let Some(schema) = &req.output_schema {
        let (name, schema, strict) = output_schema_parts(schema);
        o.insert(
            "text".into(),
            json!({"format": {"type": "json_schema", "name": name, "schema": schema, "strict": strict}}),
        );
    }
    body
}

fn lower_message(provider_id: &str, req: &ChatRequest, m: &ChatMessage, out: &mut Vec<Value>) {
    match m.role {
        Role::User => {
            let mut parts = Vec::new();
            if !m.content.is_empty() || m.images.is_empty() {
                parts.push(json!({"type": "input_text", "text": m.content}));
            }
            for img in &m.images {
                parts.push(json!({
                    "type": "input_image",
                    "image_url": format!("data:{};base64,{}", img.media_type, img.data),
                }));
            }
            out.push(json!({"type": "message", "role": "user", "content": parts}));
        }
        Role::Assistant => {
            let mut reasoning_replayed = false;
            for r in &m.reasoning {
                if !same_origin(&r.provider, &r.model, provider_id, &req.model) {
                    continue;
                }
                let Some(Value::Object(raw)) = &r.raw else {
                    continue;
                };
                if raw.get("encrypted_content").is_none_or(Value::is_null) {
                    continue;
                }
                let mut item = raw.clone();
                item.remove("status");
                item.insert("type".into(), json!("reasoning"));
                if !item.contains_key("summary") {
                    item.insert("summary".into(), json!([]));
                }
                out.push(Value::Object(item));
                reasoning_replayed = true;
            }
            if !m.content.is_empty() {
                out.push(json!({
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": m.content}],
                }));
            }
            for c in &m.tool_calls {
                let mut item = json!({
                    "type": "function_call",
                    "call_id": c.id,
                    "name": c.name,
                    "arguments": if c.arguments.is_empty() { "{}" } else { &c.arguments },
                });
                if let Some(id) = &c.item_id {
                    if reasoning_replayed && id.starts_with("fc_") {
                        item["id"] = json!(id);
                    }
                }
                out.push(item);
            }
        }
        Role::Tool => {
            out.push(json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.clone().unwrap_or_default(),
                "output": m.content,
            }));
        }
    }
}

/// Usage of a `response.usage` object (§1.4): fresh input = `input_tokens − cached`.
pub fn parse_usage(u: &Value) -> Usage {
    let n = |v: Option<&Value>| v.and_then(Value::as_u64).unwrap_or(0);
    let input = n(u.get("input_tokens"));
    let cached = n(u.pointer("/input_tokens_details/cached_tokens"));
    Usage {
        input_tokens: input.saturating_sub(cached),
        output_tokens: n(u.get("output_tokens")),
        cache_read_tokens: cached,
        cache_creation_tokens: 0,
        reasoning_tokens: n(u.pointer("/output_tokens_details/reasoning_tokens")),
    }
}

#[derive(Debug, Default)]
struct CallState {
    call_id: String,
    name: String,
    item_id: Option<String>,
    args: String,
    started: bool,
    ended: bool,
    /// Withdrawn ([`StreamEvent::ToolCallCutOff`]): never ran.
    cut: bool,
}

#[derive(Debug, Default)]
struct ReasoningState {
    text: String,
    last_summary_index: Option<u64>,
}

/// Stream parser for one Responses attempt.
pub struct Parser {
    provider: String,
    model: String,
    calls: BTreeMap<u64, CallState>,
    reasoning: BTreeMap<u64, ReasoningState>,
    /// Output indexes of message items that streamed text deltas.
    text_streamed: BTreeMap<u64, bool>,
    response_id: Option<String>,
    message_item_id: Option<String>,
    error: Option<AttemptError>,
    /// Item keys (`item_id`, `item.id`, `item.call_id`) → output slot, for servers that
    /// send no `output_index` (llama.cpp's `llama-server` sends `item_id` only).
    keys: HashMap<String, u64>,
    /// One past the highest slot in use.
    next_slot: u64,
    /// The slot of the item added last (for keyless events).
    last_slot: u64,
    /// A started call was withdrawn.
    cut_off: bool,
    /// Text deltas are scanned ([`text_delta::scan`]) before the `Value` path (false only
    /// in tests, to compare the two).
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
            calls: BTreeMap::new(),
            reasoning: BTreeMap::new(),
            text_streamed: BTreeMap::new(),
            response_id: None,
            message_item_id: None,
            error: None,
            keys: HashMap::new(),
            next_slot: 0,
            last_slot: 0,
            cut_off: false,
            scan: true,
            scratch: String::new(),
        }
    }

    /// The output slot an event is about: its `output_index` when present (OpenAI), else
    /// the slot already keyed by its `item_id` / `item.id` / `item.call_id`; an
    /// `output_item.added` (`added`) with an unknown key opens a new slot, any other
    /// keyless event belongs to the item added last. Every key seen is remembered.
    fn slot(&mut self, v: &Value, added: bool) -> u64 {
        let item = v.get("item");
        let of_item = |f: &str| item.and_then(|i| i.get(f)).and_then(Value::as_str);
        let keys = [
            v.get("item_id").and_then(Value::as_str),
            of_item("id"),
            of_item("call_id"),
        ];
        let output_index = v.get("output_index").and_then(Value::as_u64);
        self.slot_of(keys, output_index, added)
    }

    /// [`Parser::slot`] of an event's fields: its `item_id`, `item.id`, `item.call_id`
    /// (each when a string) and `output_index` (when a non-negative integer).
    fn slot_of(&mut self, keys: [Option<&str>; 3], output_index: Option<u64>, added: bool) -> u64 {
        let keys = keys.map(|k| k.filter(|k| !k.is_empty()));
        let idx = if let Some(i) = output_index {
            i
        } else if let Some(i) = keys
            .iter()
            .flatten()
            .find_map(|k| self.keys.get(*k).copied())
        {
            i
        } else if added || keys.iter().any(Option::is_some) {
            self.next_slot
        } else {
            self.last_slot
        };
        self.next_slot = self.next_slot.max(idx.saturating_add(1));
        if added {
            self.last_slot = idx;
        }
        for k in keys.into_iter().flatten() {
            if !self.keys.contains_key(k) {
                self.keys.insert(k.to_string(), idx);
            }
        }
        idx
    }

    /// A text delta of the message in its slot.
    fn text_delta(&mut self, d: TextDelta, out: &mut Out) {
        let idx = self.slot_of([d.item_id, None, None], d.output_index, false);
        self.text_streamed.insert(idx, true);
        if !d.delta.is_empty() {
            out.text(false, d.delta);
        }
    }

    /// The slot of an item of the final `output` array at `pos`: the slot keyed by its id
    /// or call id, else its position.
    fn output_slot(&self, pos: usize, item: &Value) -> u64 {
        ["id", "call_id"]
            .iter()
            .filter_map(|f| item.get(*f).and_then(Value::as_str))
            .find_map(|k| self.keys.get(k).copied())
            .unwrap_or(pos as u64)
    }

    fn start_call(&mut self, idx: u64, item: &Value, out: &mut Out) {
        let st = self.calls.entry(idx).or_default();
        if st.started {
            return;
        }
        st.call_id = item
            .get("call_id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(super::wire::synth_call_id);
        st.name = item
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        st.item_id = item.get("id").and_then(Value::as_str).map(str::to_string);
        st.started = true;
        out.push(StreamEvent::ToolCallStart {
            id: st.call_id.clone(),
            name: st.name.clone(),
        });
    }

    /// Ends the call of slot `idx` from its completed `item`: a [`StreamEvent::ToolCallEnd`]
    /// when the arguments are complete JSON, else a [`StreamEvent::ToolCallCutOff`]
    /// (`truncated`: the response was cut by the output limit; an item with `status:
    /// "incomplete"` counts as cut too).
    fn end_call(&mut self, idx: u64, item: &Value, truncated: bool, out: &mut Out) {
        self.start_call(idx, item, out);
        let Some(st) = self.calls.get_mut(&idx) else {
            return;
        };
        if st.ended {
            return;
        }
        if let Some(args) = item.get("arguments").and_then(Value::as_str) {
            if st.args.is_empty() && !args.is_empty() {
                out.push(StreamEvent::ToolCallDelta {
                    id: st.call_id.clone(),
                    delta: args.to_string(),
                });
            }
            st.args = args.to_string();
        }
        if let Some(n) = item
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
        {
            st.name = n.to_string();
        }
        st.ended = true;
        let cut = truncated || item.get("status").and_then(Value::as_str) == Some("incomplete");
        match finished_arguments(&st.args, cut) {
            Ok(arguments) => out.push(StreamEvent::ToolCallEnd {
                call: ToolCall {
                    id: st.call_id.clone(),
                    name: st.name.clone(),
                    arguments,
                    item_id: st.item_id.clone(),
                },
            }),
            Err(reason) => {
                st.cut = true;
                log::warn!("tool call {} ({}) not run: {reason}", st.call_id, st.name);
                out.push(StreamEvent::ToolCallCutOff {
                    id: st.call_id.clone(),
                    name: st.name.clone(),
                    reason,
                });
                self.cut_off = true;
            }
        }
    }

    /// Withdraws every started call that never ended (the response finished without
    /// completing it).
    fn cut_open_calls(&mut self, out: &mut Out) {
        for st in self.calls.values_mut() {
            if st.started && !st.ended {
                st.ended = true;
                st.cut = true;
                self.cut_off = true;
                out.push(StreamEvent::ToolCallCutOff {
                    id: st.call_id.clone(),
                    name: st.name.clone(),
                    reason: "the response ended before the call's arguments were complete".into(),
                });
            }
        }
    }

    fn reasoning_done(&mut self, idx: u64, item: &Value, out: &mut Out) {
        let st = self.reasoning.remove(&idx).unwrap_or_default();
        let mut text = st.text;
        if text.is_empty() {
            // No deltas: take the summary texts of the completed item.
            if let Some(parts) = item.get("summary").and_then(Value::as_array) {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect();
                text = texts.join("\n\n");
                if !text.is_empty() {
                    out.push(StreamEvent::ReasoningDelta { text: text.clone() });
                }
            }
        }
        let mut raw = item.clone();
        if let Value::Object(m) = &mut raw {
            m.remove("status");
        }
        out.push(StreamEvent::ReasoningDone {
            block: ReasoningBlock {
                provider: self.provider.clone(),
                model: self.model.clone(),
                text,
                signature: None,
                redacted: None,
                raw: Some(raw),
            },
        });
    }

    fn message_done(&mut self, idx: u64, item: &Value, out: &mut Out) {
        if let Some(id) = item.get("id").and_then(Value::as_str) {
            self.message_item_id = Some(id.to_string());
        }
        if self.text_streamed.get(&idx).copied().unwrap_or(false) {
            return;
        }
        let text: String = item
            .get("content")
            .and_then(Value::as_array)
            .map(|parts| {
                parts
                    .iter()
                    .filter(|p| p.get("type").and_then(Value::as_str) == Some("output_text"))
                    .filter_map(|p| p.get("text").and_then(Value::as_str))
                    .collect()
            })
            .unwrap_or_default();
        if !text.is_empty() {
            self.text_streamed.insert(idx, true);
            out.push(StreamEvent::TextDelta { text });
        }
    }

    fn item_done(&mut self, idx: u64, item: &Value, out: &mut Out) {
        match item.get("type").and_then(Value::as_str) {
            Some("function_call") => self.end_call(idx, item, false, out),
            Some("reasoning") => self.reasoning_done(idx, item, out),
            Some("message") => self.message_done(idx, item, out),
            _ => {}
        }
    }

    fn finish(&mut self, resp: &Value, out: &mut Out, incomplete: bool) -> StreamEvent {
        // Items that never got their output_item.done: take them from the final output.
        let cut_by_limit = incomplete
            && resp
                .pointer("/incomplete_details/reason")
                .and_then(Value::as_str)
                .is_none_or(|r| r == "max_output_tokens");
        if let Some(items) = resp.get("output").and_then(Value::as_array) {
            for (i, item) in items.iter().enumerate() {
                let idx = self.output_slot(i, item);
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call") if !self.calls.get(&idx).is_some_and(|c| c.ended) => {
                        self.end_call(idx, item, cut_by_limit, out)
                    }
                    Some("reasoning") if self.reasoning.contains_key(&idx) => {
                        self.reasoning_done(idx, item, out)
                    }
                    Some("message") if !self.text_streamed.contains_key(&idx) => {
                        self.message_done(idx, item, out)
                    }
                    _ => {}
                }
            }
        }
        self.cut_open_calls(out);
        if let Some(id) = resp.get("id").and_then(Value::as_str) {
            self.response_id = Some(id.to_string());
        }
        let usage = resp.get("usage").map(parse_usage).unwrap_or_default();
        let reason = resp
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
            .map(str::to_string);
        let has_calls = self.calls.values().any(|c| c.ended && !c.cut);
        let stop_reason = if incomplete {
            reason.clone().or(Some("incomplete".into()))
        } else if has_calls {
            Some("tool_calls".into())
        } else {
            Some("stop".into())
        };
        StreamEvent::Done {
            usage,
            stop_reason,
            truncated: (incomplete && reason.as_deref() == Some("max_output_tokens"))
                || self.cut_off,
            response_id: self.response_id.clone(),
            message_item_id: self.message_item_id.clone(),
        }
    }
}

impl WireParser for Parser {
    fn on_event(
        &mut self,
        ev: &SseEvent,
        out: &mut Out,
    ) -> Option<Result<StreamEvent, AttemptError>> {
        if ev.data.trim() == "[DONE]" {
            return None;
        }
        if self.scan {
            // The usual event, a text delta, read straight from its bytes.
            let mut scratch = std::mem::take(&mut self.scratch);
            scratch.clear();
            let scanned = text_delta::scan(&ev.data, &mut scratch).map(|d| self.text_delta(d, out));
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
        match ty {
            "response.created" | "response.in_progress" => {
                if let Some(id) = v.pointer("/response/id").and_then(Value::as_str) {
                    self.response_id = Some(id.to_string());
                }
            }
            "response.output_item.added" => {
                let item = v.get("item")?.clone();
                let item = &item;
                let idx = self.slot(&v, true);
                match item.get("type").and_then(Value::as_str) {
                    Some("function_call") => self.start_call(idx, item, out),
                    Some("reasoning") => {
                        self.reasoning.entry(idx).or_default();
                    }
                    Some("message") => {
                        if let Some(id) = item.get("id").and_then(Value::as_str) {
                            self.message_item_id = Some(id.to_string());
                        }
                    }
                    _ => {}
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let delta = v.get("delta").and_then(Value::as_str).unwrap_or("");
                let idx = self.slot(&v, false);
                self.text_streamed.insert(idx, true);
                if !delta.is_empty() {
                    out.text(false, delta);
                }
            }
            "response.function_call_arguments.delta" => {
                let idx = self.slot(&v, false);
                let delta = v.get("delta").and_then(Value::as_str).unwrap_or("");
                let st = self.calls.get_mut(&idx)?;
                if st.ended || delta.is_empty() {
                    return None;
                }
                st.args.push_str(delta);
                out.push(StreamEvent::ToolCallDelta {
                    id: st.call_id.clone(),
                    delta: delta.to_string(),
                });
            }
            "response.function_call_arguments.done" => {
                // Arguments complete; the call ends at its output_item.done (authoritative).
                let idx = self.slot(&v, false);
                if let Some(st) = self.calls.get_mut(&idx) {
                    if let Some(a) = v.get("arguments").and_then(Value::as_str) {
                        if st.args.is_empty() && !a.is_empty() && !st.ended {
                            out.push(StreamEvent::ToolCallDelta {
                                id: st.call_id.clone(),
                                delta: a.to_string(),
                            });
                        }
                        st.args = a.to_string();
                    }
                }
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let idx = self.slot(&v, false);
                let delta = v.get("delta").and_then(Value::as_str).unwrap_or("");
                let summary_index = v.get("summary_index").and_then(Value::as_u64);
                let st = self.reasoning.entry(idx).or_default();
                let mut text = String::new();
                if summary_index.is_some()
                    && st.last_summary_index.is_some()
                    && st.last_summary_index != summary_index
                {
                    text.push_str("\n\n");
                }
                if summary_index.is_some() {
                    st.last_summary_index = summary_index;
                }
                text.push_str(delta);
                if !text.is_empty() {
                    st.text.push_str(&text);
                    out.push(StreamEvent::ReasoningDelta { text });
                }
            }
            "response.output_item.done" => {
                let item = v.get("item")?.clone();
                let idx = self.slot(&v, false);
                self.item_done(idx, &item, out);
            }
            "response.completed" | "response.done" => {
                let resp = v.get("response").cloned().unwrap_or(Value::Null);
                if resp.get("end_turn") == Some(&Value::Bool(false)) {
                    log::debug!("response.completed with end_turn:false");
                }
                return Some(Ok(self.finish(&resp, out, false)));
            }
            "response.incomplete" => {
                let resp = v.get("response").cloned().unwrap_or(Value::Null);
                return Some(Ok(self.finish(&resp, out, true)));
            }
            "response.failed" => {
                if let Some(e) = self.error.take() {
                    return Some(Err(e));
                }
                let err = v.pointer("/response/error").cloned().unwrap_or(Value::Null);
                let wrapped = json!({ "error": err });
                let (code, ty, msg) = error_fields(&wrapped);
                return Some(Err(classify_stream_error(
                    code.as_deref(),
                    ty.as_deref(),
                    msg.as_deref().unwrap_or("response failed"),
                )));
            }
            "error" => {
                let (code, ty, msg) = error_fields(&v);
                return Some(Err(classify_stream_error(
                    code.as_deref(),
                    ty.as_deref(),
                    msg.as_deref().unwrap_or("stream error"),
                )));
            }
            _ => {}
        }
        None
    }

    /// A `response` object: the terminal event of its `status` (`completed`,
    /// `incomplete`, `failed`), whose `output` carries every item.
    fn json_body_events(&self, v: &Value) -> Option<Vec<String>> {
        v.get("output")?.as_array()?;
        let ty = match v.get("status").and_then(Value::as_str) {
            Some("incomplete") => "response.incomplete",
            Some("failed") => "response.failed",
            _ => "response.completed",
        };
        Some(vec![json!({"type": ty, "response": v}).to_string()])
    }

    fn on_eof(&mut self, _out: &mut Out) -> Result<StreamEvent, AttemptError> {
        Err(self
            .error
            .take()
            .unwrap_or_else(|| AttemptError::incomplete("stream closed before response.completed")))
    }
}

#[cfg(test)]
mod tests;
