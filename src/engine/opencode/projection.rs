//! The projection of an OpenCode turn's native events onto engine events (spec
//! `engines.md` §1.7): only the assistant messages answering our prompt are projected
//! (same session, `parentID` = our message id). Text and reasoning parts stream as the
//! suffix of what was shown (a lagging snapshot is ignored, a rewrite of the open text
//! replaces it); tool parts become tool calls (`pending` → started, input known →
//! announced and recorded, `metadata.output` → output, `completed` / `error` → ended);
//! each new assistant message is a new step; usage is each message's `tokens`, emitted
//! as it grows. Permission requests (`permission.asked`) become user questions (Allow /
//! Deny; accepted without asking in `unconfined`) answered with a one-time `once` or
//! `reject`, never `always`: approvals do not become native rules. Native questions
//! (`question.asked`, OpenCode's `question` tool) become user questions too; their
//! answer is the chosen labels per question, no answer rejects.

use super::server::{segment, Server};
use crate::engine::{Answer, EngineEvent, EventSink, Question};
use crate::provider::Usage;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

const ALLOW: &str = "Allow";
const DENY: &str = "Deny";

/// A tool call of the turn.
#[derive(Default)]
struct Call {
    /// Our tool name.
    name: String,
    /// Whether its complete input was announced.
    ready: bool,
    /// Bytes of `metadata.output` already sent.
    shown: usize,
    /// Whether it ended.
    ended: bool,
}

/// The per-turn state of the event mapping.
pub(super) struct TurnMap<'a> {
    sink: &'a EventSink<'a>,
    server: &'a Server,
    session: String,
    user_id: String,
    root: PathBuf,
    unconfined: bool,
    /// Owned assistant messages, in arrival order, with the usage emitted for each and
    /// whether their step ended.
    messages: Vec<(String, Usage, bool)>,
    /// Text / reasoning parts: id → (text shown, whether reasoning).
    texts: HashMap<String, (String, bool)>,
    /// The part whose text is the open message, and the open reasoning part.
    open_text: Option<String>,
    open_reasoning: Option<String>,
    calls: HashMap<String, Call>,
    /// Open permission questions: our request id → (native permission id, call id).
    open: HashMap<String, (String, String)>,
    /// Calls whose permission the user refused.
    denied: HashSet<String>,
    /// Open native questions: our request id → (native question id, question count).
    asked: HashMap<String, (String, usize)>,
}

/// The text of an OpenCode error object (`{name, data: {message}}`).
pub(super) fn error_text(e: &Value) -> String {
    let name = e.get("name").and_then(Value::as_str).unwrap_or("error");
    match e.pointer("/data/message").and_then(Value::as_str) {
        Some(m) if !m.is_empty() => format!("OpenCode {name}: {}", crate::util::clip(m, 2000)),
        _ => format!("OpenCode {name}"),
    }
}

impl<'a> TurnMap<'a> {
    pub(super) fn new(
        sink: &'a EventSink<'a>,
        server: &'a Server,
        session: &str,
        user_id: &str,
        root: &Path,
        unconfined: bool,
    ) -> Self {
        TurnMap {
            sink,
            server,
            session: session.to_owned(),
            user_id: user_id.to_owned(),
            root: root.to_path_buf(),
            unconfined,
            messages: vec![],
            texts: HashMap::new(),
            open_text: None,
            open_reasoning: None,
            calls: HashMap::new(),
            open: HashMap::new(),
            denied: HashSet::new(),
            asked: HashMap::new(),
        }
    }

    fn emit(&self, ev: EngineEvent) {
        self.sink.emit(ev);
    }

    fn owns(&self, info: &Value) -> bool {
        let s = |k: &str| info.get(k).and_then(Value::as_str).unwrap_or("");
        !s("id").is_empty()
            && s("sessionID") == self.session
            && s("role") == "assistant"
            && s("parentID") == self.user_id
    }

    fn known(&self, message_id: &str) -> bool {
        self.messages.iter().any(|(id, _, _)| id == message_id)
    }

