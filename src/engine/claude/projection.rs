//! The projection of a Claude Code turn's stdout lines onto engine events (spec
//! `engines.md` §1.5, output mapping): the `system` line's session id (persisted at
//! once as the conversation's `engine_ref`), streamed text, thinking and tool calls
//! (`stream_event`), full messages for what did not stream (`assistant`), tool results
//! (`user`), sub-agent tasks, per-message usage reconciled with the `result`'s, and the
//! `result` that ends the turn. Lines of sub-agents (`parent_tool_use_id` set) are not
//! projected. Claude's command and file tools are named like ours (`bash`,
//! `write_file`, `edit_file`) so clients and `wuu exec` show them as commands and file
//! changes.

use super::failure;
use crate::engine::child::Process;
use crate::engine::{EngineEvent, EventSink, Outcome, TurnRequest};
use crate::provider::Usage;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

/// A tool call of the turn.
pub(super) struct Call {
    /// Our tool name.
    pub(super) name: String,
    /// Claude's tool name.
    pub(super) native: String,
    /// Arguments streamed so far (Claude's JSON).
    pub(super) args: String,
    /// Whether its complete arguments were announced.
    pub(super) ready: bool,
}

/// The per-turn state of the line mapping.
pub(super) struct TurnMap<'a> {
    pub(super) sink: &'a EventSink<'a>,
    pub(super) proc: &'a Process,
    /// Whether any line arrived.
    pub(super) heard: bool,
    engine_ref: Option<String>,
    root: PathBuf,
    /// Whether the first model message of the turn started (later ones open a step).
    stepped: bool,
    /// Whether an agent message is open (text streamed into it).
    message_open: bool,
    /// Whether a reasoning item is open.
    thinking_open: bool,
    /// Whether any assistant text reached the turn.
    any_text: bool,
    /// Api message ids whose content streamed (their `assistant` echoes are skipped).
    streamed: HashSet<String>,
    /// The current streamed message: block index → tool call id, block index → kind.
    blocks: HashMap<u64, (String, String)>,
    pub(super) calls: HashMap<String, Call>,
    /// Usage of the current message (taken at its `message_stop`).
    message_usage: Usage,
    /// Usage emitted so far this turn.
    emitted: Usage,
    /// Open questions: our request id → (native request id, what is asked).
    pub(super) open: HashMap<String, (String, super::questions::Asked)>,
    /// Tool calls the user refused.
    pub(super) denied: HashSet<String>,
    agents: HashMap<String, (String, String)>,
}

impl<'a> TurnMap<'a> {
    pub(super) fn new(sink: &'a EventSink<'a>, proc: &'a Process, req: &TurnRequest) -> Self {
        TurnMap {
            sink,
            proc,
            heard: false,
            engine_ref: req.engine_ref.clone(),
            root: req.workspace_root.clone(),
            stepped: false,
            message_open: false,
            thinking_open: false,
            any_text: false,
            streamed: HashSet::new(),
            blocks: HashMap::new(),
            calls: HashMap::new(),
            message_usage: Usage::default(),
            emitted: Usage::default(),
            open: HashMap::new(),
            denied: HashSet::new(),
            agents: HashMap::new(),
        }
    }

    pub(super) fn emit(&self, ev: EngineEvent) {
        self.sink.emit(ev);
    }

    /// Maps one stdout line. Returns the end of the turn, if it ended.
    pub(super) fn line(&mut self, v: &Value) -> Option<Outcome> {
        self.heard = true;
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
        let sub = v
            .get("parent_tool_use_id")
            .is_some_and(|p| p.as_str().is_some_and(|s| !s.is_empty()));
        match ty {
            "system" => return self.system(v),
            "control_request" => self.control_request(v),
            "control_cancel_request" => {
                let id = v.get("request_id").and_then(Value::as_str).unwrap_or("");
                self.cancelled(id);
            }
            "stream_event" if !sub => self.stream_event(v),
            "assistant" if !sub => self.assistant(v),
            "user" if !sub => self.tool_results(v),
            "result" => return Some(self.result(v)),
            _ => {}
        }
        None
    }

