//! The model's agent tools (spec `subagents.md` §1.2): a root conversation gets
//! `spawn_agent`, `send_message` and `close_agent`; a worker gets `agent_report` only.
//! Each call runs on a helper thread of [`crate::session::client_tools`]; results are
//! JSON objects whose keys follow the spec (`action`, `agent_id`, `status`, …).

use super::{Rec, Role};
use crate::provider::chat::ToolSpec;
use crate::session::{Host, SessionMsg};
use crate::tools::ToolOutcome;
use crate::util::now_ms;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `spawn_agent`.
pub const SPAWN: &str = "spawn_agent";
/// `send_message`.
pub const SEND: &str = "send_message";
/// `close_agent`.
pub const CLOSE: &str = "close_agent";
/// `agent_report`.
pub const REPORT: &str = "agent_report";

/// Whether `name` is one of the agent tools.
pub fn is_tool(name: &str) -> bool {
    matches!(name, SPAWN | SEND | CLOSE | REPORT)
}

/// The agent tools offered to a conversation of `role`.
pub fn specs(role: &Role) -> Vec<ToolSpec> {
    match role {
        Role::None => vec![],
        Role::Worker { .. } => vec![ToolSpec {
            name: REPORT.into(),
            description: "Hand in your work as a worker agent: the outcome and a summary (plus optional lists). Call it once when you are done, then give your final answer.".into(),
            parameters: crate::util::static_json(r#"{
                "type": "object",
                "properties": {
                    "outcome": {"type": "string", "enum": ["completed", "stuck", "error", "cancelled"]},
                    "summary": {"type": "string", "description": "What you did and found."},
                    "changed_files": {"type": "array", "items": {"type": "string"}},
                    "work_done": {"type": "array", "items": {"type": "string"}},
                    "blockers": {"type": "array", "items": {"type": "string"}},
                    "risks": {"type": "array", "items": {"type": "string"}},
                    "next_steps": {"type": "array", "items": {"type": "string"}},
                    "artifacts": {"type": "array", "items": {"type": "string"}}
                },
                "required": ["outcome", "summary"]
            }"#),
        }],
        Role::Root => vec![
            ToolSpec {
                name: SPAWN.into(),
                description: "Delegate a task to a worker agent that runs in its own conversation. context \"fresh\" (default) starts it with only your prompt (make it self-contained); \"fork\" copies this conversation's history first (forks always run in the background). By default the call waits for the worker's result; run_in_background: true returns at once and the result arrives later as a <subagent_notification> message. isolation \"worktree\" runs the worker in a new git worktree.".into(),
                parameters: crate::util::static_json(r#"{
                    "type": "object",
                    "properties": {
                        "description": {"type": "string", "description": "3-5 word summary shown to the user."},
                        "prompt": {"type": "string", "description": "The task."},
                        "name": {"type": "string", "description": "Task name: lowercase letters, digits and _ (derived from the description when omitted)."},
                        "context": {"type": "string", "enum": ["fresh", "fork"]},
                        "subagent_type": {"type": "string", "enum": ["general-purpose"]},
                        "agent_profile": {"type": "string"},
                        "run_in_background": {"type": "boolean"},
                        "isolation": {"type": "string", "enum": ["worktree"]}
                    },
                    "required": ["description", "prompt"]
                }"#),
            },
            ToolSpec {
                name: SEND.into(),
                description: "Send a message to a worker (by agent id, path or task name). A running worker reads it before its next step; a finished one is revived with it.".into(),
                parameters: crate::util::static_json(r#"{
                    "type": "object",
                    "properties": {
                        "target": {"type": "string"},
                        "message": {"type": "string"},
                        "trigger_turn": {"type": "boolean", "description": "Hand the worker a new task; the answer is the worker's snapshot."}
                    },
                    "required": ["target", "message"]
                }"#),
            },
            ToolSpec {
                name: CLOSE.into(),
                description: "Stop a worker (by agent id, path or task name) and its subtree. Its result is not delivered.".into(),
                parameters: json!({
                    "type": "object",
                    "properties": {"target": {"type": "string"}},
                    "required": ["target"]
                }),
            },
        ],
    }
}

fn ok(v: Value) -> ToolOutcome {
    ToolOutcome {
        output: v.to_string(),
        is_error: false,
        permission_denied: false,
        detail: v,
    }
}

