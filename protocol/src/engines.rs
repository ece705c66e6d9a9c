//! `engine/list` and `engine/update` (spec `engines.md` §2; seed "刷新外部引擎").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `engine/list` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineListParams {
    /// Absolute directory whose native configuration discovery uses (the session's
    /// directory or worktree); default: the runtime root.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Rescan install directories and the login-shell PATH, re-apply the saved
    /// settings, bypass the model discovery cache.
    #[serde(default)]
    pub refresh_models: Option<bool>,
    /// `false`: descriptors and settings only, no native discovery; every
    /// `models_status` is `deferred`. Default true.
    #[serde(default)]
    pub include_models: Option<bool>,
    /// Add account quota (`subscription_providers`, per-entry `quota`). Default false.
    #[serde(default)]
    pub include_quota: Option<bool>,
    /// With `include_quota`: `false` skips the local history scan (`local_usage`,
    /// `latest_request`). Default true.
    #[serde(default)]
    pub include_activity: Option<bool>,
}

/// One engine's settings in `engine/update` (omitted fields stay unchanged).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineSettingsUpdate {
    /// `true` opt in, `false` opt out.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// Executable path (`""` clears it). Must name a program, not a command line.
    #[serde(default)]
    pub binary_path: Option<String>,
}

/// `engine/update` params: `default_engine` (`""` or `wuu` clears it) and per-engine
/// settings under the engine id.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineUpdateParams {
    /// Engine of new conversations.
    #[serde(default)]
    pub default_engine: Option<String>,
    /// Codex.
    #[serde(default)]
    pub codex: Option<EngineSettingsUpdate>,
    /// Claude Code.
    #[serde(default)]
    pub claude: Option<EngineSettingsUpdate>,
    /// Cursor.
    #[serde(default)]
    pub cursor: Option<EngineSettingsUpdate>,
    /// Devin.
    #[serde(default)]
    pub devin: Option<EngineSettingsUpdate>,
    /// Grok.
    #[serde(default)]
    pub grok: Option<EngineSettingsUpdate>,
    /// Hermes.
    #[serde(default)]
    pub hermes: Option<EngineSettingsUpdate>,
    /// Pi.
    #[serde(default)]
    pub pi: Option<EngineSettingsUpdate>,
    /// OpenCode.
    #[serde(default)]
    pub opencode: Option<EngineSettingsUpdate>,
    /// Antigravity.
    #[serde(default)]
    pub antigravity: Option<EngineSettingsUpdate>,
}

impl EngineUpdateParams {
    /// The per-engine updates with their ids, in catalogue order.
    pub fn entries(&self) -> Vec<(&'static str, &EngineSettingsUpdate)> {
        [
            ("codex", &self.codex),
            ("claude", &self.claude),
            ("cursor", &self.cursor),
            ("devin", &self.devin),
            ("grok", &self.grok),
            ("hermes", &self.hermes),
            ("pi", &self.pi),
            ("opencode", &self.opencode),
            ("antigravity", &self.antigravity),
        ]
        .into_iter()
        .filter_map(|(id, u)| u.as_ref().map(|u| (id, u)))
        .collect()
    }
}

/// A model an engine offers.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineModelInfo {
    /// Model id as the engine names it.
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Default reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_effort: Option<String>,
    /// Supported reasoning efforts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supported_efforts: Option<Vec<String>>,
    /// The engine's default model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_default: Option<bool>,
    /// A fast service tier exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_mode: Option<bool>,
    /// `standard` | `fast`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_speed: Option<String>,
    /// The concrete model an alias resolves to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_model: Option<String>,
    /// Native model options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<Value>>,
}

/// A permission mode row of an engine (`{mode, id?, label?}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EnginePermissionMode {
    /// `standard` | `read_only` | `unconfined`.
    pub mode: String,
    /// The native mode id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The native label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// One entry of `engine/list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineInfo {
    /// `wuu`, then the catalogue ids.
    pub id: String,
    /// Display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// `codex` | `claude` | `acp` | `opencode`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
    /// Where to get it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_url: Option<String>,
    /// Adapter version (registered engines only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Capabilities (registered engines only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Vec<String>>,
    /// Runtime availability: conversations can be started with it now.
    pub enabled: bool,
    /// The resolved executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary_path: Option<String>,
    /// An executable was detected.
    pub binary_ok: bool,
    /// Why detection failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Discovered models.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models: Option<Vec<EngineModelInfo>>,
    /// `ready` | `empty` | `unsupported` | `error` | `stale` | `partial` | `deferred`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models_status: Option<String>,
    /// Why discovery failed (absent for `unsupported`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models_error: Option<String>,
    /// Permission mode rows (ACP / OpenCode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_modes: Option<Vec<EnginePermissionMode>>,
    /// Account quota (only with `include_quota`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<Value>,
    /// Local usage totals (only with `include_quota` and activity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_usage: Option<Value>,
    /// The latest request (only with `include_quota` and activity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latest_request: Option<Value>,
}

/// `engine/list` and `engine/update` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineListResult {
    /// `wuu` first, then the catalogue order.
    pub engines: Vec<EngineInfo>,
    /// The persisted `engines` settings object (absent when the config has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<Value>,
    /// Configured model services with quota (only with `include_quota`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subscription_providers: Option<Vec<Value>>,
}

/// `engine/auth/methods`, `engine/authenticate`, `engine/auth/cancel` (spec
/// `engines.md` §1.11).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EngineAuthParams {
    /// A catalogue engine speaking ACP (cancel: empty = every operation).
    #[serde(default)]
    pub engine_id: String,
    /// The `authMethods[].id` to run (`engine/authenticate`, required there).
    #[serde(default)]
    pub method_id: Option<String>,
}

/// One authentication method an ACP agent advertised in `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineAuthMethod {
    /// The agent's method id.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Description, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The method type (`agent`; terminal methods are left to the CLI).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

/// The answer of `engine/auth/methods` and `engine/authenticate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EngineAuthResult {
    /// Methods the client may run (type empty or `agent`).
    pub methods: Vec<EngineAuthMethod>,
    /// `true` after a successful `engine/authenticate`; `false` for the listing.
    pub authenticated: bool,
}
