//! The projection of a Codex turn's notifications onto engine events (spec
//! `engines.md` §1.4, the mapping table): assistant messages and reasoning, tool items
//! and their output, the plan, token usage, retries and the turn's end. [`TurnMap`]
//! also holds the turn's open requests and steers.

use super::failure;
use super::rpc::Peer;
use crate::engine::{EngineEvent, EventSink, Outcome, Reconnecting, SteerInput};
use crate::provider::Usage;
use crate::tools::PermissionMode;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The per-turn state of the notification mapping.
pub(super) struct TurnMap<'a> {
    pub(super) sink: &'a EventSink<'a>,
    pub(super) peer: Arc<Peer>,
    pub(super) thread_id: String,
    pub(super) turn_id: String,
    pub(super) mode: PermissionMode,
    /// Native id of the open assistant message and the text streamed into it.
    pub(super) message: Option<(String, String)>,
    /// A completed message without `phase`: held until the next item or the turn end.
    pub(super) held_message: bool,
    pub(super) reasoning: Option<String>,
    pub(super) tools: HashMap<String, String>,
    pub(super) total_tokens: u64,
    pub(super) reconnecting: bool,
    pub(super) error: Option<String>,
    /// Native request ids of open questions/approvals by our request id.
    pub(super) open_requests: HashMap<String, (Value, String)>,
    pub(super) steers: HashMap<String, SteerInput>,
}