fn str_arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
}

/// Runs an agent tool call of conversation `thread_id` (role `role`); `cancel` is set
/// when the calling turn is interrupted.
pub fn run(
    shared: &Arc<Host>,
    thread_id: &str,
    role: &Role,
    name: &str,
    args: &str,
    cancel: &AtomicBool,
) -> ToolOutcome {
    let args: Value = match serde_json::from_str(args) {
        Ok(v @ Value::Object(_)) => v,
        _ => return ToolOutcome::error(format!("{name}: arguments must be a JSON object")),
    };
    match (role, name) {
        (Role::Root, SPAWN) => spawn(shared, thread_id, &args, cancel),
        (Role::Root, SEND) => send(shared, thread_id, &args),
        (Role::Root, CLOSE) => close(shared, thread_id, &args),
        (Role::Worker { .. }, REPORT) => report(shared, thread_id, &args),
        _ => ToolOutcome::error(format!("tool {name:?} is not available to this agent")),
    }
}

/// A task name: lowercase letters, digits and `_` (1–64), not `root`.
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n != "root"
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// A task name derived from a description: folded to `[a-z0-9_]`, cut to 32
/// characters, plus `_` and a short suffix.
fn derive_name(description: &str) -> String {
    let mut base = String::new();
    for c in description.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            base.push(c);
        } else if !base.ends_with('_') && !base.is_empty() {
            base.push('_');
        }
        if base.len() >= 32 {
            break;
        }
    }
    let base = base.trim_end_matches('_');
    let base = if base.is_empty() { "task" } else { base };
    let suffix = format!("{:x}", now_ms() % 0x10000);
    format!("{base}_{suffix}")
}

/// The worker of `root_id` named by `target` (id, path or task name).
fn resolve(shared: &Host, root_id: &str, target: &str) -> Option<Rec> {
    let target = target.trim();
    shared.agents.of_root(root_id).into_iter().find(|r| {
        r.id == target
            || r.agent_path == target
            || r.task_name == target
            || format!("/root/{target}") == r.agent_path
    })
}

/// The checked arguments of one `spawn_agent` call.
struct SpawnArgs<'a> {
    description: &'a str,
    prompt: &'a str,
    /// The worker starts from a copy of the root's history.
    fork: bool,
    /// `general-purpose` or `fork`.
    agent_type: &'static str,
    profile: String,
    /// The worker runs in a new git worktree.
    isolated: bool,
    background: bool,
    task_name: String,
}

/// Checks a `spawn_agent` call's arguments in order, so the first bad one names the error.
fn spawn_args(args: &Value) -> Result<SpawnArgs<'_>, String> {
    let Some(description) = str_arg(args, "description") else {
        return Err("spawn_agent: description is required".into());
    };
    let Some(prompt) = str_arg(args, "prompt") else {
        return Err("spawn_agent: prompt is required".into());
    };
    let fork = match str_arg(args, "context").unwrap_or("fresh") {
        "fresh" => false,
        "fork" => true,
        other => {
            return Err(format!(
                "spawn_agent: context {:?} is not fresh or fork",
                crate::util::clip(other, 40)
            ))
        }
    };
    let agent_type = match str_arg(args, "subagent_type") {
        None | Some("general-purpose") => {
            if fork {
                "fork"
            } else {
                "general-purpose"
            }
        }
        Some(other) => {
            return Err(format!(
                "spawn_agent: unknown subagent_type {:?} (known: general-purpose)",
                crate::util::clip(other, 40)
            ))
        }
    };
    let profile = str_arg(args, "agent_profile").unwrap_or("").to_owned();
    if profile == "default" {
        return Err("spawn_agent: agent_profile \"default\" is reserved".into());
    }
    let isolated = match str_arg(args, "isolation") {
        None | Some("inplace") => false,
        Some("worktree") => true,
        Some(other) => {
            return Err(format!(
                "spawn_agent: isolation {:?} is not supported (only \"worktree\")",
                crate::util::clip(other, 40)
            ))
        }
    };
    // Forks always run in the background (spec §1.2).
    let background = fork
        || args
            .get("run_in_background")
            .and_then(Value::as_bool)
            .unwrap_or(false);
    let task_name = match str_arg(args, "name") {
        Some(n) if valid_name(n) => n.to_owned(),
        Some(n) => {
            return Err(format!(
                "spawn_agent: name {:?} must be 1-64 lowercase letters, digits or _ (and not root)",
                crate::util::clip(n, 40)
            ))
        }
        None => derive_name(description),
    };
    Ok(SpawnArgs {
        description,
        prompt,
        fork,
        agent_type,
        profile,
        isolated,
        background,
        task_name,
    })
}

