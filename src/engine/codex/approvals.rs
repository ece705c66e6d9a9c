//! Server requests of a Codex turn (spec `engines.md` §1.4, §1.10): command, file and
//! permission approvals and user questions become host requests; the host's answers go
//! back as native responses. Modes that never ask decline without asking.

use super::projection::TurnMap;
use super::rpc::Peer;
use super::CodexEngine;
use crate::engine::{Answer, ApprovalDecision, ApprovalRequest, EngineEvent, Question};
use crate::tools::PermissionMode;
use serde_json::{json, Value};

impl CodexEngine {
    pub(super) fn server_request(&mut self, map: &mut TurnMap, id: Value, method: &str, p: &Value) {
        let request_id = format!("codex-{}-{}", map.thread_id, id);
        let s = |k: &str| p.get(k).and_then(Value::as_str).map(str::to_owned);
        match method {
            "item/commandExecution/requestApproval"
            | "item/fileChange/requestApproval"
            | "item/permissions/requestApproval" => {
                let kind = match method {
                    "item/commandExecution/requestApproval" => "command_execution",
                    "item/fileChange/requestApproval" => "file_change",
                    _ => "permissions",
                };
                let command = match p.get("command") {
                    Some(Value::String(c)) => Some(c.clone()),
                    Some(Value::Array(a)) => Some(
                        a.iter()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    _ => None,
                };
                // Modes that never ask (read_only, unconfined) have approvalPolicy never;
                // a request anyway is declined without asking.
                if map.mode != PermissionMode::Standard {
                    return answer_approval(&map.peer, &id, kind, ApprovalDecision::Decline, p);
                }
                map.open_requests
                    .insert(request_id.clone(), (id, kind.to_owned()));
                map.sink.emit(EngineEvent::Approval {
                    request_id,
                    request: ApprovalRequest {
                        kind: kind.into(),
                        item_id: s("itemId").unwrap_or_default(),
                        command,
                        cwd: s("cwd"),
                        file_path: s("filePath"),
                        reason: s("reason"),
                    },
                });
            }
            "item/tool/requestUserInput" => {
                let qs: Vec<&Value> = p
                    .get("questions")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().collect())
                    .unwrap_or_default();
                if qs
                    .iter()
                    .any(|q| q.get("isSecret").and_then(Value::as_bool) == Some(true))
                {
                    // Secret input is not supported: "no answer".
                    map.peer.respond(&id, json!({"answers": {}}));
                    return;
                }
                let questions = qs
                    .iter()
                    .map(|q| Question {
                        id: q.get("id").and_then(Value::as_str).unwrap_or("").to_owned(),
                        header: q
                            .get("header")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        question: q
                            .get("question")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        is_other: q.get("isOther").and_then(Value::as_bool).unwrap_or(false),
                        options: q
                            .get("options")
                            .and_then(Value::as_array)
                            .into_iter()
                            .flatten()
                            .map(|o| {
                                (
                                    o.get("label")
                                        .and_then(Value::as_str)
                                        .unwrap_or("")
                                        .to_owned(),
                                    o.get("description")
                                        .and_then(Value::as_str)
                                        .unwrap_or("")
                                        .to_owned(),
                                )
                            })
                            .collect(),
                    })
                    .collect();
                map.open_requests
                    .insert(request_id.clone(), (id, "question".into()));
                map.sink.emit(EngineEvent::Question {
                    request_id,
                    call_id: s("itemId").unwrap_or_default(),
                    questions,
                    blocking: p.get("isBlocking").and_then(Value::as_bool) != Some(false),
                });
            }
            other => {
                map.peer
                    .respond_error(&id, -32601, &format!("no handler registered for {other}"))
            }
        }
    }

    pub(super) fn answer(&mut self, map: &mut TurnMap, request_id: &str, answer: Answer) {
        let Some((id, kind)) = map.open_requests.remove(request_id) else {
            return;
        };
        match answer {
            Answer::Question(answers) => {
                let mut out = serde_json::Map::new();
                for a in answers.unwrap_or_default() {
                    let mut vals = a.selected.clone();
                    if let Some(c) = a.custom.filter(|c| !c.trim().is_empty()) {
                        vals.push(c);
                    }
                    out.insert(a.id, json!({"answers": vals}));
                }
                map.peer.respond(&id, json!({"answers": out}));
            }
            Answer::Approval(d) => answer_approval(&map.peer, &id, &kind, d, &Value::Null),
        }
    }
}

fn answer_approval(peer: &Peer, id: &Value, kind: &str, d: ApprovalDecision, p: &Value) {
    if kind == "permissions" {
        let accepted = matches!(
            d,
            ApprovalDecision::Accept | ApprovalDecision::AcceptForSession
        );
        let body = if accepted {
            json!({"permissions": p.get("permissions").cloned().unwrap_or(json!({})),
                   "scope": if d == ApprovalDecision::AcceptForSession { "session" } else { "turn" }})
        } else {
            json!({"permissions": {}, "scope": "turn"})
        };
        return peer.respond(id, body);
    }
    let decision = match d {
        ApprovalDecision::Accept => "accept",
        ApprovalDecision::AcceptForSession => "acceptForSession",
        ApprovalDecision::Decline => "decline",
        ApprovalDecision::Cancel => "cancel",
    };
    peer.respond(id, json!({"decision": decision}));
}