    /// Maps one native event (the payload of an SSE event). `Err` = the turn failed.
    pub(super) fn event(&mut self, ev: &Value) -> Result<(), String> {
        let props = ev.get("properties").unwrap_or(&Value::Null);
        match ev.get("type").and_then(Value::as_str).unwrap_or("") {
            "message.updated" => {
                if let Some(info) = props.get("info") {
                    self.message(info, &[])?;
                }
            }
            "message.part.updated" => {
                if let Some(part) = props.get("part") {
                    self.part(part);
                }
            }
            "message.part.delta" => self.delta(props),
            // Only an abort of ours makes a `MessageAbortedError`: this turn's own is
            // ended by `turn::drive`, and one that reached this turn's prompt ends it
            // through the prompt's answer; one reported late for an earlier, interrupted
            // turn must not fail this one.
            "session.error"
                if props.pointer("/error/name").and_then(Value::as_str)
                    == Some("MessageAbortedError") =>
            {
                log::info!("OpenCode reported an aborted message; an earlier turn's interrupt");
            }
            "session.error" => {
                return Err(match props.get("error") {
                    Some(e) if !e.is_null() => error_text(e),
                    _ => "OpenCode reported a session error".into(),
                })
            }
            "permission.asked" => self.permission(props),
            "question.asked" => self.question(props),
            "server.instance.disposed" => {
                return Err("OpenCode disposed the active workspace".into())
            }
            _ => {}
        }
        Ok(())
    }

    /// A message snapshot (`info` plus, from the message list, its `parts`).
    pub(super) fn message(&mut self, info: &Value, parts: &[Value]) -> Result<(), String> {
        if !self.owns(info) {
            return Ok(());
        }
        let id = info
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if let Some(e) = info.get("error").filter(|e| !e.is_null()) {
            return Err(error_text(e));
        }
        if !self.known(&id) {
            if !self.messages.is_empty() {
                self.close_reasoning();
                self.close_text(false);
                self.emit(EngineEvent::Step);
            }
            self.messages.push((id.clone(), Usage::default(), false));
        }
        self.usage(&id, info.get("tokens"));
        for p in parts {
            self.part(p);
        }
        let finish = info.get("finish").and_then(Value::as_str).unwrap_or("");
        let completed = info
            .pointer("/time/completed")
            .is_some_and(|t| !t.is_null());
        let Some(entry) = self.messages.iter_mut().find(|(m, _, _)| *m == id) else {
            return Ok(());
        };
        if completed && !finish.is_empty() && !entry.2 {
            entry.2 = true;
            self.close_reasoning();
            self.emit(EngineEvent::StepEnd {
                stop_reason: Some(finish.to_owned()),
                truncated: finish == "length",
                has_calls: finish == "tool-calls",
            });
        }
        Ok(())
    }

    /// The message's usage, emitted as it grows (OpenCode's `output` excludes
    /// reasoning; ours includes it).
    fn usage(&mut self, id: &str, tokens: Option<&Value>) {
        let Some(t) = tokens else { return };
        let n = |p: &str| {
            t.pointer(p)
                .and_then(Value::as_f64)
                .filter(|v| v.is_finite() && *v > 0.0)
                .map_or(0, |v| v as u64)
        };
        let total = Usage {
            input_tokens: n("/input"),
            output_tokens: n("/output") + n("/reasoning"),
            cache_read_tokens: n("/cache/read"),
            cache_creation_tokens: n("/cache/write"),
            reasoning_tokens: n("/reasoning"),
        };
        let Some(entry) = self.messages.iter_mut().find(|(m, _, _)| m == id) else {
            return;
        };
        let seen = &mut entry.1;
        let add = Usage {
            input_tokens: total.input_tokens.saturating_sub(seen.input_tokens),
            output_tokens: total.output_tokens.saturating_sub(seen.output_tokens),
            cache_read_tokens: total
                .cache_read_tokens
                .saturating_sub(seen.cache_read_tokens),
            cache_creation_tokens: total
                .cache_creation_tokens
                .saturating_sub(seen.cache_creation_tokens),
            reasoning_tokens: total.reasoning_tokens.saturating_sub(seen.reasoning_tokens),
        };
        if add == Usage::default() {
            return;
        }
        seen.input_tokens = seen.input_tokens.max(total.input_tokens);
        seen.output_tokens = seen.output_tokens.max(total.output_tokens);
        seen.cache_read_tokens = seen.cache_read_tokens.max(total.cache_read_tokens);
        seen.cache_creation_tokens = seen.cache_creation_tokens.max(total.cache_creation_tokens);
        seen.reasoning_tokens = seen.reasoning_tokens.max(total.reasoning_tokens);
        self.emit(EngineEvent::Usage(add));
    }

    fn delta(&mut self, props: &Value) {
        let s = |k: &str| props.get(k).and_then(Value::as_str).unwrap_or("");
        if s("sessionID") != self.session || s("field") != "text" || !self.known(s("messageID")) {
            return;
        }
        let Some((shown, reasoning)) = self.texts.get(s("partID")) else {
            return;
        };
        let (text, reasoning) = (format!("{shown}{}", s("delta")), *reasoning);
        self.text(s("partID"), &text, reasoning);
    }

