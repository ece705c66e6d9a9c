//! The MCP servers the configuration names: the user's `mcp_servers` and the project's
//! `.mcp.json` (the common `{"mcpServers": {name: {command, args, env, cwd} | {type,
//! url, headers}}}` format), and whether each may start. A project server is a command
//! a repository asks us to run: it starts only once the user approved exactly that
//! entry (`config/general/update {mcp_enabled_toggles}`; see README § MCP).

use super::{LoadedConfig, McpServerConfig};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::Path;

/// The project file of MCP servers, relative to the workspace root.
pub const PROJECT_FILE: &str = ".mcp.json";

/// Where a server entry comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `mcp_servers` of the user config.
    User,
    /// The project's `.mcp.json`.
    Project,
}

impl Source {
    /// `user` | `project`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::User => "user",
            Source::Project => "project",
        }
    }
}

/// Whether a server may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// It may start.
    Enabled,
    /// Turned off (entry `enabled: false` or a `false` toggle).
    Disabled,
    /// A project server the user has not approved (or approved a different entry).
    NeedsApproval,
}

/// One configured server.
#[derive(Debug, Clone, PartialEq)]
pub struct McpEntry {
    /// Its name (the key).
    pub name: String,
    /// Where it is configured.
    pub source: Source,
    /// The entry.
    pub config: McpServerConfig,
    /// Whether it may start.
    pub gate: Gate,
}

/// Reads `.mcp.json` of `workdir` (beneath the workspace, at most 1 MiB). `Ok(empty)`
/// when absent; `Err` names the file and the problem. Unknown members of an entry are
/// ignored (other tools put their own there); `type` `sse` is refused per entry with a
/// log line (the older HTTP+SSE transport is not spoken).
pub fn read_project(workdir: &Path) -> Result<BTreeMap<String, McpServerConfig>, String> {
    let path = workdir.join(PROJECT_FILE);
    let Some(bytes) = super::layer_bytes(&path, Some(workdir))? else {
        return Ok(BTreeMap::new());
    };
    let v: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
    let Some(servers) = v.get("mcpServers") else {
        return Ok(BTreeMap::new());
    };
    let Some(servers) = servers.as_object() else {
        return Err(format!(
            "{}: `mcpServers` must be an object",
            path.display()
        ));
    };
    let mut out = BTreeMap::new();
    for (name, e) in servers {
        let s = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
        let map = |k: &str| {
            e.get(k).and_then(Value::as_object).map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                    .collect::<BTreeMap<_, _>>()
            })
        };
        if s("type").as_deref() == Some("sse") {
            log::warn!(
                "{}: server {name:?} uses the HTTP+SSE transport, which is not supported; skipped",
                path.display()
            );
            continue;
        }
        let cfg = McpServerConfig {
            command: s("command"),
            args: e.get("args").and_then(Value::as_array).map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(str::to_owned))
                    .collect()
            }),
            env: map("env"),
            cwd: s("cwd"),
            url: s("url"),
            headers: map("headers"),
            ..Default::default()
        };
        if cfg.command.is_none() && cfg.url.is_none() {
            return Err(format!(
                "{}: server {name:?} names neither `command` nor `url`",
                path.display()
            ));
        }
        out.insert(name.clone(), cfg);
    }
    Ok(out)
}

/// The approval fingerprint of a project entry: hex SHA-256 over the workspace root and
/// the entry's command, arguments, environment, working directory, URL and headers.
pub fn fingerprint(root: &Path, c: &McpServerConfig) -> String {
    let v = serde_json::json!([
        root.to_string_lossy(),
        c.command,
        c.args,
        c.env,
        c.cwd,
        c.url,
        c.headers
    ]);
    Sha256::digest(v.to_string().as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Every configured server, user ones first then project ones whose name no user server
/// takes, with the gate each is under.
pub fn entries(cfg: &LoadedConfig) -> Vec<McpEntry> {
    let general = cfg.general();
    let toggles = general.mcp_server_enabled.unwrap_or_default();
    let approvals = general.mcp_project_approvals.unwrap_or_default();
    let mut out = vec![];
    for (name, c) in cfg.config.mcp_servers.iter().flatten() {
        let on = toggles
            .get(name)
            .copied()
            .unwrap_or(c.enabled.unwrap_or(true));
        out.push(McpEntry {
            name: name.clone(),
            source: Source::User,
            config: c.clone(),
            gate: if on { Gate::Enabled } else { Gate::Disabled },
        });
    }
    for (name, c) in &cfg.project_mcp {
        if out.iter().any(|e| &e.name == name) {
            continue;
        }
        let gate = match toggles.get(name) {
            Some(false) => Gate::Disabled,
            Some(true)
                if approvals.get(name).map(String::as_str)
                    == Some(fingerprint(&cfg.project_root, c).as_str()) =>
            {
                Gate::Enabled
            }
            _ => Gate::NeedsApproval,
        };
        out.push(McpEntry {
            name: name.clone(),
            source: Source::Project,
            config: c.clone(),
            gate,
        });
    }
    out
}
