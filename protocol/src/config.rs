//! `initialize`, `config/read` and model-catalog shapes (spec §2.1, §3.4; seed:
//! `catalog_providers`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this server speaks.
pub const PROTOCOL_VERSION: &str = "wuu-app-server/v0.1";

/// `initialize` params (all optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InitializeParams {
    /// Must equal [`PROTOCOL_VERSION`] when given.
    #[serde(default)]
    pub protocol_version: Option<String>,
    /// `{name?, version?}`, informational.
    #[serde(default)]
    pub client: Option<ClientInfo>,
    /// What the client can do.
    #[serde(default)]
    pub capabilities: Option<ClientCapabilities>,
}

/// Client identity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientInfo {
    /// Client name.
    #[serde(default)]
    pub name: Option<String>,
    /// Client version.
    #[serde(default)]
    pub version: Option<String>,
}

/// Client capabilities.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientCapabilities {
    /// Reverse requests the client serves.
    #[serde(default)]
    pub reverse_rpc: Option<ReverseRpcCapabilities>,
    /// Large images by reference in responses and notifications: an image whose base64
    /// data exceeds 16 KiB is sent as `{data: "", remote_ref: "thread:…"}` (read it with
    /// `thread/attachment/read`) instead of echoing megabytes inline.
    #[serde(default)]
    pub deferred_notification_content: Option<bool>,
    /// Notification families the client reads, e.g. `user-question` (questions are
    /// offered on every app-server connection anyway; accepted for compatibility).
    #[serde(default)]
    pub notifications: Option<Vec<String>>,
    /// Notification families the client declines: `["user-question"]` turns `ask_user`
    /// off for this connection.
    #[serde(default)]
    pub opt_out_notifications: Option<Vec<String>>,
}

/// `capabilities.reverse_rpc`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReverseRpcCapabilities {
    /// Server → client methods the client answers (e.g. `browser/open_tab`).
    #[serde(default)]
    pub methods: Vec<String>,
}

/// A readiness problem (`initialize.issues`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RuntimeIssue {
    /// `missing_user_config`, `invalid_config`, `protected_field_ignored`,
    /// `invalid_provider`, `missing_api_key`, `unknown_provider`.
    pub code: String,
    /// The provider concerned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Detail, naming the config path when there is one.
    pub message: String,
}

/// Build identity of the core.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CoreIdentity {
    /// Crate version.
    pub version: String,
    /// Git commit, when known at build time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Build profile (`debug` | `release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// `{mode}` of the workspace default permission.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Permissions {
    /// `standard` | `read_only` | `unconfined`.
    pub mode: String,
}

/// A configured provider, as reported to clients (never the key itself).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProviderSummary {
    /// Provider id (config key).
    pub name: String,
    /// `openai-responses` | `openai-compatible` | `anthropic` | `replay`.
    #[serde(rename = "type")]
    pub provider_type: String,
    /// Default model.
    pub model: String,
    /// Base URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Whether an API key is available (from `api_key_env`).
    pub api_key_configured: bool,
    /// The connection is managed outside the settings panel (`providers.<id>.locked`):
    /// it cannot be edited or removed from a client.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub connection_locked: bool,
    /// Known models.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
}

/// A catalog model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CatalogModel {
    /// Model id.
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Supports tool calls.
    pub tool_call: bool,
    /// Context window in tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// A connectable service of the catalog (seed: `catalog_providers`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CatalogProvider {
    /// Provider id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Provider type.
    #[serde(rename = "type")]
    pub provider_type: String,
    /// Base URL.
    pub base_url: String,
    /// Number of models known.
    pub model_count: u32,
    /// Default model.
    pub default_model: String,
    /// Environment variable holding the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// Models (only when one provider was asked for, or after a refresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<CatalogModel>>,
    /// Why the last refresh of this provider failed (previous options kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refresh_error: Option<String>,
    /// RFC 3339 time of the last successful refresh.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refreshed_at: Option<String>,
}

/// Summary of the workspace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct WorkspaceSummary {
    /// Absolute root.
    pub root: String,
    /// Project config layers that were loaded, in order.
    pub config_layers: Vec<String>,
}

/// `initialize` result (spec §2.1).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InitializeResult {
    /// `ready` | `needs_setup`.
    pub status: String,
    /// Readiness problems (omitted when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub issues: Vec<RuntimeIssue>,
    /// [`PROTOCOL_VERSION`].
    pub protocol_version: String,
    /// Build identity.
    pub core: CoreIdentity,
    /// Workspace default provider.
    pub provider: String,
    /// Workspace default model.
    pub model: String,
    /// Default effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Effective parallel capacity.
    pub max_parallel: u32,
    /// `{kind: "local"}`.
    pub runtime_host: Value,
    /// Absolute workspace root.
    pub workspace_root: String,
    /// Workspace summary.
    pub workspace: WorkspaceSummary,
    /// Default permissions.
    pub permissions: Permissions,
    /// Configured providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderSummary>,
    /// Connectable services of the catalog.
    pub catalog_providers: Vec<CatalogProvider>,
    /// Agent settings ([`crate::panels::AdvancedSettings`]: `max_steps`, budgets,
    /// temperature, …).
    pub advanced_settings: Value,
    /// General settings (`git_attribution_enabled`, `mcp_server_enabled`).
    pub general_settings: crate::panels::GeneralSettings,
    /// Named model selections (omitted when none).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub model_aliases: std::collections::BTreeMap<String, crate::panels::ModelAlias>,
    /// `{browser, safe_mode}`.
    pub features: Value,
}

/// `config/read` result: like `initialize` plus where things live.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigReadResult {
    /// Same as `initialize`.
    #[serde(flatten)]
    pub base: InitializeResult,
    /// The user config file (or the `--config` file).
    pub config_path: String,
    /// The wuu home (database, traces).
    pub session_dir: String,
}

/// `config/model-catalog/providers` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelCatalogProvidersParams {
    /// Only this provider, with its models; unknown → error.
    #[serde(default)]
    pub provider: Option<String>,
}

/// `config/model-catalog/providers` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelCatalogProvidersResult {
    /// Catalog services.
    pub providers: Vec<CatalogProvider>,
}

/// `config/model-catalog/refresh` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ModelCatalogRefreshResult {
    /// Providers asked.
    pub provider_count: u32,
    /// Models known after the refresh.
    pub model_count: u32,
    /// The catalog (same as `catalog_providers`).
    pub providers: Vec<CatalogProvider>,
    /// Same list under the seed's name.
    pub catalog_providers: Vec<CatalogProvider>,
}