    /// A part snapshot.
    fn part(&mut self, part: &Value) {
        let s = |k: &str| part.get(k).and_then(Value::as_str).unwrap_or("");
        if s("id").is_empty() || s("sessionID") != self.session || !self.known(s("messageID")) {
            return;
        }
        match s("type") {
            "text" => self.text(s("id"), s("text"), false),
            "reasoning" => self.text(s("id"), s("text"), true),
            "tool" => self.tool(part),
            _ => {}
        }
    }

    fn close_text(&mut self, final_answer: bool) {
        if self.open_text.take().is_some() {
            self.emit(EngineEvent::MessageDone { final_answer });
        }
    }

    fn close_reasoning(&mut self) {
        if self.open_reasoning.take().is_some() {
            self.emit(EngineEvent::ThinkingDone {
                text: None,
                detail: None,
            });
        }
    }

    /// The text of part `id` is now `text`: its new suffix is shown.
    fn text(&mut self, id: &str, text: &str, reasoning: bool) {
        let shown = self.texts.get(id).map(|t| t.0.clone()).unwrap_or_default();
        if shown.starts_with(text) {
            // A snapshot lagging behind what streamed (or an empty new part).
            self.texts
                .entry(id.to_owned())
                .or_insert_with(|| (String::new(), reasoning));
            return;
        }
        let open = if reasoning {
            &self.open_reasoning
        } else {
            &self.open_text
        };
        let is_open = open.as_deref() == Some(id);
        if !is_open {
            if reasoning {
                self.close_reasoning();
            } else {
                self.close_reasoning();
                self.close_text(false);
            }
        }
        let ev = match text.strip_prefix(shown.as_str()) {
            Some(suffix) if reasoning => EngineEvent::ThinkingDelta(suffix.to_owned()),
            Some(suffix) => EngineEvent::ContentDelta(suffix.to_owned()),
            None if reasoning => EngineEvent::ThinkingReplace(text.to_owned()),
            None => EngineEvent::ContentReplace(text.to_owned()),
        };
        if reasoning {
            self.open_reasoning = Some(id.to_owned());
        } else {
            self.open_text = Some(id.to_owned());
        }
        self.texts
            .insert(id.to_owned(), (text.to_owned(), reasoning));
        self.emit(ev);
    }

