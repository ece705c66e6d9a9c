//! MCP server management for clients (spec `app-server.md` §3.7; README § "MCP
//! servers"): `mcp/list`, `mcp/connect`, `mcp/disconnect`, `mcp/refresh` and the OAuth
//! flow `mcp/auth/start|status|finish|remove`. The servers themselves are
//! [`crate::mcp::Manager`]; these handlers run on a small pool of their own (connecting
//! waits up to a server's startup timeout) and report status changes with
//! `mcp/status/updated`.

use crate::outbound::Responder;
use crate::session::Host;
use std::sync::Arc;
use wuu_protocol::*;

fn name_of(name: &str) -> Result<String, (ErrorCode, String)> {
    let n = name.trim();
    if n.is_empty() {
        return Err((
            ErrorCode::InvalidParams,
            "invalid params: name: the MCP server name is required".into(),
        ));
    }
    Ok(n.to_owned())
}

fn err(m: String) -> (ErrorCode, String) {
    (ErrorCode::Error, m)
}

fn auth_status(shared: &Host, name: &str) -> Result<McpAuthStatusResult, (ErrorCode, String)> {
    let cfg = shared.config();
    let entry = shared.mcp.entry(&cfg, name).map_err(err)?;
    let token = entry
        .config
        .url
        .as_ref()
        .and_then(|url| shared.mcp.oauth.token(name, url));
    Ok(McpAuthStatusResult {
        name: name.to_owned(),
        authenticated: token.is_some(),
        expires_at: token
            .as_ref()
            .and_then(|t| t.expires_at_ms)
            .map(crate::util::rfc3339),
        scopes: token.map(|t| t.scopes).unwrap_or_default(),
    })
}

fn run(shared: &Arc<Host>, req: ClientRequest) -> Result<serde_json::Value, (ErrorCode, String)> {
    let cfg = shared.config();
    let m = &shared.mcp;
    let v = |r: Result<serde_json::Value, serde_json::Error>| {
        r.map_err(|e| (ErrorCode::InternalError, e.to_string()))
    };
    match req {
        ClientRequest::McpList(_) => v(serde_json::to_value(McpListResult {
            servers: m.list(&cfg),
        })),
        ClientRequest::McpConnect(p) => {
            let status = m.connect_server(&cfg, &name_of(&p.name)?).map_err(err)?;
            v(serde_json::to_value(McpServerActionResult { status }))
        }
        ClientRequest::McpDisconnect(p) => {
            let status = m.disconnect_server(&cfg, &name_of(&p.name)?).map_err(err)?;
            v(serde_json::to_value(McpServerActionResult { status }))
        }
        ClientRequest::McpRefresh(p) => {
            let status = m.refresh_server(&cfg, &name_of(&p.name)?).map_err(err)?;
            v(serde_json::to_value(McpServerActionResult { status }))
        }
        ClientRequest::McpAuthStart(p) => {
            let name = name_of(&p.name)?;
            let entry = m.entry(&cfg, &name).map_err(err)?;
            let (authorization_url, state, scopes) =
                m.oauth.start(&name, &entry.config).map_err(err)?;
            v(serde_json::to_value(McpAuthStartResult {
                authorization_url,
                state,
                scopes,
            }))
        }
        ClientRequest::McpAuthStatus(p) => v(serde_json::to_value(auth_status(
            shared,
            &name_of(&p.name)?,
        )?)),
        ClientRequest::McpAuthFinish(p) => {
            let name = name_of(&p.name)?;
            m.entry(&cfg, &name).map_err(err)?;
            m.oauth
                .finish(&name, p.state.trim(), p.code.trim())
                .map_err(err)?;
            // Reconnect with the token when the server was in use or waiting for it.
            let server = match m.status(&cfg, &name).map_err(err)?.state.as_str() {
                "ready" | "auth_required" | "error" => {
                    m.refresh_server(&cfg, &name).map_err(err)?
                }
                _ => m.status(&cfg, &name).map_err(err)?,
            };
            v(serde_json::to_value(McpAuthResult {
                auth: auth_status(shared, &name)?,
                server,
            }))
        }
        ClientRequest::McpAuthRemove(p) => {
            let name = name_of(&p.name)?;
            m.entry(&cfg, &name).map_err(err)?;
            m.oauth.remove(&name).map_err(err)?;
            let server = match m.status(&cfg, &name).map_err(err)?.state.as_str() {
                "ready" => m.disconnect_server(&cfg, &name).map_err(err)?,
                _ => m.status(&cfg, &name).map_err(err)?,
            };
            v(serde_json::to_value(McpAuthResult {
                auth: auth_status(shared, &name)?,
                server,
            }))
        }
        other => Err((
            ErrorCode::InternalError,
            format!("{} is not an MCP method", other.method()),
        )),
    }
}

/// Answers one MCP request (on the calling pool thread).
pub fn handle(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    match run(shared, req) {
        Ok(v) => reply.ok(&v),
        Err((c, m)) => reply.err(c, crate::secrets::redact_string(m)),
    }
}