    fn system(&mut self, v: &Value) -> Option<Outcome> {
        if let Some(sid) = v
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty() && s.len() <= 200)
        {
            if self.engine_ref.as_deref() != Some(sid) {
                match self.sink.call(|reply| EngineEvent::PersistRef {
                    engine_ref: sid.to_owned(),
                    reply,
                }) {
                    Some(Ok(())) => self.engine_ref = Some(sid.to_owned()),
                    Some(Err(e)) => return Some(failure(e, "engine_ref_not_stored")),
                    None => return Some(Outcome::Interrupted),
                }
            }
        }
        self.task(v);
        None
    }

    /// Sub-agent tasks (`task_started` / `task_progress` / `task_notification`) →
    /// agent activity.
    fn task(&mut self, v: &Value) {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").trim();
        let task = s("task_id").to_owned();
        if task.is_empty() {
            return;
        }
        match s("subtype") {
            "task_started" => {
                let kind = s("task_type").to_lowercase();
                if !kind.is_empty() && !kind.contains("agent") {
                    return;
                }
                let id = if s("tool_use_id").is_empty() {
                    task.clone()
                } else {
                    s("tool_use_id").to_owned()
                };
                let label = if s("description").is_empty() {
                    "Claude agent".to_owned()
                } else {
                    s("description").to_owned()
                };
                self.agents.insert(task, (id.clone(), label.clone()));
                self.activity(&id, &label, "running");
            }
            "task_progress" | "task_notification" => {
                let Some((id, label)) = self.agents.get(&task).cloned() else {
                    return;
                };
                let status = match s("status").to_lowercase().as_str() {
                    "failed" | "error" | "errored" => "failed",
                    "running" | "in_progress" | "" if s("subtype") == "task_progress" => "running",
                    "running" | "in_progress" => "running",
                    _ => "completed",
                };
                self.activity(&id, &label, status);
                if status != "running" {
                    self.agents.remove(&task);
                }
            }
            _ => {}
        }
    }

    fn activity(&self, id: &str, label: &str, status: &str) {
        self.emit(EngineEvent::AgentActivity(
            json!({"agent_id": id, "label": label, "status": status, "engine": "claude"}),
        ));
    }

    fn close_message(&mut self, final_answer: bool) {
        if self.message_open {
            self.message_open = false;
            self.emit(EngineEvent::MessageDone { final_answer });
        }
    }

    fn close_thinking(&mut self) {
        if self.thinking_open {
            self.thinking_open = false;
            self.emit(EngineEvent::ThinkingDone {
                text: None,
                detail: None,
            });
        }
    }

    fn text(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        self.close_thinking();
        self.message_open = true;
        self.any_text = true;
        self.emit(EngineEvent::ContentDelta(t.to_owned()));
    }

    fn thinking(&mut self, t: &str) {
        if t.is_empty() {
            return;
        }
        self.thinking_open = true;
        self.emit(EngineEvent::ThinkingDelta(t.to_owned()));
    }

    fn stream_event(&mut self, v: &Value) {
        let Some(ev) = v.get("event") else { return };
        if let Some(id) = v.get("api_message_id").and_then(Value::as_str) {
            self.streamed.insert(id.to_owned());
        }
        let index = ev.get("index").and_then(Value::as_u64).unwrap_or(0);
        match ev.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if let Some(id) = ev.pointer("/message/id").and_then(Value::as_str) {
                    self.streamed.insert(id.to_owned());
                }
                if self.stepped {
                    self.close_thinking();
                    self.close_message(false);
                    self.emit(EngineEvent::Step);
                }
                self.stepped = true;
                self.blocks.clear();
                self.message_usage = Usage::default();
                if let Some(u) = ev.pointer("/message/usage") {
                    merge_usage(&mut self.message_usage, u);
                }
            }
            "content_block_start" => {
                let block = ev.get("content_block").unwrap_or(&Value::Null);
                let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
                let mut call = String::new();
                if kind == "tool_use" {
                    let id = block.get("id").and_then(Value::as_str).unwrap_or("");
                    let name = block.get("name").and_then(Value::as_str).unwrap_or("");
                    if !id.is_empty() {
                        call = id.to_owned();
                        self.start_call(id, name);
                    }
                }
                self.blocks.insert(index, (kind.to_owned(), call));
            }
            "content_block_delta" => {
                let d = ev.get("delta").unwrap_or(&Value::Null);
                let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
                match s("type") {
                    "text_delta" => self.text(s("text")),
                    "thinking_delta" => self.thinking(s("thinking")),
                    "input_json_delta" => {
                        let Some((_, id)) = self.blocks.get(&index).cloned() else {
                            return;
                        };
                        if let Some(c) = self.calls.get_mut(&id) {
                            c.args.push_str(s("partial_json"));
                            self.emit(EngineEvent::ToolArgsDelta {
                                call_id: id,
                                delta: s("partial_json").to_owned(),
                            });
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let Some((kind, id)) = self.blocks.get(&index).cloned() else {
                    return;
                };
                match kind.as_str() {
                    "thinking" => self.close_thinking(),
                    "tool_use" => {
                        let args = self
                            .calls
                            .get(&id)
                            .map(|c| c.args.clone())
                            .unwrap_or_default();
                        let input = serde_json::from_str(&args).unwrap_or(json!({}));
                        self.ready_call(&id, &input);
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(u) = ev.get("usage") {
                    merge_usage(&mut self.message_usage, u);
                }
                let stop = ev.pointer("/delta/stop_reason").and_then(Value::as_str);
                if let Some(stop) = stop {
                    self.close_thinking();
                    self.emit(EngineEvent::StepEnd {
                        stop_reason: Some(stop.to_owned()),
                        truncated: stop == "max_tokens",
                        has_calls: stop == "tool_use",
                    });
                    if stop == "tool_use" {
                        self.message_open = false;
                    }
                }
            }
            "message_stop" => {
                let u = std::mem::take(&mut self.message_usage);
                self.add_usage(u);
            }
            _ => {}
        }
    }

    /// A full assistant message: what did not stream is projected now.
    fn assistant(&mut self, v: &Value) {
        let Some(msg) = v.get("message") else { return };
        let id = msg.get("id").and_then(Value::as_str).unwrap_or("");
        let streamed = self.streamed.contains(id);
        for block in msg
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
            match s("type") {
                "text" if !streamed => self.text(s("text")),
                "thinking" if !streamed => {
                    self.thinking(s("thinking"));
                    self.close_thinking();
                }
                "tool_use" => {
                    let call = s("id");
                    if call.is_empty() || self.calls.get(call).is_some_and(|c| c.ready) {
                        continue;
                    }
                    if !self.calls.contains_key(call) {
                        self.start_call(call, s("name"));
                    }
                    let input = block.get("input").cloned().unwrap_or(json!({}));
                    self.ready_call(call, &input);
                }
                _ => {}
            }
        }
        if !streamed {
            if let Some(u) = msg.get("usage") {
                let mut usage = Usage::default();
                merge_usage(&mut usage, u);
                self.add_usage(usage);
            }
        }
    }

    fn start_call(&mut self, id: &str, native: &str) {
        self.close_thinking();
        self.message_open = false;
        let name = tool_name(native);
        self.calls.insert(
            id.to_owned(),
            Call {
                name: name.clone(),
                native: native.to_owned(),
                args: String::new(),
                ready: false,
            },
        );
        self.emit(EngineEvent::ToolStart {
            call_id: id.to_owned(),
            name,
            arguments: None,
        });
        if matches!(native, "Task" | "Agent") {
            self.activity(id, "Claude agent", "running");
        }
    }

    /// The call's complete input: announced (in our names), recorded by the host.
    fn ready_call(&mut self, id: &str, input: &Value) {
        let Some(c) = self.calls.get_mut(id) else {
            return;
        };
        if c.ready {
            return;
        }
        c.ready = true;
        let (name, native) = (c.name.clone(), c.native.clone());
        let mut args = input.clone();
        if let (Some(obj), Some(p)) = (
            args.as_object_mut(),
            input
                .get("file_path")
                .or_else(|| input.get("notebook_path"))
                .and_then(Value::as_str),
        ) {
            obj.insert("path".into(), json!(self.display(p)));
        }
        self.emit(EngineEvent::ToolArgs {
            call_id: id.to_owned(),
            name,
            arguments: args.to_string(),
        });
        if native == "TodoWrite" {
            let todos: Vec<Value> = input
                .get("todos")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|t| json!({"content": t.get("content"), "status": t.get("status")}))
                .collect();
            self.emit(EngineEvent::Todo(json!({"todos": todos})));
        }
        let _ = self.sink.call(|reply| EngineEvent::ToolReady {
            call_id: id.to_owned(),
            at_most_once: false,
            reply,
        });
    }

    /// A path as our file tools report it: relative to the workspace when inside it.
    fn display(&self, p: &str) -> String {
        let path = std::path::Path::new(p);
        match path.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
            _ => p.to_owned(),
        }
    }

    /// `tool_result` blocks of a `user` line → tool ends.
    fn tool_results(&mut self, v: &Value) {
        let meta = v.get("tool_use_result");
        for block in v
            .pointer("/message/content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if block.get("type").and_then(Value::as_str) != Some("tool_result") {
                continue;
            }
            let id = block
                .get("tool_use_id")
                .and_then(Value::as_str)
                .unwrap_or("");
            let Some(call) = self.calls.remove(id) else {
                continue;
            };
            let is_error = block
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let text = result_text(block.get("content"));
            let detail = self.detail(&call, meta, is_error);
            if matches!(call.native.as_str(), "Task" | "Agent") {
                self.activity(
                    id,
                    "Claude agent",
                    if is_error { "failed" } else { "completed" },
                );
            }
            self.emit(EngineEvent::ToolEnd {
                call_id: id.to_owned(),
                error: is_error.then(|| text.clone()),
                output: Some(text),
                detail,
                is_error,
                permission_denied: is_error && self.denied.contains(id),
            });
        }
    }

    /// The structured result of a call: for file tools `{path, action}` (what our own
    /// file tools report), else Claude's `tool_use_result`.
    fn detail(&self, call: &Call, meta: Option<&Value>, is_error: bool) -> Option<Value> {
        if matches!(call.name.as_str(), "write_file" | "edit_file") && !is_error {
            let input: Value = serde_json::from_str(&call.args).unwrap_or(Value::Null);
            let path = meta
                .and_then(|m| m.get("filePath"))
                .or_else(|| input.get("file_path"))
                .or_else(|| input.get("notebook_path"))
                .and_then(Value::as_str)?;
            let created =
                meta.and_then(|m| m.get("type")).and_then(Value::as_str) == Some("create");
            return Some(json!({
                "path": self.display(path),
                "action": if created { "created" } else { "modified" },
            }));
        }
        meta.cloned()
    }

    fn add_usage(&mut self, u: Usage) {
        if u == Usage::default() {
            return;
        }
        self.emitted.input_tokens += u.input_tokens;
        self.emitted.output_tokens += u.output_tokens;
        self.emitted.cache_read_tokens += u.cache_read_tokens;
        self.emitted.cache_creation_tokens += u.cache_creation_tokens;
        self.emit(EngineEvent::Usage(u));
    }

    /// The `result` line: usage reconciled, the answer settled, the turn's end.
    fn result(&mut self, v: &Value) -> Outcome {
        // Usage the stream did not show (the result's totals are this run's).
        if let Some(u) = v.get("usage") {
            let mut total = Usage::default();
            merge_usage(&mut total, u);
            let rest = Usage {
                input_tokens: total.input_tokens.saturating_sub(self.emitted.input_tokens),
                output_tokens: total
                    .output_tokens
                    .saturating_sub(self.emitted.output_tokens),
                cache_read_tokens: total
                    .cache_read_tokens
                    .saturating_sub(self.emitted.cache_read_tokens),
                cache_creation_tokens: total
                    .cache_creation_tokens
                    .saturating_sub(self.emitted.cache_creation_tokens),
                reasoning_tokens: 0,
            };
            self.add_usage(rest);
        }
        let cost: f64 = v
            .get("model_usage_since_last_result")
            .or_else(|| v.get("modelUsage"))
            .and_then(Value::as_object)
            .map(|m| {
                m.values()
                    .filter_map(|u| u.get("costUSD").and_then(Value::as_f64))
                    .sum()
            })
            .unwrap_or(0.0);
        self.emit(EngineEvent::Diagnostic(json!({
            "type": "engine_usage",
            "engine": super::ID,
            "cost_usd": cost,
            "session_cost_usd": v.get("total_cost_usd"),
            "num_turns": v.get("num_turns"),
            "duration_ms": v.get("duration_ms"),
        })));
        self.close_thinking();
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").trim();
        let failed = v.get("is_error").and_then(Value::as_bool) == Some(true)
            || s("subtype").starts_with("error");
        // Calls that never reported a result.
        let open: Vec<String> = self.calls.keys().cloned().collect();
        for id in open {
            self.calls.remove(&id);
            self.emit(EngineEvent::ToolEnd {
                call_id: id,
                output: None,
                detail: None,
                is_error: true,
                error: Some("the tool did not report a result".into()),
                permission_denied: false,
            });
        }
        if failed {
            self.close_message(false);
            let errors: Vec<&str> = v
                .get("errors")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .collect();
            let message = if !errors.is_empty() {
                errors.join("\n")
            } else if !s("result").is_empty() {
                s("result").to_owned()
            } else {
                format!("claude turn failed: {}", s("subtype"))
            };
            return failure(message, "engine_turn_failed");
        }
        if !self.any_text && !s("result").is_empty() {
            self.text(s("result"));
        }
        self.close_message(true);
        Outcome::Completed
    }
}

