//! MCP server management (spec `app-server.md` §3.7): `mcp/list`, `mcp/connect`,
//! `mcp/disconnect`, `mcp/refresh`, `mcp/auth/*` and the `mcp/status/updated`
//! notification. Shapes follow the Go original's `MCPServerStatus` and friends, with
//! `transport`, `source` and `tools` added.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One MCP tool as offered to the model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpToolSummary {
    /// The tool's name on its server.
    pub name: String,
    /// The model tool name (`mcp__<server>__<tool>`, sanitised, at most 64 chars).
    pub model_name: String,
    /// Its description (first 300 characters).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// The server marks it `readOnlyHint` (or the config lists it in `read_only_tools`):
    /// it runs in `read_only` mode.
    pub read_only: bool,
}

/// The status of one MCP server (`mcp/list` row, `mcp/status/updated` params).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerStatus {
    /// Server name (the config key).
    pub name: String,
    /// `stopped` (not started yet) | `starting` | `ready` | `error` (failed or died;
    /// see `error`, retried on `mcp/refresh`) | `disabled` | `needs_approval` (a
    /// project server the user has not approved) | `auth_required`.
    pub state: String,
    /// Remote servers: `unsupported` | `not_logged_in` | `bearer_token` | `oauth`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_status: Option<String>,
    /// `state == "ready"`.
    pub connected: bool,
    /// Tools offered to the model.
    pub tool_count: u32,
    /// The last error (redacted), while `state` is `error` or `auth_required`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `stdio` | `streamable_http`.
    pub transport: String,
    /// `user` (config.json `mcp_servers`) | `project` (`.mcp.json`).
    pub source: String,
    /// The tools offered to the model (empty until it started).
    #[serde(default)]
    pub tools: Vec<McpToolSummary>,
}

/// `mcp/list` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpListResult {
    /// Every configured server, by name.
    pub servers: Vec<McpServerStatus>,
}

/// Params of `mcp/connect|disconnect|refresh` and `mcp/auth/start|status|remove`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpServerActionParams {
    /// Server name.
    pub name: String,
}

/// `mcp/connect|disconnect|refresh` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpServerActionResult {
    /// The server's status afterwards.
    pub status: McpServerStatus,
}

/// `mcp/auth/start` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpAuthStartResult {
    /// Open this in a browser (PKCE S256; carries `state`).
    pub authorization_url: String,
    /// The flow's state; pass it back to `mcp/auth/finish`.
    pub state: String,
    /// Scopes asked for.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// `mcp/auth/status` result (never carries a token).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpAuthStatusResult {
    /// Server name.
    pub name: String,
    /// A token is stored.
    pub authenticated: bool,
    /// When the stored access token expires (RFC 3339), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// Scopes granted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// `mcp/auth/finish` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct McpAuthFinishParams {
    /// Server name.
    pub name: String,
    /// The `state` of `mcp/auth/start`.
    pub state: String,
    /// The `code` the authorization server redirected with.
    pub code: String,
}

/// `mcp/auth/finish` and `mcp/auth/remove` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct McpAuthResult {
    /// The authorization afterwards.
    pub auth: McpAuthStatusResult,
    /// The server afterwards.
    pub server: McpServerStatus,
}