impl TurnMap<'_> {
    pub(super) fn emit(&mut self, ev: EngineEvent) {
        if self.reconnecting && !matches!(ev, EngineEvent::Reconnecting(_)) {
            self.reconnecting = false;
            self.sink.emit(EngineEvent::Connected);
        }
        self.sink.emit(ev);
    }

    pub(super) fn release_held(&mut self) {
        if self.held_message {
            self.held_message = false;
            self.emit(EngineEvent::MessageDone {
                final_answer: false,
            });
        }
    }

    pub(super) fn close_message(&mut self) {
        if self.message.take().is_some() {
            self.emit(EngineEvent::MessageDone {
                final_answer: false,
            });
        }
    }

    /// Maps one notification of this turn. Returns the end of the turn, if it ended.
    pub(super) fn notification(&mut self, method: &str, p: &Value) -> Option<Outcome> {
        let item_id = p.get("itemId").and_then(Value::as_str).unwrap_or("");
        let delta = p.get("delta").and_then(Value::as_str).unwrap_or("");
        match method {
            "item/agentMessage/delta" => {
                if self.message.as_ref().is_some_and(|(id, _)| id != item_id) {
                    self.close_message();
                }
                self.release_held();
                let entry = self
                    .message
                    .get_or_insert_with(|| (item_id.to_owned(), String::new()));
                entry.1.push_str(delta);
                self.emit(EngineEvent::ContentDelta(delta.to_owned()));
            }
            "item/reasoning/textDelta" | "item/reasoning/summaryTextDelta" => {
                self.reasoning = Some(item_id.to_owned());
                self.emit(EngineEvent::ThinkingDelta(delta.to_owned()));
            }
            "item/reasoning/summaryPartAdded"
                if p.get("summaryIndex").and_then(Value::as_u64).unwrap_or(0) > 0 =>
            {
                self.emit(EngineEvent::ThinkingDelta("\n\n".into()));
            }
            "item/commandExecution/outputDelta" | "item/fileChange/outputDelta"
                if self.tools.contains_key(item_id) =>
            {
                self.emit(EngineEvent::ToolOutput {
                    call_id: item_id.to_owned(),
                    stream: Some("stdout".into()),
                    text: delta.to_owned(),
                });
            }
            "item/started" => self.item(p.get("item")?, false),
            "item/completed" => self.item(p.get("item")?, true),
            "turn/plan/updated" => {
                let todos: Vec<Value> = p
                    .get("plan")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|s| {
                        json!({
                            "content": s.get("step").and_then(Value::as_str).unwrap_or(""),
                            "status": match s.get("status").and_then(Value::as_str) {
                                Some("inProgress") => "in_progress",
                                Some("completed") => "completed",
                                _ => "pending",
                            },
                        })
                    })
                    .collect();
                self.emit(EngineEvent::Todo(json!({"todos": todos})));
            }
            "thread/tokenUsage/updated" => {
                self.usage(p.get("tokenUsage")?);
            }
            "error" => {
                let message = p
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("codex reported an error")
                    .to_owned();
                if p.get("willRetry").and_then(Value::as_bool) == Some(true) {
                    self.reconnecting = true;
                    let _ = self.sink.emit(EngineEvent::Reconnecting(Reconnecting {
                        attempt: 1,
                        max_attempts: 1,
                        delay_ms: 0,
                        reason: Some("network".into()),
                        message,
                        discard_step: false,
                    }));
                } else {
                    self.error = Some(message);
                }
            }
            "serverRequest/resolved" => {
                // The native side settled a request itself (e.g. the turn moved on).
                let rid = p.get("requestId").cloned().unwrap_or(Value::Null);
                let ours: Vec<String> = self
                    .open_requests
                    .iter()
                    .filter(|(_, (id, _))| *id == rid)
                    .map(|(k, _)| k.clone())
                    .collect();
                for k in ours {
                    self.open_requests.remove(&k);
                    self.sink.emit(EngineEvent::Revoked { request_id: k });
                }
            }
            "turn/completed" => {
                let turn = p.get("turn")?;
                let status = turn.get("status").and_then(Value::as_str).unwrap_or("");
                return Some(match status {
                    "completed" => {
                        if self.held_message {
                            self.held_message = false;
                            self.emit(EngineEvent::MessageDone { final_answer: true });
                        } else if self.message.take().is_some() {
                            self.emit(EngineEvent::MessageDone { final_answer: true });
                        }
                        Outcome::Completed
                    }
                    "interrupted" => Outcome::Interrupted,
                    other => {
                        let message = turn
                            .pointer("/error/message")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                            .or_else(|| self.error.clone())
                            .unwrap_or_else(|| format!("engine turn ended with status {other}"));
                        failure(message, "engine_turn_failed")
                    }
                });
            }
            _ => {}
        }
        None
    }

    fn usage(&mut self, u: &Value) -> Option<()> {
        let total = u.pointer("/total/totalTokens")?.as_u64()?;
        if total <= self.total_tokens {
            return Some(());
        }
        self.total_tokens = total;
        let last = u.get("last")?;
        let n = |k: &str| last.get(k).and_then(Value::as_u64).unwrap_or(0);
        let cached = n("cachedInputTokens");
        let write = n("cacheWriteInputTokens");
        self.emit(EngineEvent::Usage(Usage {
            input_tokens: n("inputTokens").saturating_sub(cached + write),
            output_tokens: n("outputTokens"),
            cache_read_tokens: cached,
            cache_creation_tokens: write,
            reasoning_tokens: n("reasoningOutputTokens"),
        }));
        Some(())
    }

    fn item(&mut self, item: &Value, completed: bool) {
        let ty = item.get("type").and_then(Value::as_str).unwrap_or("");
        let id = item
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let text = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        match ty {
            "agentMessage" => {
                if !completed {
                    return;
                }
                let full = text("text");
                let streamed = match &self.message {
                    Some((mid, t)) if *mid == id => Some(t.clone()),
                    _ => None,
                };
                match streamed {
                    Some(t) if t == full => {}
                    Some(_) => self.emit(EngineEvent::ContentReplace(full)),
                    None => {
                        self.close_message();
                        self.release_held();
                        self.emit(EngineEvent::ContentReplace(full));
                    }
                }
                self.message = None;
                match item.get("phase").and_then(Value::as_str) {
                    Some(phase) => self.emit(EngineEvent::MessageDone {
                        final_answer: phase == "final_answer",
                    }),
                    None => self.held_message = true,
                }
            }
            "reasoning" => {
                let join = |k: &str| {
                    item.get(k)
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().or_else(|| v.get("text")?.as_str()))
                                .collect::<Vec<_>>()
                                .join("\n\n")
                        })
                        .unwrap_or_default()
                };
                let mut t = join("summary");
                if t.is_empty() {
                    t = join("content");
                }
                if !t.is_empty() {
                    self.emit(EngineEvent::ThinkingReplace(t));
                }
                if completed {
                    self.reasoning = None;
                    self.emit(EngineEvent::ThinkingDone {
                        text: None,
                        detail: None,
                    });
                }
            }
            "commandExecution"
            | "mcpToolCall"
            | "dynamicToolCall"
            | "webSearch"
            | "fileChange"
            | "collabAgentToolCall" => {
                if !completed {
                    self.close_message();
                    self.release_held();
                    let (name, args) = tool_of(ty, item);
                    self.tools.insert(id.clone(), name.clone());
                    self.emit(EngineEvent::ToolStart {
                        call_id: id.clone(),
                        name,
                        arguments: Some(args),
                    });
                    let _ = self.sink.call(|reply| EngineEvent::ToolReady {
                        call_id: id.clone(),
                        at_most_once: false,
                        reply,
                    });
                    if ty == "collabAgentToolCall" {
                        self.agents(item);
                    }
                    return;
                }
                if !self.tools.contains_key(&id) {
                    let (name, args) = tool_of(ty, item);
                    self.tools.insert(id.clone(), name.clone());
                    self.emit(EngineEvent::ToolArgs {
                        call_id: id.clone(),
                        name,
                        arguments: args,
                    });
                }
                if ty == "collabAgentToolCall" {
                    self.agents(item);
                }
                let (output, is_error) = result_of(ty, item);
                self.emit(EngineEvent::ToolEnd {
                    call_id: id,
                    error: is_error.then(|| output.clone()),
                    output: Some(output),
                    detail: Some(item.clone()),
                    is_error,
                    permission_denied: false,
                });
            }
            "subAgentActivity" => {
                let path = text("agentPath");
                let label = path.rsplit('/').next().unwrap_or(&path).to_owned();
                self.emit(EngineEvent::AgentActivity(json!({
                    "agent_id": item.get("agentThreadId"),
                    "label": label,
                    "status": item.get("kind"),
                })));
            }
            _ => {}
        }
    }

    fn agents(&mut self, item: &Value) {
        let Some(states) = item.get("agentsStates").and_then(Value::as_object) else {
            return;
        };
        for (agent, st) in states {
            let raw = st
                .get("status")
                .and_then(Value::as_str)
                .or_else(|| st.as_str())
                .unwrap_or("");
            let status = match raw {
                "pendingInit" => "queued",
                "interrupted" => "waiting",
                "completed" | "shutdown" => "completed",
                "errored" | "notFound" => "failed",
                _ => "running",
            };
            self.emit(EngineEvent::AgentActivity(json!({
                "agent_id": agent, "label": agent, "status": status,
            })));
        }
    }
}

