//! The client terminals an ACP agent may use (`terminal/create`, `terminal/output`,
//! `terminal/wait_for_exit`, `terminal/kill`, `terminal/release`; ACP v1
//! "Terminals", spec `engines.md` §1.6), served over [`crate::tools::terminal`]: each
//! command runs in the conversation's sandbox exactly as the `bash` tool runs it. The
//! answers that wait (`wait_for_exit`, `kill`, `release`) are sent from a helper
//! thread, so the turn loop keeps reading the agent's updates meanwhile. The turn
//! releases (and kills) every terminal when it ends.

use crate::engine::codex::rpc::Peer;
use crate::engine::TurnRequest;
use crate::tools::terminal::{ExitStatus, Terminal, TerminalSpec, Terminals};
use crate::tools::ToolContext;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;

/// The tool context of a turn's terminals: the built-in engine's `bash` context.
pub(super) fn tool_context(req: &TurnRequest) -> ToolContext {
    ToolContext {
        workspace_root: req.workspace_root.clone(),
        cwd: req.cwd.clone(),
        permission_mode: req.permission_mode,
        spill_dir: req.home.join("spill").join(&req.thread_id),
        default_timeout_ms: req.limits.bash_timeout_ms,
        output_cap_bytes: req.limits.output_cap_bytes,
        temp_dir: req.home.join("tmp").join(&req.thread_id),
        sandbox: req.limits.sandbox.clone(),
        background: None,
        max_background: 0,
    }
}

/// `{exitCode, signal}` of `e` (ACP `TerminalExitStatus`).
pub(super) fn exit_json(e: &ExitStatus) -> Value {
    json!({"exitCode": e.exit_code, "signal": e.signal})
}

/// The `terminal/create` params as a [`TerminalSpec`].
fn spec_of(p: &Value) -> Result<TerminalSpec, String> {
    let command = p
        .get("command")
        .and_then(Value::as_str)
        .ok_or("missing command")?
        .to_owned();
    let args = match p.get("args") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned).ok_or("args must be strings"))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("args must be an array of strings".into()),
    };
    let env = match p.get("env") {
        None | Some(Value::Null) => vec![],
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| {
                let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
                s("name")
                    .zip(s("value"))
                    .ok_or("env entries are {name, value}")
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("env must be an array".into()),
    };
    Ok(TerminalSpec {
        command,
        args,
        env,
        cwd: p.get("cwd").and_then(Value::as_str).map(str::to_owned),
        output_byte_limit: p.get("outputByteLimit").and_then(Value::as_u64),
    })
}

/// A turn's terminals: the conversation's table, the turn's tool context and every
/// terminal the turn created (kept after release, for the tool items that show them).
pub(super) struct TurnTerminals {
    pub table: Arc<Terminals>,
    pub ctx: ToolContext,
    pub created: HashMap<String, Arc<Terminal>>,
}

impl TurnTerminals {
    /// Serves one `terminal/*` request `id` of the agent on `peer`.
    pub fn serve(&mut self, peer: &Arc<Peer>, id: Value, method: &str, p: &Value) {
        let tid = p.get("terminalId").and_then(Value::as_str).unwrap_or("");
        let found = || self.table.get(tid);
        let result = match method {
            "terminal/create" => spec_of(p)
                .map_err(|e| (-32602, e))
                .and_then(|spec| self.table.create(&spec, &self.ctx).map_err(|e| (-32603, e)))
                .map(|t| {
                    self.created.insert(t.id().to_owned(), t.clone());
                    json!({"terminalId": t.id()})
                }),
            "terminal/output" => found().map_err(|e| (-32602, e)).map(|t| {
                let s = t.snapshot();
                let mut r = json!({"output": s.output, "truncated": s.truncated});
                if let Some(e) = &s.exit {
                    r["exitStatus"] = exit_json(e);
                }
                r
            }),
            "terminal/wait_for_exit" | "terminal/kill" | "terminal/release" => {
                let t = if method == "terminal/release" {
                    self.table.release(tid)
                } else {
                    found()
                };
                match t {
                    Ok(t) => return later(peer, id, method, t),
                    Err(e) => Err((-32602, e)),
                }
            }
            other => Err((-32601, format!("unsupported engine request: {other}"))),
        };
        match result {
            Ok(v) => peer.respond(&id, v),
            Err((code, m)) => peer.respond_error(&id, code, &m),
        }
    }
}

/// Answers a waiting request from a helper thread: `wait_for_exit` with the exit
/// status, `kill` and `release` once the command ended.
fn later(peer: &Arc<Peer>, id: Value, method: &str, t: Arc<Terminal>) {
    let peer2 = peer.clone();
    let id2 = id.clone();
    let wait = method == "terminal/wait_for_exit";
    let spawned = crate::util::spawn("acp-terminal".into(), move || {
        if wait {
            let e = t.wait(None).unwrap_or(ExitStatus {
                exit_code: None,
                signal: None,
            });
            peer2.respond(&id2, exit_json(&e));
        } else {
            t.kill();
            peer2.respond(&id2, json!({}));
        }
    });
    if let Err(e) = spawned {
        peer.respond_error(&id, -32603, &format!("cannot start a helper thread: {e}"));
    }
}

/// The terminal ids a `tool_call` / `tool_call_update` embeds (`content[]` of type
/// `terminal`).
pub(super) fn embedded(u: &Value) -> impl Iterator<Item = &str> {
    u.get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|c| c.get("type").and_then(Value::as_str) == Some("terminal"))
        .filter_map(|c| c.get("terminalId").and_then(Value::as_str))
}

/// The `exec` arguments of a tool call that shows terminal `t`.
pub(super) fn exec_args(t: &Terminal, title: Option<&str>) -> String {
    json!({
        "command": t.command(),
        "cwd": t.cwd(),
        "terminal_id": t.id(),
        "title": title,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_params_are_checked() {
        let s = spec_of(
            &json!({"sessionId": "s", "command": "echo", "args": ["a b"],
            "env": [{"name": "X", "value": "1"}], "cwd": "/w", "outputByteLimit": 10}),
        )
        .unwrap();
        assert_eq!(s.command_line(), "echo 'a b'");
        assert_eq!(s.env, vec![("X".to_owned(), "1".to_owned())]);
        assert_eq!(s.output_byte_limit, Some(10));
        assert!(spec_of(&json!({"args": []})).is_err());
        assert!(spec_of(&json!({"command": "x", "args": [1]})).is_err());
        assert!(spec_of(&json!({"command": "x", "env": [{"name": "X"}]})).is_err());
    }
}
