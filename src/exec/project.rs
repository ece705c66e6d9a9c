//! The projection of app-server notifications onto exec events (spec `exec.md` §4.3–§4.5,
//! §5.2–§5.3), plus the run state the `result` needs (current turn, message buffer,
//! trace path).
//!
//! Pure and synchronous: [`Projector::on_notification`] takes one notification and
//! returns the events it yields, in the fixed per-notification order of §4.5 rule 1.
//!
//! Differences from the Go runner (spec §11), on purpose:
//! - arguments are redacted in every event that carries them (`command_completed` and
//!   `command_output_delta` too), and so is the `command` field;
//! - a `tool_call` item announced with empty arguments (the model is still streaming
//!   them) is held back until the server re-announces it with its arguments, or until it
//!   completes, so `tool_started.arguments` is never an empty placeholder;
//! - `turn_completed` also carries the cache token counts;
//! - a retried provider stream is visible: the app-server withdraws the failed attempt's
//!   items (`item/removed`); a withdrawn agent message yields an `agent_message_final`
//!   with the text that survives (so deltas of a failed attempt never end up in
//!   `final_message`), and each retry is a `stream_reconnect` progress event (never
//!   `error`).

use super::events::*;
use crate::util::redact;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// A tool item the projector has seen start.
#[derive(Debug, Clone, Default)]
struct ToolItem {
    name: String,
    /// Whether `tool_started` was emitted.
    announced: bool,
    /// Command facts of a bash item (computed once, at its start).
    cmd: Option<CommandInfo>,
}

/// The state of one run's projection.
#[derive(Debug, Default)]
pub struct Projector {
    /// The run's conversation (root thread).
    pub thread_id: String,
    /// The latest tracked turn of the root thread.
    pub turn_id: String,
    /// The run (once `run/start` answered).
    pub run_id: String,
    /// The current turn's message buffer (§5.2).
    pub message: String,
    /// The latest root `turn_completed.trace_path` (§5.3).
    pub trace_path: String,
    /// Set by a terminal `run/updated` for our run.
    pub settled: Option<wuu_protocol::Run>,
    /// While true, `turn/error` of interrupted root turns is swallowed (exec synthesises
    /// its own `turn_interrupted` with the reason it knows: `timeout` or `interrupted`).
    pub suppress_interrupted: bool,
    /// The final answer of the last root turn was cut off by the output limit (its
    /// message is `truncated`; without a message, the turn is).
    pub truncated: bool,
    /// Category of the last failed root turn (`turn/error`).
    pub turn_error_category: String,
    /// Code (provider failure kind) of the last failed root turn.
    pub turn_error_code: String,
    tools: HashMap<String, ToolItem>,
    agents: HashSet<String>,
    /// Agent-message items of the current root turn, in order: (item id, text). The
    /// message buffer is their concatenation.
    messages: Vec<(String, String)>,
    /// Latest usage snapshot per root turn.
    usage: HashMap<String, RunUsage>,
    /// `stream_reconnect` items announced and not yet settled.
    reconnects: HashMap<String, Event>,
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_owned()
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// `turn/event`: todo updates and the request-context / provider-state diagnostics
/// (spec §4.4); other kinds yield nothing.
fn on_turn_event(out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
    let outer = p.get("event").cloned().unwrap_or(Value::Null);
    let kind = outer.get("type").and_then(Value::as_str).unwrap_or("");
    // Diagnostics nest their payload under the kind (`event.request_context`).
    let ev = match outer.get(kind) {
        Some(Value::Object(inner)) => Value::Object(inner.clone()),
        _ => outer.clone(),
    };
    match kind {
        "todo_update" => out.push(Event::TodoUpdated {
            thread_id: thread,
            turn_id: turn,
            todo: ev.get("todo").cloned().unwrap_or(Value::Null),
        }),
        "request_context" => {
            let mut m = diagnostic(REQUEST_CONTEXT_FIELDS, &ev, &thread, &turn);
            if let Some(Value::Array(secs)) = ev.get("system_sections") {
                if !secs.is_empty() {
                    m.insert("system_sections".into(), Value::Array(secs.clone()));
                }
            }
            out.push(Event::RequestContext(m));
        }
        "provider_state" => out.push(Event::ProviderState(diagnostic(
            PROVIDER_STATE_FIELDS,
            &ev,
            &thread,
            &turn,
        ))),
        _ => {}
    }
}

impl Projector {
    /// Tokens of the run so far: the sum of every root and worker turn's latest
    /// snapshot.
    pub fn usage_total(&self) -> RunUsage {
        self.usage
            .values()
            .fold(RunUsage::default(), |a, u| RunUsage {
                input_tokens: a.input_tokens + u.input_tokens,
                output_tokens: a.output_tokens + u.output_tokens,
                cache_creation_tokens: a.cache_creation_tokens + u.cache_creation_tokens,
                cache_read_tokens: a.cache_read_tokens + u.cache_read_tokens,
            })
    }