fn tool_of(ty: &str, item: &Value) -> (String, String) {
    let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let (name, args) = match ty {
        "commandExecution" => (
            "exec".to_owned(),
            json!({"command": item.get("command"), "cwd": item.get("cwd"),
                   "commandActions": item.get("commandActions")}),
        ),
        "mcpToolCall" => (
            format!("mcp:{}:{}", s("server"), s("tool")),
            item.get("arguments").cloned().unwrap_or(Value::Null),
        ),
        "dynamicToolCall" => {
            let ns = s("namespace");
            let name = if ns.is_empty() {
                format!("dynamic:{}", s("tool"))
            } else {
                format!("dynamic:{ns}:{}", s("tool"))
            };
            (name, item.get("arguments").cloned().unwrap_or(Value::Null))
        }
        "webSearch" => (
            "web_search".to_owned(),
            json!({"query": item.get("query"), "action": item.get("action")}),
        ),
        "fileChange" => (
            "apply_patch".to_owned(),
            json!({"changes": item.get("changes")}),
        ),
        _ => (
            format!("codex_collab_{}", s("tool")),
            json!({"prompt": item.get("prompt"), "receiverThreadIds": item.get("receiverThreadIds")}),
        ),
    };
    (name, args.to_string())
}

fn result_of(ty: &str, item: &Value) -> (String, bool) {
    let failed = item.get("status").and_then(Value::as_str) == Some("failed")
        || item.get("status").and_then(Value::as_str) == Some("declined");
    match ty {
        "commandExecution" => {
            let out = item
                .get("aggregatedOutput")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned);
            let code = item.get("exitCode").and_then(Value::as_i64);
            let failed = failed || code.is_some_and(|c| c != 0);
            (
                out.unwrap_or_else(|| format!("Exit {}", code.unwrap_or(0))),
                failed,
            )
        }
        "mcpToolCall" => match item.get("error").filter(|e| !e.is_null()) {
            Some(e) => (e.to_string(), true),
            None => (
                item.get("result")
                    .cloned()
                    .unwrap_or(Value::Null)
                    .to_string(),
                failed,
            ),
        },
        "dynamicToolCall" => (
            item.get("contentItems")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
            failed || item.get("success").and_then(Value::as_bool) == Some(false),
        ),
        "webSearch" => ("done".into(), failed),
        "fileChange" => (
            item.get("changes")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
            failed,
        ),
        _ => (
            item.get("agentsStates")
                .cloned()
                .unwrap_or(Value::Null)
                .to_string(),
            failed,
        ),
    }
}