/// Checks, records and starts a worker; a foreground call then waits for its result.
fn spawn(shared: &Arc<Host>, root_id: &str, args: &Value, cancel: &AtomicBool) -> ToolOutcome {
    super::recover(shared, root_id);
    let a = match spawn_args(args) {
        Ok(a) => a,
        Err(e) => return ToolOutcome::error(e),
    };
    let agent_path = format!("/root/{}", a.task_name);
    if shared
        .agents
        .of_root(root_id)
        .iter()
        .any(|r| r.agent_path == agent_path)
    {
        return ToolOutcome::error(format!(
            "spawn_agent: agent path {agent_path} already exists; choose another name"
        ));
    }
    let max = shared.config().max_parallel();
    let has_slot = shared.agents.has_capacity(root_id, max);
    if !a.background && !has_slot {
        return ToolOutcome::error(format!(
            "spawn_agent: the max_parallel limit ({max}) of running workers is reached; spawn with run_in_background: true so the task can queue, or wait for a worker to finish"
        ));
    }
    let id = format!(
        "{}-{}",
        a.agent_type,
        crate::util::name_tail(&uuid::Uuid::now_v7().simple().to_string(), 8)
    );
    let (worktree, repo) = if a.isolated {
        match worker_worktree(shared, root_id, &id) {
            Ok((p, top)) => (Some(p), Some(top)),
            Err(e) => return ToolOutcome::error(format!("spawn_agent: {e}")),
        }
    } else {
        (None, None)
    };
    let child = match create_child(
        shared,
        root_id,
        &id,
        a.agent_type,
        &a.task_name,
        &agent_path,
        a.description,
        a.fork,
        worktree.as_deref(),
    ) {
        Ok(row) => row,
        Err(e) => return ToolOutcome::error(format!("spawn_agent: {e}")),
    };
    let rec = Rec {
        id: id.clone(),
        root_id: root_id.to_owned(),
        parent_id: root_id.to_owned(),
        agent_type: a.agent_type.into(),
        task_name: a.task_name,
        agent_profile: a.profile,
        agent_path,
        description: a.description.to_owned(),
        status: "queued".into(),
        prompt: a.prompt.to_owned(),
        isolation: if a.isolated { "worktree" } else { "inplace" }.into(),
        worktree_path: worktree.map(|p| p.to_string_lossy().into_owned()),
        repo: repo.map(|p| p.to_string_lossy().into_owned()),
        provider: child.provider.clone(),
        model: child.model.clone(),
        created_at_ms: now_ms(),
        foreground: !a.background,
        ..Default::default()
    };
    shared.agents.insert(shared, rec);
    super::drain(shared, root_id);
    if let Some(r) = shared.agents.get(&id).filter(|r| r.status == "queued") {
        super::announce(shared, &r);
    }
    if a.background {
        return background_spawned(shared, &id);
    }
    wait_for_worker(shared, &id, cancel)
}

/// A new git worktree for worker `id`, made from the root's cwd (else the workdir).
fn worker_worktree(
    shared: &Host,
    root_id: &str,
    id: &str,
) -> Result<(std::path::PathBuf, std::path::PathBuf), String> {
    let root_cwd = root_row(shared, root_id).map(|r| r.cwd).unwrap_or_default();
    let cwd = if root_cwd.is_empty() {
        shared.opts.workdir.clone()
    } else {
        std::path::PathBuf::from(root_cwd)
    };
    super::worktree::create(&shared.opts.home, &cwd, id)
}

/// The reply to a background spawn: the worker's identity now; its result comes later.
fn background_spawned(shared: &Host, id: &str) -> ToolOutcome {
    let rec = shared.agents.get(id).unwrap_or_default();
    let mut out = json!({
        "action": SPAWN,
        "agent_id": id,
        "task_name": rec.task_name,
        "agent_path": rec.agent_path,
        "status": if rec.status == "pending" { "running" } else { rec.status.as_str() },
        "isolation": rec.isolation,
        "next_steps": ["The result arrives later as a <subagent_notification> message; continue with other work or end your turn."],
    });
    if let Some(w) = &rec.worktree_path {
        out["worktree_path"] = json!(w);
    }
    ok(out)
}