    fn note_usage(&mut self, thread: &str, turn: &str, p: &Value) {
        // Workers' turns (their thread id is the agent id) count in the run's usage.
        if (self.is_root(thread) || self.agents.contains(thread)) && !turn.is_empty() {
            self.usage.insert(
                turn.to_owned(),
                RunUsage {
                    input_tokens: u(p, "input_tokens"),
                    output_tokens: u(p, "output_tokens"),
                    cache_creation_tokens: u(p, "cache_creation_tokens"),
                    cache_read_tokens: u(p, "cache_read_tokens"),
                },
            );
        }
    }

    fn reconnect(&self, thread: &str, turn: &str, item: &Value, status: &str) -> Event {
        Event::StreamReconnect {
            thread_id: thread.to_owned(),
            turn_id: turn.to_owned(),
            item_id: s(item, "id"),
            status: status.to_owned(),
            retry_count: u(item, "retry_count"),
            max_retries: u(item, "max_retries"),
            retry_at_ms: u(item, "retry_at_ms"),
            reason: s(item, "reason"),
            message: s(item, "text"),
        }
    }

    /// A projector for conversation `thread_id`.
    pub fn new(thread_id: &str) -> Self {
        Projector {
            thread_id: thread_id.to_owned(),
            ..Default::default()
        }
    }

    fn is_root(&self, thread: &str) -> bool {
        self.thread_id.is_empty() || thread == self.thread_id
    }

    fn is_current(&self, thread: &str, turn: &str) -> bool {
        self.is_root(thread) && (self.turn_id.is_empty() || turn == self.turn_id)
    }

    /// Handles one notification (`method`, `params`); returns the events to emit.
    /// Unknown methods and malformed params yield nothing.
    pub fn on_notification(&mut self, method: &str, p: &Value) -> Vec<Event> {
        let thread = s(p, "thread_id");
        let turn = s(p, "turn_id");
        let mut out = vec![];
        match method {
            "turn/started" => self.on_turn_started(&mut out, thread, p),
            "item/agentMessage/delta" if self.is_current(&thread, &turn) => {
                self.on_message_delta(&mut out, thread, turn, p)
            }
            "item/agentMessage/replace" if self.is_current(&thread, &turn) => {
                self.on_message_replace(&mut out, thread, turn, p)
            }
            "turn/usage" => self.on_turn_usage(&mut out, thread, turn, p),
            "turn/completed" => self.on_turn_completed(&mut out, thread, p),
            "turn/error" => self.on_turn_error(&mut out, thread, turn, p),
            "item/started" => self.on_item_started(&mut out, thread, turn, p),
            "item/toolCall/outputDelta" => self.on_tool_output(&mut out, thread, turn, p),
            "item/completed" => self.on_item_completed(&mut out, thread, turn, p),
            "item/removed" => self.on_item_removed(&mut out, thread, turn, p),
            "turn/event" => on_turn_event(&mut out, thread, turn, p),
            "agent/updated" => {
                if let Some(e) = self.subagent(p) {
                    out.push(e);
                }
            }
            "run/updated" => self.on_run_updated(p),
            _ => {}
        }
        out
    }

    // Turns of the root thread: the current turn, its message buffer, usage, trace path
    // and failure (spec §4.4, §5.2–§5.3).

    fn on_turn_started(&mut self, out: &mut Vec<Event>, thread: String, p: &Value) {
        let turn_id = p
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if self.is_root(&thread) {
            self.turn_id = turn_id.clone();
            self.message.clear();
            self.messages.clear();
            self.truncated = false;
            out.push(Event::TurnStarted {
                thread_id: thread,
                turn_id,
            });
        }
    }

