//! Claude Code's questions (spec `engines.md` §1.5, §1.10): with
//! `--permission-prompt-tool stdio` every tool use Claude would ask about arrives as a
//! `control_request` `can_use_tool`. Its `AskUserQuestion` tool becomes the questions it
//! asks; any other tool becomes one question "allow this?" (Allow / Deny). Both go to
//! the user through `user-question/*`; the answer returns as the `control_response`
//! (`allow` with the answers as `updatedInput.answers`, or `deny`). No answer (no
//! client, cancelled, the turn ended) denies: fail closed.

use super::projection::TurnMap;
use crate::engine::{Answer, EngineEvent, Question, QuestionAnswer};
use serde_json::{json, Value};

/// What an open question asks.
pub(super) enum Asked {
    /// `AskUserQuestion`: its input and, per our question id, the question text.
    Questions {
        input: Value,
        texts: Vec<(String, String)>,
    },
    /// A permission prompt for a tool call: its input and the call id.
    Permission { input: Value, call_id: String },
}

const ALLOW: &str = "Allow";
const DENY: &str = "Deny";

impl TurnMap<'_> {
    fn respond(&self, native_id: &str, response: Value) {
        let line = json!({"type": "control_response",
            "response": {"subtype": "success", "request_id": native_id, "response": response}});
        if let Err(e) = self
            .proc
            .write_line(&serde_json::to_vec(&line).unwrap_or_default())
        {
            log::warn!("answering claude's {native_id}: {e}");
        }
    }

    fn respond_error(&self, native_id: &str, message: &str) {
        let line = json!({"type": "control_response",
            "response": {"subtype": "error", "request_id": native_id, "error": message}});
        if let Err(e) = self
            .proc
            .write_line(&serde_json::to_vec(&line).unwrap_or_default())
        {
            log::warn!("answering claude's {native_id}: {e}");
        }
    }

    /// A control request of the child: `can_use_tool` is asked; others are refused.
    pub(super) fn control_request(&mut self, v: &Value) {
        let Some(native_id) = v
            .get("request_id")
            .and_then(Value::as_str)
            .filter(|i| !i.is_empty() && i.len() <= 200)
        else {
            return;
        };
        let r = v.get("request").unwrap_or(&Value::Null);
        let s = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let subtype = s("subtype");
        if subtype != "can_use_tool" {
            return self.respond_error(native_id, &format!("unsupported request {subtype:?}"));
        }
        let tool = s("tool_name");
        let call_id = s("tool_use_id");
        let input = r.get("input").cloned().unwrap_or(json!({}));
        let request_id = format!("claude-{native_id}");
        let (questions, asked) = if tool == "AskUserQuestion" {
            let questions = Question::list_from(&input);
            let texts = questions
                .iter()
                .map(|q| (q.id.clone(), q.question.clone()))
                .collect();
            (questions, Asked::Questions { input, texts })
        } else {
            let summary = summary(&tool, &input, &s("description"));
            let q = Question {
                id: "permission".into(),
                header: "Permission".into(),
                question: format!("Allow Claude Code to use {tool}{summary}?"),
                is_other: false,
                options: vec![
                    (ALLOW.into(), "Run it this once".into()),
                    (DENY.into(), "Refuse it; Claude is told so".into()),
                ],
            };
            (
                vec![q],
                Asked::Permission {
                    input,
                    call_id: call_id.clone(),
                },
            )
        };
        self.open
            .insert(request_id.clone(), (native_id.to_owned(), asked));
        self.emit(EngineEvent::Question {
            request_id,
            call_id,
            questions,
            blocking: true,
        });
    }

    /// The user's answer to an open question goes back as the `control_response`.
    pub(super) fn answer(&mut self, request_id: &str, answer: Answer) {
        let Some((native_id, asked)) = self.open.remove(request_id) else {
            return;
        };
        let answers: Option<Vec<QuestionAnswer>> = match answer {
            Answer::Question(a) => a,
            Answer::Approval(_) => None,
        };
        let response = match (asked, answers) {
            (Asked::Questions { mut input, texts }, Some(answers)) => {
                let mut out = serde_json::Map::new();
                for a in answers {
                    let Some((_, text)) = texts.iter().find(|(id, _)| *id == a.id) else {
                        continue;
                    };
                    let mut vals = a.selected.clone();
                    if let Some(c) = a.custom.filter(|c| !c.trim().is_empty()) {
                        vals.push(c);
                    }
                    out.insert(text.clone(), json!(vals.join(", ")));
                }
                if let Some(obj) = input.as_object_mut() {
                    obj.insert("answers".into(), Value::Object(out));
                }
                json!({"behavior": "allow", "updatedInput": input})
            }
            (Asked::Permission { input, .. }, Some(answers))
                if answers
                    .iter()
                    .any(|a| a.selected.iter().any(|s| s == ALLOW)) =>
            {
                json!({"behavior": "allow", "updatedInput": input})
            }
            (Asked::Permission { call_id, .. }, answers) => {
                self.denied.insert(call_id);
                let why = answers
                    .into_iter()
                    .flatten()
                    .filter_map(|a| a.custom)
                    .find(|c| !c.trim().is_empty());
                let message = match why {
                    Some(w) => format!("The user denied this tool use: {w}"),
                    None => "The user denied this tool use.".to_owned(),
                };
                json!({"behavior": "deny", "message": message})
            }
            (Asked::Questions { .. }, None) => {
                json!({"behavior": "deny", "message": "The user did not answer the question."})
            }
        };
        self.respond(&native_id, response);
    }

    /// Claude withdrew a request (e.g. the turn stopped): its question is revoked.
    pub(super) fn cancelled(&mut self, native_id: &str) {
        let ours: Vec<String> = self
            .open
            .iter()
            .filter(|(_, (n, _))| n == native_id)
            .map(|(k, _)| k.clone())
            .collect();
        for k in ours {
            self.open.remove(&k);
            self.emit(EngineEvent::Revoked { request_id: k });
        }
    }

    /// Every open question is revoked and denied (interrupt, turn end).
    pub(super) fn revoke_all(&mut self) {
        for (k, (native_id, _)) in std::mem::take(&mut self.open) {
            self.respond(
                &native_id,
                json!({"behavior": "deny", "message": "The turn ended.", "interrupt": true}),
            );
            self.emit(EngineEvent::Revoked { request_id: k });
        }
    }

    /// The turn is over: nothing stays open.
    pub(super) fn finish(&mut self) {
        self.revoke_all();
    }
}

/// A short description of a tool call for the permission question: the command, the
/// file, or Claude's own description.
fn summary(tool: &str, input: &Value, description: &str) -> String {
    let s = |k: &str| input.get(k).and_then(Value::as_str).unwrap_or("");
    let what = match tool {
        "Bash" => s("command"),
        _ if !s("file_path").is_empty() => s("file_path"),
        _ if !s("url").is_empty() => s("url"),
        _ => description,
    };
    if what.is_empty() {
        String::new()
    } else {
        format!(": {}", crate::util::clip(what, 300))
    }
}