    fn tool(&mut self, part: &Value) {
        let call_id = part
            .get("callID")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if call_id.is_empty() || call_id.len() > 200 {
            return;
        }
        let native = part.get("tool").and_then(Value::as_str).unwrap_or("tool");
        let state = part.get("state").unwrap_or(&Value::Null);
        let status = state.get("status").and_then(Value::as_str).unwrap_or("");
        if self.calls.get(&call_id).is_some_and(|c| c.ended) {
            return;
        }
        if !self.calls.contains_key(&call_id) {
            self.close_reasoning();
            self.open_text = None;
            let name = tool_name(native).to_owned();
            self.calls.insert(
                call_id.clone(),
                Call {
                    name: name.clone(),
                    ..Default::default()
                },
            );
            self.emit(EngineEvent::ToolStart {
                call_id: call_id.clone(),
                name,
                arguments: None,
            });
        }
        let input = state
            .get("input")
            .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()));
        if status != "pending" {
            self.ready(&call_id, input.cloned().unwrap_or(json!({})));
        }
        let Some(call) = self.calls.get_mut(&call_id) else {
            return;
        };
        if let Some(out) = state.pointer("/metadata/output").and_then(Value::as_str) {
            if out.len() > call.shown && out.is_char_boundary(call.shown) {
                let text = out[call.shown..].to_owned();
                call.shown = out.len();
                self.emit(EngineEvent::ToolOutput {
                    call_id: call_id.clone(),
                    stream: None,
                    text,
                });
            }
        }
        match status {
            "completed" => {
                let output = state
                    .get("output")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned();
                let detail = self.detail(&call_id, input, state);
                self.end(&call_id, Some(output), detail, None);
            }
            "error" => {
                let err = state
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("the tool failed")
                    .to_owned();
                self.end(&call_id, Some(err.clone()), None, Some(err));
            }
            _ => {}
        }
    }

    /// The call's complete input: announced (with `path` relative to the workspace for
    /// file tools) and recorded by the host.
    fn ready(&mut self, call_id: &str, mut input: Value) {
        let Some(call) = self.calls.get_mut(call_id) else {
            return;
        };
        if call.ready {
            return;
        }
        call.ready = true;
        let name = call.name.clone();
        let path = input
            .get("filePath")
            .and_then(Value::as_str)
            .map(|p| self.display(p));
        if let (Some(obj), Some(p)) = (input.as_object_mut(), path) {
            obj.insert("path".into(), json!(p));
        }
        if name == "todowrite" {
            let todos: Vec<Value> = input
                .get("todos")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .map(|t| json!({"content": t.get("content"), "status": t.get("status")}))
                .collect();
            self.emit(EngineEvent::Todo(json!({"todos": todos})));
        }
        self.emit(EngineEvent::ToolArgs {
            call_id: call_id.to_owned(),
            name,
            arguments: input.to_string(),
        });
        let _ = self.sink.call(|reply| EngineEvent::ToolReady {
            call_id: call_id.to_owned(),
            at_most_once: false,
            reply,
        });
    }

    fn end(
        &mut self,
        call_id: &str,
        output: Option<String>,
        detail: Option<Value>,
        error: Option<String>,
    ) {
        if let Some(c) = self.calls.get_mut(call_id) {
            c.ended = true;
        }
        let is_error = error.is_some();
        self.emit(EngineEvent::ToolEnd {
            call_id: call_id.to_owned(),
            output,
            detail,
            is_error,
            permission_denied: is_error && self.denied.contains(call_id),
            error,
        });
    }

    /// A file tool's result as our file tools report it (`{path, action}`); else the
    /// native metadata.
    fn detail(&self, call_id: &str, input: Option<&Value>, state: &Value) -> Option<Value> {
        let name = self
            .calls
            .get(call_id)
            .map(|c| c.name.as_str())
            .unwrap_or("");
        if matches!(name, "write_file" | "edit_file") {
            let path = input?.get("filePath").and_then(Value::as_str)?;
            let created = state.pointer("/metadata/exists").and_then(Value::as_bool) == Some(false);
            return Some(json!({
                "path": self.display(path),
                "action": if created { "created" } else { "modified" },
            }));
        }
        state.get("metadata").cloned()
    }

    fn display(&self, p: &str) -> String {
        match Path::new(p).strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
            _ => p.to_owned(),
        }
    }

    /// A permission request of our session: accepted at once in `unconfined`, else a
    /// question to the user.
    fn permission(&mut self, props: &Value) {
        let s = |k: &str| props.get(k).and_then(Value::as_str).unwrap_or("");
        let native = s("id").to_owned();
        if native.is_empty() || native.len() > 200 {
            return;
        }
        // Asking the user (the `question` tool) needs no permission of its own.
        if self.unconfined || s("permission") == "question" {
            return self.reply(&native, "once");
        }
        let call_id = props
            .pointer("/tool/callID")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let kind = s("permission").to_owned();
        let what = props
            .pointer("/metadata/command")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                props
                    .pointer("/metadata/filepath")
                    .or_else(|| props.pointer("/metadata/filePath"))
                    .and_then(Value::as_str)
                    .map(|p| self.display(p))
            })
            .unwrap_or_else(|| {
                props
                    .get("patterns")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            });
        let question = if what.is_empty() {
            format!("Allow OpenCode to use {kind}?")
        } else {
            format!(
                "Allow OpenCode to use {kind}: {}?",
                crate::util::clip(&what, 300)
            )
        };
        let request_id = format!("opencode-{native}");
        self.open
            .insert(request_id.clone(), (native, call_id.clone()));
        self.emit(EngineEvent::Question {
            request_id,
            call_id,
            questions: vec![Question {
                id: "permission".into(),
                header: "Permission".into(),
                question,
                is_other: false,
                options: vec![
                    (ALLOW.into(), "Allow it this once".into()),
                    (DENY.into(), "Refuse it; OpenCode is told so".into()),
                ],
            }],
            blocking: true,
        });
    }

    /// A native question (OpenCode's `question` tool): its questions go to the user;
    /// the answer goes back as `POST /question/<id>/reply {answers}`.
    fn question(&mut self, props: &Value) {
        let native = props
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        if native.is_empty() || native.len() > 200 {
            return;
        }
        let questions = Question::list_from(props);
        let call_id = props
            .pointer("/tool/callID")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let request_id = format!("opencode-{native}");
        self.asked
            .insert(request_id.clone(), (native, questions.len()));
        self.emit(EngineEvent::Question {
            request_id,
            call_id,
            questions,
            blocking: true,
        });
    }

    fn reject_question(&self, native: &str) {
        let path = format!("/question/{}/reject", segment(native));
        if let Err(e) = self.server.call("POST", &path, None, &self.root) {
            log::warn!("{e}");
        }
    }

    fn reply(&self, native: &str, reply: &str) {
        let path = format!("/permission/{}/reply", segment(native));
        if let Err(e) = self
            .server
            .call("POST", &path, Some(&json!({"reply": reply})), &self.root)
        {
            log::warn!("{e}");
        }
    }

    /// The user's answer to an open permission question: `Allow` → `once`; anything
    /// else, or no answer → `reject`.
    pub(super) fn answer(&mut self, request_id: &str, answer: Answer) {
        if let Some((native, count)) = self.asked.remove(request_id) {
            let Answer::Question(Some(given)) = answer else {
                return self.reject_question(&native);
            };
            // One list of chosen labels (plus free text) per question, in order.
            let answers: Vec<Vec<String>> = (0..count)
                .map(|i| {
                    let id = format!("q{i}");
                    given
                        .iter()
                        .filter(|a| a.id == id)
                        .flat_map(|a| {
                            let custom = a.custom.clone().filter(|c| !c.trim().is_empty());
                            a.selected.iter().cloned().chain(custom)
                        })
                        .collect()
                })
                .collect();
            let path = format!("/question/{}/reply", segment(&native));
            let body = json!({"answers": answers});
            if let Err(e) = self.server.call("POST", &path, Some(&body), &self.root) {
                log::warn!("{e}");
            }
            return;
        }
        let Some((native, call_id)) = self.open.remove(request_id) else {
            return;
        };
        let allowed = match answer {
            Answer::Question(Some(a)) => a
                .iter()
                .any(|q| q.id == "permission" && q.selected.iter().any(|s| s == ALLOW)),
            Answer::Approval(d) => matches!(
                d,
                crate::engine::ApprovalDecision::Accept
                    | crate::engine::ApprovalDecision::AcceptForSession
            ),
            Answer::Question(None) => false,
        };
        if !allowed {
            self.denied.insert(call_id);
        }
        self.reply(&native, if allowed { "once" } else { "reject" });
    }

    /// Every open question is revoked and its permission rejected (interrupt, turn
    /// end).
    pub(super) fn revoke_all(&mut self) {
        for (k, (native, _)) in std::mem::take(&mut self.open) {
            self.reply(&native, "reject");
            self.emit(EngineEvent::Revoked { request_id: k });
        }
        for (k, (native, _)) in std::mem::take(&mut self.asked) {
            self.reject_question(&native);
            self.emit(EngineEvent::Revoked { request_id: k });
        }
    }

    /// Whether the user refused a permission this turn (OpenCode then ends its loop).
    pub(super) fn refused(&self) -> bool {
        !self.denied.is_empty()
    }

    /// The turn completed: calls that never ended fail, the open message is the answer.
    pub(super) fn complete(&mut self) {
        let open: Vec<String> = self
            .calls
            .iter()
            .filter(|(_, c)| !c.ended)
            .map(|(k, _)| k.clone())
            .collect();
        for id in open {
            self.end(
                &id,
                None,
                None,
                Some("the tool did not report a result".into()),
            );
        }
        self.close_reasoning();
        self.close_text(true);
    }

    /// The turn stopped (failed or interrupted): what is open closes, nothing is the
    /// answer.
    pub(super) fn stop(&mut self) {
        self.revoke_all();
        self.close_reasoning();
        self.close_text(false);
    }
}

/// OpenCode's tool names → ours where they do the same (commands, file writes and
/// edits); others keep OpenCode's name.
pub(super) fn tool_name(native: &str) -> &str {
    match native {
        "bash" => "bash",
        "write" => "write_file",
        "edit" | "multiedit" | "patch" | "apply_patch" => "edit_file",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_and_file_tools_take_our_names() {
        assert_eq!(tool_name("bash"), "bash");
        assert_eq!(tool_name("write"), "write_file");
        assert_eq!(tool_name("edit"), "edit_file");
        assert_eq!(tool_name("grep"), "grep");
    }

    #[test]
    fn error_objects_read_as_text() {
        let e = json!({"name": "APIError", "data": {"message": "boom"}});
        assert_eq!(error_text(&e), "OpenCode APIError: boom");
        assert_eq!(error_text(&json!({})), "OpenCode error");
    }
}