/// Foreground: waits for the worker's terminal state; an interrupt of this turn stops it.
fn wait_for_worker(shared: &Arc<Host>, id: &str, cancel: &AtomicBool) -> ToolOutcome {
    let started = now_ms();
    loop {
        let Some(rec) = shared.agents.get(id) else {
            return ToolOutcome::error("spawn_agent: the worker vanished");
        };
        if super::is_terminal(&rec.status) && rec.generation_done {
            let rec = super::consume(shared, id).unwrap_or(rec);
            let mut out = json!({
                "action": SPAWN,
                "agent_id": rec.id,
                "result_id": rec.result_id,
                "task_name": rec.task_name,
                "agent_path": rec.agent_path,
                "status": rec.status,
                "isolation": rec.isolation,
                "result": rec.result,
                "result_path": rec.result_path,
                "result_bytes": rec.result_bytes,
                "result_truncated": rec.result_truncated,
                "duration_ms": now_ms() - started,
            });
            if !rec.error.is_empty() {
                out["error"] = json!(rec.error);
            }
            if let Some(w) = &rec.worktree_path {
                out["worktree_path"] = json!(w);
            }
            return ok(out);
        }
        if cancel.load(Ordering::SeqCst) || shared.is_closing() {
            super::cancel(shared, id, false, "the main agent's turn was interrupted");
            return ToolOutcome::error("spawn_agent: interrupted; the worker was stopped");
        }
        shared.agents.wait(Duration::from_millis(250));
    }
}

/// The root conversation's row, read from the store.
fn root_row(shared: &Host, root_id: &str) -> Option<wuu_store::ThreadRow> {
    let store = shared.connections.take().ok()?;
    store.get_thread(root_id).ok().flatten()
}

/// Creates the worker's child thread: the root's selection and permission mode, its
/// identity in `extra.agent`, and for a fork a copy of the root's history (the root's
/// running turn included, minus its unanswered tool calls).
#[allow(clippy::too_many_arguments)]
fn create_child(
    shared: &Arc<Host>,
    root_id: &str,
    id: &str,
    agent_type: &str,
    task_name: &str,
    agent_path: &str,
    description: &str,
    fork: bool,
    worktree: Option<&std::path::Path>,
) -> Result<wuu_store::ThreadRow, String> {
    let (root, turns) = if fork {
        let (tx, rx) = crate::util::reply::reply();
        shared
            .registry
            .dispatch(shared, root_id, SessionMsg::Snapshot { reply: tx });
        let snap = rx
            .recv_timeout(Duration::from_secs(30))
            .map_err(|_| "the main conversation did not answer".to_owned())?
            .map_err(|(_, m)| m)?;
        (snap.thread, snap.turns)
    } else {
        (
            root_row(shared, root_id).ok_or("the main conversation is not stored")?,
            vec![],
        )
    };
    if fork && turns.is_empty() {
        return Err("context \"fork\" needs a conversation with history".into());
    }
    let now = now_ms();
    let mut extra = json!({
        "agent": {
            "root_id": root_id,
            "parent_id": root_id,
            "agent_path": agent_path,
            "task_name": task_name,
            "agent_type": agent_type,
            "isolation": if worktree.is_some() { "worktree" } else { "inplace" },
        }
    });
    if let Some(w) = root.extra.get("workspace_id") {
        extra["workspace_id"] = w.clone();
    }
    let row = wuu_store::ThreadRow {
        id: id.to_owned(),
        cwd: worktree
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or(root.cwd.clone()),
        title: Some(task_name.to_owned()),
        title_revision: 0,
        preview: crate::util::preview(description, 120),
        archived: false,
        archive_reason: None,
        forked_from_id: fork.then(|| root_id.to_owned()),
        forked_from_turn_id: None,
        forked_from_item_id: None,
        created_at_ms: now,
        updated_at_ms: now,
        extra,
        damage: None,
        ..root
    };
    let mut copied = turns;
    for t in &mut copied {
        t.row.thread_id = id.to_owned();
        if t.row.status == "in_progress" {
            t.row.status = "interrupted".into();
            t.row.completed_at_ms = Some(now);
            t.items
                .retain(|i| !(i.item_type == "tool_call" && i.result.is_none()));
            for item in &mut t.items {
                if item.status.as_deref() == Some("in_progress") {
                    item.status = Some("completed".into());
                }
            }
        }
    }
    crate::session::lifecycle::insert_with_history(shared, &row, &copied).map_err(|(_, m)| m)?;
    Ok(row)
}