    fn on_turn_usage(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        self.note_usage(&thread, &turn, p);
        out.push(Event::UsageUpdated {
            thread_id: thread,
            turn_id: turn,
            input_tokens: u(p, "input_tokens"),
            output_tokens: u(p, "output_tokens"),
            cache_creation_tokens: u(p, "cache_creation_tokens"),
            cache_read_tokens: u(p, "cache_read_tokens"),
        })
    }

    fn on_turn_completed(&mut self, out: &mut Vec<Event>, thread: String, p: &Value) {
        let turn_id = p
            .pointer("/turn/id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let trace = s(p, "trace_path");
        self.note_usage(&thread, &turn_id, p);
        if self.is_root(&thread) {
            self.turn_id = turn_id.clone();
            // The final answer is cut when its message is (a turn is also
            // `truncated` when an earlier step was cut and the model went on);
            // without a message, when the turn is.
            let last_message = p
                .pointer("/turn/items")
                .and_then(Value::as_array)
                .and_then(|items| items.iter().rev().find(|i| i["type"] == "agent_message"));
            let flag = |v: &Value| v.get("truncated").and_then(Value::as_bool) == Some(true);
            self.truncated = match last_message {
                Some(m) => flag(m),
                None => flag(p),
            };
            let content = s(p, "content");
            if !content.is_empty() {
                self.message = content;
            }
            if !trace.is_empty() {
                self.trace_path = trace.clone();
            }
        }
        out.push(Event::TurnCompleted {
            thread_id: thread,
            turn_id,
            input_tokens: u(p, "input_tokens"),
            output_tokens: u(p, "output_tokens"),
            cache_creation_tokens: u(p, "cache_creation_tokens"),
            cache_read_tokens: u(p, "cache_read_tokens"),
            trace_path: trace,
            awaiting_auto_continuation: p
                .get("awaiting_auto_continuation")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        });
    }

    fn on_turn_error(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        let root = self.is_root(&thread);
        if root && !turn.is_empty() {
            self.turn_id = turn.clone();
        }
        let status = p
            .pointer("/turn/status")
            .and_then(Value::as_str)
            .unwrap_or("");
        if root && status != "interrupted" {
            self.turn_error_category = s(p, "category");
            self.turn_error_code = s(p, "code");
        }
        if status == "interrupted" {
            if !(root && self.suppress_interrupted) {
                out.push(Event::TurnInterrupted {
                    thread_id: thread,
                    turn_id: turn,
                    reason: "interrupted".into(),
                });
            }
        } else {
            out.push(Event::TurnFailed {
                thread_id: thread,
                turn_id: turn,
                error: s(p, "error"),
                category: s(p, "category"),
                code: s(p, "code"),
            });
        }
    }

    // Agent messages of the current root turn (spec §4.4, §5.2).

    fn on_message_delta(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        let delta = s(p, "delta");
        let item = s(p, "item_id");
        match self.messages.last_mut() {
            Some((id, text)) if *id == item => text.push_str(&delta),
            _ => match self.messages.iter_mut().find(|(id, _)| *id == item) {
                Some((_, text)) => text.push_str(&delta),
                None => self.messages.push((item, delta.clone())),
            },
        }
        self.message.push_str(&delta);
        out.push(Event::AgentMessageDelta {
            thread_id: thread,
            turn_id: turn,
            delta,
        });
    }

    fn on_message_replace(
        &mut self,
        out: &mut Vec<Event>,
        thread: String,
        turn: String,
        p: &Value,
    ) {
        let text = s(p, "text");
        self.message = text.clone();
        self.messages = vec![(s(p, "item_id"), text.clone())];
        out.push(Event::AgentMessageFinal {
            thread_id: thread,
            turn_id: turn,
            message: text,
        });
    }

    // Items: tool calls, their output, stream reconnects, and withdrawn items (spec §4.4).

    fn on_item_started(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        let item = p.get("item").cloned().unwrap_or(Value::Null);
        if s(&item, "type") == "stream_reconnect" {
            let ev = self.reconnect(&thread, &turn, &item, "retrying");
            self.reconnects.insert(s(&item, "id"), ev.clone());
            out.push(ev);
        }
        if s(&item, "type") == "tool_call" {
            let id = s(&item, "id");
            let name = s(&item, "name");
            let args = s(&item, "arguments");
            let entry = self.tools.entry(id.clone()).or_default();
            if !name.is_empty() {
                entry.name = name.clone();
            }
            if !entry.announced && !args.trim().is_empty() {
                entry.announced = true;
                let name = entry.name.clone();
                self.started(out, thread, turn, id, name, &args);
            }
        }
    }

    fn on_tool_output(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        let id = s(p, "item_id");
        let delta = s(p, "delta");
        out.push(Event::ToolOutputDelta {
            thread_id: thread.clone(),
            turn_id: turn.clone(),
            item_id: id.clone(),
            delta: delta.clone(),
        });
        if let Some(info) = self.tools.get(&id).and_then(|t| t.cmd.clone()) {
            out.push(Event::CommandOutputDelta { info, delta });
        }
    }

    fn on_item_completed(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        let item = p.get("item").cloned().unwrap_or(Value::Null);
        if s(&item, "type") == "stream_reconnect" {
            self.reconnects.remove(&s(&item, "id"));
            out.push(self.reconnect(&thread, &turn, &item, "failed"));
        }
        if s(&item, "type") == "tool_call" {
            self.completed(out, thread, turn, &item);
        }
    }

    fn on_item_removed(&mut self, out: &mut Vec<Event>, thread: String, turn: String, p: &Value) {
        // Only tool items are withdrawn in this stream (the Go runner also
        // reported removed message and reconnect rows as `tool_removed`, §11.2).
        let id = s(p, "item_id");
        if let Some(pos) = self.messages.iter().position(|(m, _)| *m == id) {
            // A withdrawn attempt's text: replace the buffer with what survives.
            self.messages.remove(pos);
            self.message = self.messages.iter().map(|(_, t)| t.as_str()).collect();
            if self.is_current(&thread, &turn) {
                out.push(Event::AgentMessageFinal {
                    thread_id: thread.clone(),
                    turn_id: turn.clone(),
                    message: self.message.clone(),
                });
            }
        }
        if let Some(Event::StreamReconnect {
            thread_id,
            turn_id,
            item_id,
            retry_count,
            max_retries,
            retry_at_ms,
            reason,
            message,
            ..
        }) = self.reconnects.remove(&id)
        {
            out.push(Event::StreamReconnect {
                thread_id,
                turn_id,
                item_id,
                status: "reconnected".into(),
                retry_count,
                max_retries,
                retry_at_ms,
                reason,
                message,
            });
        }
        // Only a call announced by `tool_started` is withdrawn by `tool_removed`
        // (a call cut off by the output limit before its arguments were complete
        // was never announced).
        if let Some(t) = self.tools.remove(&id).filter(|t| t.announced) {
            out.push(Event::ToolRemoved {
                thread_id: thread.clone(),
                turn_id: turn.clone(),
                item_id: id.clone(),
            });
            if is_command_tool(&t.name) {
                out.push(Event::CommandRemoved {
                    thread_id: thread,
                    turn_id: turn,
                    item_id: id,
                    name: t.name,
                });
            }
        }
    }

    // Runs: the terminal `run/updated` of our run settles it (spec §5.3).

    fn on_run_updated(&mut self, p: &Value) {
        if let Some(run) = p
            .get("run")
            .and_then(|r| serde_json::from_value::<wuu_protocol::Run>(r.clone()).ok())
        {
            if run.id == self.run_id && run.is_terminal() {
                if let Some(t) = run.result.as_ref().and_then(|r| r.trace_path.clone()) {
                    if !t.is_empty() {
                        self.trace_path = t;
                    }
                }
                if self.turn_id.is_empty() {
                    if let Some(r) = &run.result {
                        self.turn_id = r.final_turn_id.clone();
                    }
                }
                self.settled = Some(run);
            }
        }
    }

    fn started(
        &mut self,
        out: &mut Vec<Event>,
        thread: String,
        turn: String,
        id: String,
        name: String,
        args: &str,
    ) {
        let arguments = redact(args);
        out.push(Event::ToolStarted {
            thread_id: thread.clone(),
            turn_id: turn.clone(),
            item_id: id.clone(),
            name: name.clone(),
            arguments,
        });
        if is_command_tool(&name) {
            let info = self.command_info(&thread, &turn, &id, &name, Some(args));
            if let Some(t) = self.tools.get_mut(&id) {
                t.cmd = Some(info.clone());
            }
            out.push(Event::CommandStarted(info));
        }
    }

    /// Command facts of a bash item. `args` overrides the remembered arguments.
    fn command_info(
        &self,
        thread: &str,
        turn: &str,
        id: &str,
        name: &str,
        args: Option<&str>,
    ) -> CommandInfo {
        let raw = args.unwrap_or("");
        let parsed: Value = serde_json::from_str(raw).unwrap_or(Value::Null);
        // A `process` control call reads as `process ACTION ID`.
        let command = if name.trim() == "process" {
            format!(
                "process {} {}",
                s(&parsed, "action"),
                s(&parsed, "process_id")
            )
            .trim_end()
            .to_owned()
        } else {
            s(&parsed, "command")
        };
        CommandInfo {
            thread_id: thread.to_owned(),
            turn_id: turn.to_owned(),
            item_id: id.to_owned(),
            name: name.to_owned(),
            arguments: redact(raw),
            command: redact(&command),
            process_id: s(&parsed, "process_id"),
        }
    }

    fn completed(&mut self, out: &mut Vec<Event>, thread: String, turn: String, item: &Value) {
        let id = s(item, "id");
        let mut name = s(item, "name");
        let args = s(item, "arguments");
        let entry = self.tools.entry(id.clone()).or_default();
        if name.is_empty() {
            name = entry.name.clone();
        }
        entry.name = name.clone();
        if !entry.announced {
            entry.announced = true;
            self.started(
                out,
                thread.clone(),
                turn.clone(),
                id.clone(),
                name.clone(),
                &args,
            );
        }
        let status = s(item, "status");
        let error = s(item, "error");
        out.push(Event::ToolCompleted {
            thread_id: thread.clone(),
            turn_id: turn.clone(),
            item_id: id.clone(),
            name: name.clone(),
            status: status.clone(),
            error: error.clone(),
        });
        if is_command_tool(&name) {
            let mut info = self.command_info(&thread, &turn, &id, &name, Some(&args));
            let detail = item
                .pointer("/result_detail/structured_content")
                .unwrap_or(&Value::Null);
            // A background start names its process only in the result.
            if info.process_id.is_empty() {
                if let Some(p) = detail.get("process_id").and_then(Value::as_str) {
                    info.process_id = p.to_owned();
                }
            }
            out.push(Event::CommandCompleted {
                info,
                status: status.clone(),
                error,
                exit_code: detail.get("exit_code").and_then(Value::as_i64),
                duration_ms: u(detail, "duration_ms"),
            });
        }
        if status == "completed" {
            for fc in file_changes(&thread, &turn, &id, &name, item) {
                out.push(Event::FileChanged(fc));
            }
        }
    }

    fn subagent(&mut self, p: &Value) -> Option<Event> {
        let a = p.get("agent").unwrap_or(p);
        let agent_id = s(a, "agent_id");
        let agent_id = if agent_id.is_empty() {
            s(a, "id")
        } else {
            agent_id
        };
        if agent_id.trim().is_empty() {
            return None;
        }
        let status = s(a, "status");
        let ev = Subagent {
            thread_id: {
                let t = s(a, "thread_id");
                if t.is_empty() {
                    s(p, "thread_id")
                } else {
                    t
                }
            },
            agent_id: agent_id.clone(),
            // The Agent object names it `type` (spec `subagents.md` §2.3).
            agent_type: {
                let t = s(a, "agent_type");
                if t.is_empty() {
                    s(a, "type")
                } else {
                    t
                }
            },
            status: status.clone(),
            task_name: s(a, "task_name"),
            agent_profile: s(a, "agent_profile"),
            agent_path: s(a, "agent_path"),
            parent_id: s(a, "parent_id"),
            description: s(a, "description"),
            result: s(a, "result"),
            result_path: s(a, "result_path"),
            result_bytes: u(a, "result_bytes"),
            result_truncated: a
                .get("result_truncated")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            error: s(a, "error"),
            input_tokens: u(a, "input_tokens"),
            output_tokens: u(a, "output_tokens"),
            cache_creation_tokens: u(a, "cache_creation_tokens"),
            cache_read_tokens: u(a, "cache_read_tokens"),
        };
        let first = self.agents.insert(agent_id);
        Some(match status.trim() {
            "completed" | "failed" | "cancelled" | "canceled" => Event::SubagentCompleted,
            _ if first => Event::SubagentStarted,
            _ => Event::SubagentUpdated,
        }(ev))
    }
}

/// Tools whose calls also use the command event family (seed: "Background-process
/// control calls also use this family"): `bash` and the `process` tool.
fn is_command_tool(name: &str) -> bool {
    matches!(name.trim(), "bash" | "process")
}

/// `file_changed` events of a completed tool item (§4.4): from
/// `result_detail.structured_content` (this server), else from `result` parsed as a JSON
/// object (the Go server's shape).
pub fn file_changes(
    thread: &str,
    turn: &str,
    item_id: &str,
    tool: &str,
    item: &Value,
) -> Vec<FileChange> {
    let detail = item
        .pointer("/result_detail/structured_content")
        .filter(|v| v.is_object())
        .cloned()
        .or_else(|| {
            item.get("result")
                .and_then(Value::as_str)
                .and_then(|r| serde_json::from_str::<Value>(r).ok())
                .filter(Value::is_object)
        });
    let Some(d) = detail else { return vec![] };
    if item
        .pointer("/result_detail/is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false)
    {
        return vec![];
    }
    let t = |v: &Value, k: &str| s(v, k).trim().to_owned();
    let base = FileChange {
        thread_id: thread.to_owned(),
        turn_id: turn.to_owned(),
        item_id: item_id.to_owned(),
        tool_name: tool.to_owned(),
        path: t(&d, "path"),
        action: t(&d, "action"),
        old_file_sha: t(&d, "old_file_sha"),
        new_file_sha: t(&d, "new_file_sha"),
        workspace_revision: t(&d, "workspace_revision"),
        patch_journal_path: t(&d, "patch_journal_path"),
        manifest_path: t(&d, "manifest_path"),
        move_path: t(&d, "move_path"),
        lines_added: u(&d, "lines_added"),
        lines_removed: u(&d, "lines_removed"),
    };
    let over = |f: &Value| {
        let pick = |k: &str, dflt: &str| {
            let v = t(f, k);
            if v.is_empty() {
                dflt.to_owned()
            } else {
                v
            }
        };
        FileChange {
            path: t(f, "path"),
            move_path: pick("move_path", &base.move_path),
            action: pick("action", &base.action),
            old_file_sha: pick("old_file_sha", &base.old_file_sha),
            new_file_sha: pick("new_file_sha", &base.new_file_sha),
            lines_added: u(f, "lines_added"),
            lines_removed: u(f, "lines_removed"),
            ..base.clone()
        }
    };
    match tool.trim() {
        "write_file" | "edit_file" => {
            if base.path.is_empty() {
                vec![]
            } else {
                vec![base]
            }
        }
        "apply_patch" => {
            if let Some(files) = d.get("files").and_then(Value::as_array) {
                files
                    .iter()
                    .filter(|f| f.is_object())
                    .map(over)
                    .filter(|fc| !fc.path.is_empty())
                    .collect()
            } else if let Some(paths) = d.get("changed_files").and_then(Value::as_array) {
                paths
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|p| !p.trim().is_empty())
                    .map(|p| FileChange {
                        path: p.trim().to_owned(),
                        ..base.clone()
                    })
                    .collect()
            } else {
                vec![]
            }
        }
        "checkpoint" => d
            .get("restored_files")
            .and_then(Value::as_array)
            .map(|files| {
                files
                    .iter()
                    .map(over)
                    .filter(|fc| !fc.path.is_empty())
                    .collect()
            })
            .unwrap_or_default(),
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kinds(evs: &[Event]) -> Vec<&'static str> {
        evs.iter().map(Event::kind).collect()
    }

    #[test]
    fn bash_item_pairs_tool_and_command_events() {
        let mut p = Projector::new("T");
        p.on_notification("turn/started", &json!({"thread_id":"T","turn":{"id":"U"}}));
        let started = json!({"thread_id":"T","turn_id":"U","item":{"id":"I","type":"tool_call","name":"bash","arguments":""}});
        assert!(p.on_notification("item/started", &started).is_empty());
        let args = r#"{"command":"curl -H 'Authorization: Bearer abcdefghijklmnop' x"}"#;
        let again = json!({"thread_id":"T","turn_id":"U","item":{"id":"I","type":"tool_call","name":"bash","arguments":args}});
        let evs = p.on_notification("item/started", &again);
        assert_eq!(kinds(&evs), ["tool_started", "command_started"]);
        let Event::CommandStarted(info) = &evs[1] else {
            panic!()
        };
        assert!(info.command.contains("[REDACTED]"), "{}", info.command);
        assert!(!info.arguments.contains("abcdefghijklmnop"));
        assert!(p.on_notification("item/started", &again).is_empty());
        let evs = p.on_notification(
            "item/toolCall/outputDelta",
            &json!({"thread_id":"T","turn_id":"U","item_id":"I","delta":"out"}),
        );
        assert_eq!(kinds(&evs), ["tool_output_delta", "command_output_delta"]);
        let Event::CommandOutputDelta { info, .. } = &evs[1] else {
            panic!()
        };
        assert!(info.arguments.contains("[REDACTED]"), "{}", info.arguments);
        let done = json!({"thread_id":"T","turn_id":"U","item":{"id":"I","type":"tool_call","name":"bash","arguments":args,"status":"completed"}});
        let evs = p.on_notification("item/completed", &done);
        assert_eq!(kinds(&evs), ["tool_completed", "command_completed"]);
        let Event::CommandCompleted { info, .. } = &evs[1] else {
            panic!()
        };
        assert!(!info.arguments.contains("abcdefghijklmnop"));
    }

    #[test]
    fn command_and_file_facts_come_from_the_structured_result() {
        let mut p = Projector::new("T");
        let bash = json!({"id":"B","type":"tool_call","name":"bash","arguments":"{\"command\":\"false\"}","status":"failed",
            "error":"Exit code: 1","result_detail":{"is_error":true,"structured_content":{"exit_code":1,"duration_ms":37}}});
        let evs = p.on_notification(
            "item/completed",
            &json!({"thread_id":"T","turn_id":"U","item":bash}),
        );
        let Some(Event::CommandCompleted {
            exit_code,
            duration_ms,
            ..
        }) = evs.last()
        else {
            panic!("{evs:?}")
        };
        assert_eq!((*exit_code, *duration_ms), (Some(1), 37));
        // Killed by a signal, or no structured result: no exit code.
        let killed = json!({"id":"K","type":"tool_call","name":"bash","arguments":"{}","status":"failed",
            "result_detail":{"is_error":true,"structured_content":{"exit_code":null,"signal":9,"duration_ms":5}}});
        let evs = p.on_notification(
            "item/completed",
            &json!({"thread_id":"T","turn_id":"U","item":killed}),
        );
        let Some(Event::CommandCompleted { exit_code, .. }) = evs.last() else {
            panic!()
        };
        assert_eq!(*exit_code, None);
        let v: Value = serde_json::from_slice(&evs.last().unwrap().to_line()).unwrap();
        assert!(v["exit_code"].is_null(), "{v}");

        let edit = json!({"id":"E","type":"tool_call","name":"edit_file","arguments":"{}","status":"completed",
            "result_detail":{"is_error":false,"structured_content":{"path":"a.py","action":"modified","lines_added":3,"lines_removed":1}}});
        let evs = p.on_notification(
            "item/completed",
            &json!({"thread_id":"T","turn_id":"U","item":edit}),
        );
        let Some(Event::FileChanged(fc)) = evs.last() else {
            panic!()
        };
        assert_eq!((fc.lines_added, fc.lines_removed), (3, 1));
    }

    #[test]
    fn background_process_calls_use_the_command_family() {
        let mut p = Projector::new("T");
        p.on_notification("turn/started", &json!({"thread_id":"T","turn":{"id":"U"}}));
        // The bash call that starts a background process names it in its result.
        let args = r#"{"command":"sleep 9","run_in_background":true}"#;
        let done = json!({"thread_id":"T","turn_id":"U","item":{"id":"I","type":"tool_call","name":"bash",
            "arguments":args,"status":"completed",
            "result_detail":{"is_error":false,"structured_content":{"process_id":"bp_1","background":true}}}});
        let evs = p.on_notification("item/completed", &done);
        assert_eq!(
            kinds(&evs),
            [
                "tool_started",
                "command_started",
                "tool_completed",
                "command_completed"
            ]
        );
        let Event::CommandCompleted { info, .. } = &evs[3] else {
            panic!()
        };
        assert_eq!(info.process_id, "bp_1");
        // A control call: `process ACTION ID`.
        let args = r#"{"action":"stop","process_id":"bp_1"}"#;
        let started = json!({"thread_id":"T","turn_id":"U","item":{"id":"J","type":"tool_call","name":"process","arguments":args}});
        let evs = p.on_notification("item/started", &started);
        assert_eq!(kinds(&evs), ["tool_started", "command_started"]);
        let Event::CommandStarted(info) = &evs[1] else {
            panic!()
        };
        assert_eq!(info.command, "process stop bp_1");
        assert_eq!(info.process_id, "bp_1");
    }

    #[test]
    fn file_changes_from_structured_content() {
        let mut p = Projector::new("T");
        let item = json!({"id":"I","type":"tool_call","name":"apply_patch","arguments":"{}","status":"completed",
            "result_detail":{"is_error":false,"structured_content":{"workspace_revision":"r2",
            "files":[{"path":"a.txt","action":"modified","old_file_sha":"o","new_file_sha":"n","lines_added":2,"lines_removed":2},{"path":"b.txt","action":"created","new_file_sha":"m","lines_added":5}]}}});
        let evs = p.on_notification(
            "item/completed",
            &json!({"thread_id":"T","turn_id":"U","item":item}),
        );
        assert_eq!(
            kinds(&evs),
            [
                "tool_started",
                "tool_completed",
                "file_changed",
                "file_changed"
            ]
        );
        let Event::FileChanged(fc) = &evs[3] else {
            panic!()
        };
        assert_eq!(
            (
                fc.path.as_str(),
                fc.action.as_str(),
                fc.workspace_revision.as_str()
            ),
            ("b.txt", "created", "r2")
        );
        assert_eq!(fc.old_file_sha, "");
        assert_eq!((fc.lines_added, fc.lines_removed), (5, 0));
        let Event::FileChanged(fc) = &evs[2] else {
            panic!()
        };
        assert_eq!((fc.lines_added, fc.lines_removed), (2, 2));
    }

    #[test]
    fn message_buffer_follows_turns() {
        let mut p = Projector::new("T");
        p.on_notification("turn/started", &json!({"thread_id":"T","turn":{"id":"U1"}}));
        p.on_notification(
            "item/agentMessage/delta",
            &json!({"thread_id":"T","turn_id":"U1","item_id":"x","delta":"ab"}),
        );
        p.on_notification(
            "item/agentMessage/delta",
            &json!({"thread_id":"T","turn_id":"OTHER","item_id":"x","delta":"zz"}),
        );
        assert_eq!(p.message, "ab");
        p.on_notification(
            "turn/completed",
            &json!({"thread_id":"T","turn":{"id":"U1"},"content":"final","trace_path":"/t.jsonl"}),
        );
        assert_eq!(
            (p.message.as_str(), p.trace_path.as_str()),
            ("final", "/t.jsonl")
        );
        p.on_notification("turn/started", &json!({"thread_id":"T","turn":{"id":"U2"}}));
        assert_eq!(p.message, "");
        p.suppress_interrupted = true;
        let evs = p.on_notification(
            "turn/error",
            &json!({"thread_id":"T","turn_id":"U2","error":"x","turn":{"status":"interrupted"}}),
        );
        assert!(evs.is_empty());
        let evs = p.on_notification("turn/error", &json!({"thread_id":"T","turn_id":"U2","error":"boom","category":"auth","turn":{"status":"failed"}}));
        assert_eq!(kinds(&evs), ["turn_failed"]);
    }
}
