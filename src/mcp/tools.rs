//! The configured MCP servers' tools as model tools: reading a server's tool list
//! (paged, filtered by the entry's allow and deny lists), the specs offered to the model,
//! and a call of one tool on a helper thread, bounded by `tool_timeout_ms` and refused in
//! `read_only` mode unless the server marks the tool read-only. Spec: README § "MCP
//! servers"; the result projection is [`super::project`].

use super::rpc::{self, RpcError, Transport};
use super::{project, Manager, Phase, Server, Tool, DEFAULT_TOOL_MS, MAX_PAGES};
use crate::config::mcp::McpEntry;
use crate::config::LoadedConfig;
use crate::provider::chat::ToolSpec;
use crate::tools::{PermissionMode, ToolEvent, ToolHandle, ToolOutcome};
use serde_json::{json, Value};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

impl Manager {
    /// The model tools of the ready servers (starting the servers not started yet);
    /// in `read_only` mode the descriptions of tools that will be refused say so.
    pub fn specs(&self, cfg: &LoadedConfig, mode: PermissionMode) -> Vec<ToolSpec> {
        self.ensure_started(cfg);
        self.ready_specs(mode)
    }

    /// The model tools of the servers ready now (none is started).
    pub fn ready_specs(&self, mode: PermissionMode) -> Vec<ToolSpec> {
        let servers: Vec<Arc<Server>> = self.servers.lock().values().cloned().collect();
        let mut out = vec![];
        for s in servers {
            let st = s.st.lock();
            if st.phase != Phase::Ready {
                continue;
            }
            for t in &st.tools {
                let mut description = format!("[MCP server {}] {}", s.entry.name, t.description);
                if mode == PermissionMode::ReadOnly && !t.read_only {
                    description.push_str(
                        " (Disabled in read-only mode: the server does not mark this tool read-only.)",
                    );
                }
                let mut schema = t.schema.clone();
                if !schema.is_object() || schema.get("type").is_none() {
                    schema = json!({"type": "object", "properties": {}});
                }
                out.push(ToolSpec {
                    name: t.model_name.clone(),
                    description: crate::util::clip(&description, 2000),
                    parameters: schema,
                });
            }
        }
        out
    }