fn send(shared: &Arc<Host>, root_id: &str, args: &Value) -> ToolOutcome {
    super::recover(shared, root_id);
    let (Some(target), Some(message)) = (str_arg(args, "target"), str_arg(args, "message")) else {
        return ToolOutcome::error("send_message: target and message are required");
    };
    let Some(rec) = resolve(shared, root_id, target) else {
        return ToolOutcome::error(format!(
            "agent {:?} not found",
            crate::util::clip(target, 80)
        ));
    };
    let trigger = args
        .get("trigger_turn")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let envelope = json!({
        "author": "/root",
        "recipient": rec.agent_path,
        "content": message,
        "trigger_turn": trigger,
    })
    .to_string();
    match rec.status.as_str() {
        "queued" => {
            let _ = shared
                .agents
                .note(shared, &rec.id, |r| r.mailbox.push(envelope.clone()));
        }
        _ => {
            if super::is_terminal(&rec.status) {
                // Revival: the worker continues its own history with the message.
                let _ = shared.agents.note(shared, &rec.id, |r| {
                    r.cancel_requested = false;
                    r.suppress = false;
                    r.held = false;
                    r.foreground = false;
                });
            }
            super::run_on_worker(shared, &rec.id, envelope);
        }
    }
    if !trigger {
        return ok(json!({"action": SEND, "status": "sent"}));
    }
    let r = shared.agents.get(&rec.id).unwrap_or(rec);
    ok(json!({
        "action": SEND,
        "id": r.id,
        "type": r.agent_type,
        "task_name": r.task_name,
        "agent_path": r.agent_path,
        "parent_id": r.parent_id,
        "description": r.description,
        "status": r.status,
        "result": r.result,
        "error": r.error,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
    }))
}

fn close(shared: &Arc<Host>, root_id: &str, args: &Value) -> ToolOutcome {
    super::recover(shared, root_id);
    let Some(target) = str_arg(args, "target") else {
        return ToolOutcome::error("close_agent: target is required");
    };
    let Some(rec) = resolve(shared, root_id, target) else {
        return ToolOutcome::error(format!(
            "agent {:?} not found",
            crate::util::clip(target, 80)
        ));
    };
    super::cancel(shared, &rec.id, true, "closed by the main agent");
    ok(json!({"action": CLOSE, "status": "closed", "agent_id": rec.id}))
}

fn report(shared: &Arc<Host>, worker_id: &str, args: &Value) -> ToolOutcome {
    let outcome = str_arg(args, "outcome").unwrap_or("");
    if !matches!(outcome, "completed" | "stuck" | "error" | "cancelled") {
        return ToolOutcome::error(
            "agent_report: outcome must be completed, stuck, error or cancelled",
        );
    }
    if str_arg(args, "summary").is_none() {
        return ToolOutcome::error("agent_report: summary is required");
    }
    let report = args.clone();
    match shared
        .agents
        .note(shared, worker_id, |r| r.report = Some(report))
    {
        Some(_) => ok(json!({"action": REPORT, "status": "recorded"})),
        None => ToolOutcome::error("agent_report: this conversation is not a live worker"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_has_an_object_schema_with_its_required_fields() {
        let worker = Role::Worker {
            root_id: "thr_root".into(),
        };
        let all: Vec<ToolSpec> = specs(&Role::Root)
            .into_iter()
            .chain(specs(&worker))
            .collect();
        assert_eq!(all.len(), specs(&Role::Root).len() + 1);
        for s in &all {
            assert_eq!(s.parameters["type"], "object", "{}", s.name);
            let required = s.parameters["required"].as_array().expect("required");
            for r in required {
                let field = r.as_str().expect("a field name");
                assert!(
                    s.parameters["properties"].get(field).is_some(),
                    "{}: {field}",
                    s.name
                );
            }
        }
        let spawn = all.iter().find(|s| s.name == SPAWN).expect("spawn spec");
        assert_eq!(
            spawn.parameters["required"],
            json!(["description", "prompt"])
        );
    }
}