/// Claude's tool names → ours where they do the same (commands, file writes and
/// edits); others keep Claude's name.
pub(super) fn tool_name(native: &str) -> String {
    match native {
        "Bash" => "bash",
        "Write" => "write_file",
        "Edit" | "MultiEdit" | "NotebookEdit" => "edit_file",
        other => other,
    }
    .to_owned()
}

/// Takes the larger of each Anthropic usage field (`message_start` carries input and
/// cache tokens, `message_delta` the cumulative output).
fn merge_usage(into: &mut Usage, u: &Value) {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    into.input_tokens = into.input_tokens.max(n("input_tokens"));
    into.output_tokens = into.output_tokens.max(n("output_tokens"));
    into.cache_read_tokens = into.cache_read_tokens.max(n("cache_read_input_tokens"));
    into.cache_creation_tokens = into
        .cache_creation_tokens
        .max(n("cache_creation_input_tokens"));
}

/// The text of a `tool_result` content: a string, or its text blocks joined.
fn result_text(c: Option<&Value>) -> String {
    match c {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_takes_the_largest_of_each_field() {
        let mut u = Usage::default();
        merge_usage(
            &mut u,
            &json!({"input_tokens": 11, "output_tokens": 1, "cache_read_input_tokens": 2}),
        );
        merge_usage(&mut u, &json!({"output_tokens": 7}));
        assert_eq!(
            (u.input_tokens, u.output_tokens, u.cache_read_tokens),
            (11, 7, 2)
        );
    }

    #[test]
    fn command_and_file_tools_take_our_names() {
        assert_eq!(tool_name("Bash"), "bash");
        assert_eq!(tool_name("Write"), "write_file");
        assert_eq!(tool_name("MultiEdit"), "edit_file");
        assert_eq!(tool_name("Grep"), "Grep");
    }
}