    /// Starts a call of model tool `model_name` on a helper thread. Unknown tools, a
    /// server that is not ready, a refusal by `mode`, a timeout, a transport failure or
    /// a protocol violation end it with a clear `is_error` outcome.
    pub fn spawn(
        &self,
        cfg: &LoadedConfig,
        model_name: &str,
        arguments: &str,
        mode: PermissionMode,
    ) -> ToolHandle {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let cancel = Arc::new(AtomicBool::new(false));
        let handle = ToolHandle::from_parts(rx, cancel.clone());
        let cap = cfg.agent().output_cap_bytes.unwrap_or(64 * 1024).max(1024);
        let found = {
            let servers: Vec<Arc<Server>> = self.servers.lock().values().cloned().collect();
            servers.into_iter().find_map(|s| {
                let st = s.st.lock();
                let t = st
                    .tools
                    .iter()
                    .find(|t| t.model_name == model_name)?
                    .clone();
                let conn = st.conn.clone().filter(|_| st.phase == Phase::Ready);
                let gen = st.generation;
                let why = (st.phase != Phase::Ready).then(|| {
                    format!(
                        "MCP server {} is {}{}",
                        s.entry.name,
                        st.phase.as_str(),
                        st.error
                            .as_ref()
                            .map(|e| format!(": {e}"))
                            .unwrap_or_default()
                    )
                });
                drop(st);
                Some((s, t, conn, why, gen))
            })
        };
        let done = |o: ToolOutcome| {
            let _ = tx.send(ToolEvent::Done(o));
        };
        let Some((s, tool, conn, why, gen)) = found else {
            done(ToolOutcome::error(format!(
                "tool `{model_name}` is not available: its MCP server is not connected (see mcp/list)"
            )));
            return handle;
        };
        let Some(conn) = conn else {
            done(ToolOutcome::error(format!(
                "tool `{model_name}` is not available: {}",
                why.unwrap_or_default()
            )));
            return handle;
        };
        if mode == PermissionMode::ReadOnly && !tool.read_only {
            done(ToolOutcome {
                output: format!(
                    "permission denied: `{model_name}` is not marked read-only by MCP server {} (readOnlyHint), so it does not run in read_only mode; the user may list it in mcp_servers.{}.read_only_tools",
                    s.entry.name, s.entry.name
                ),
                is_error: true,
                permission_denied: true,
                detail: Value::Null,
            });
            return handle;
        }
        let args: Value = if arguments.trim().is_empty() {
            json!({})
        } else {
            match serde_json::from_str(arguments) {
                Ok(v @ Value::Object(_)) => v,
                Ok(_) => {
                    done(ToolOutcome::error("the arguments must be a JSON object"));
                    return handle;
                }
                Err(e) => {
                    done(ToolOutcome::error(format!(
                        "the arguments are not valid JSON: {e}"
                    )));
                    return handle;
                }
            }
        };
        let timeout = Duration::from_millis(
            s.entry
                .config
                .tool_timeout_ms
                .unwrap_or(DEFAULT_TOOL_MS)
                .max(1),
        );
        let server_name = s.entry.name.clone();
        let me = self.me.clone();
        let spawned = crate::util::spawn("tool-mcp".into(), move || {
            let r = rpc::call(
                &*conn,
                "tools/call",
                json!({"name": tool.name, "arguments": args}),
                timeout,
                Some(&cancel),
            );
            let o = match r {
                Ok(v) => project::outcome(&server_name, &tool.name, &v, cap),
                Err(RpcError::Cancelled) => ToolOutcome::error(format!(
                    "interrupted: the call to MCP server {server_name} was cancelled"
                )),
                // The connection is gone (e.g. a remote server went away): the
                // server is reported and its tools are no longer offered.
                Err(RpcError::Transport(m)) => {
                    if let Some(me) = me.upgrade() {
                        me.finish(&s, gen, Err((Phase::Error, m.clone())));
                    }
                    ToolOutcome::error(crate::secrets::redact_string(format!(
                        "MCP server {server_name}, tool {}: {m}",
                        tool.name
                    )))
                }
                Err(e) => ToolOutcome::error(crate::secrets::redact_string(format!(
                    "MCP server {server_name}, tool {}: {e}",
                    tool.name
                ))),
            };
            let _ = tx.send(ToolEvent::Done(o));
        });
        if let Err(e) = spawned {
            log::error!("mcp: cannot start a tool thread: {e}");
        }
        handle
    }
}

/// Reads the server's tools (all pages), filtered by the entry's allow and deny lists.
pub(super) fn list_tools(
    conn: &dyn Transport,
    e: &McpEntry,
    budget_ms: u64,
) -> Result<Vec<Tool>, RpcError> {
    let c = &e.config;
    let started = Instant::now();
    let mut out = vec![];
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let left = Duration::from_millis(budget_ms.max(1)).saturating_sub(started.elapsed());
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let v = rpc::call(
            conn,
            "tools/list",
            params,
            left.max(Duration::from_millis(1)),
            None,
        )?;
        for t in v
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = t.get("name").and_then(Value::as_str) else {
                continue;
            };
            if c.enabled_tools
                .as_ref()
                .is_some_and(|allow| !allow.iter().any(|a| a == name))
                || c.disabled_tools.iter().flatten().any(|d| d == name)
            {
                continue;
            }
            let hint = t
                .get("annotations")
                .and_then(|a| a.get("readOnlyHint"))
                .and_then(Value::as_bool)
                == Some(true);
            out.push(Tool {
                name: name.to_owned(),
                model_name: String::new(),
                description: t
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                schema: t
                    .get("inputSchema")
                    .cloned()
                    .unwrap_or(json!({"type": "object"})),
                read_only: hint || c.read_only_tools.iter().flatten().any(|r| r == name),
            });
        }
        cursor = v
            .get("nextCursor")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Ok(out)
}
