//! The panels around the conversation (spec `app-server.md`): settings updates, live configuration
//! notifications, instructions, skills and one-shot helpers.
//!
//! Sources: `spec/app-server.md` §3.4 (config/*, skill/list, instructions/list), §3.7
//! (text/polish, git/commit-message), §3.1 (thread/regenerate-title), §4.6
//! (config/changed, config/error); the Go dispatcher `internal/appserver/server.go` and
//! `config_handlers.go`, `instructions_handlers.go`, `text_polish.go` of
//! blueberrycongee/wuu; the TypeScript mirror `packages/protocol/src/index.ts`
//! (`RuntimeAdvancedSettingsUpdate`, `ConfigAdvancedUpdateResult`,
//! `RuntimeGeneralSettingsUpdate`, `SkillSummary`, `ConfigChangedNotification`).

use crate::config::{Permissions, ProviderSummary};
use crate::thread::Thread;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A named model selection (`model_aliases` entry, `verification_model`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelAlias {
    /// Provider id (must be configured).
    pub provider: String,
    /// Model id.
    pub model: String,
    /// Reasoning effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Model variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

/// The agent's advanced settings as reported by `initialize`, `config/read` and
/// `config/advanced/update` (`AdvancedSettingsSummary` of the TS mirror).
///
/// Units: token counts are tokens; `temperature` is the sampling temperature (0 = the
/// provider's default, nothing is sent); `compact_threshold_pct` is a fraction of the
/// context window (0 < x ≤ 1); `bash_timeout_ms` is milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AdvancedSettings {
    /// Model steps per turn before the turn stops (default 200).
    pub max_steps: u32,
    /// Context budget of a request in tokens; 0 = the model's own window.
    pub max_context_tokens: u64,
    /// Sampling temperature; 0 = provider default.
    pub temperature: f64,
    /// Fraction of the context window at which history is compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_threshold_pct: Option<f64>,
    /// Recent tokens kept verbatim by a compaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_keep_recent_tokens: Option<u64>,
    /// Automatic compaction is off.
    pub disable_auto_compact: bool,
    /// Context window of the provider's model, when the user overrides it (tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_context_window: Option<u64>,
    /// The model used for verification, when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification_model: Option<ModelAlias>,
    /// Default `bash` timeout, ms.
    pub bash_timeout_ms: u64,
    /// Automatic titles after successful turns.
    pub auto_title: bool,
}

/// General settings (`GeneralSettingsSummary` of the TS mirror).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GeneralSettings {
    /// Commits made by the agent carry a `Co-authored-by` attribution (default true).
    pub git_attribution_enabled: bool,
    /// Every configured MCP server (user and project) → whether it may start.
    pub mcp_server_enabled: BTreeMap<String, bool>,
}

/// `config/advanced/update` params: every field optional; only given fields change.
/// Written to the user config file (`agent.*`), validated before the write.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigAdvancedUpdateParams {
    /// 1 ..= 10 000.
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Tokens; 0 = the model's window.
    #[serde(default)]
    pub max_context_tokens: Option<u64>,
    /// 0 ..= 2; 0 = provider default.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// 0 < x ≤ 1 (a fraction); 0 clears it.
    #[serde(default)]
    pub compact_threshold_pct: Option<f64>,
    /// Tokens; 0 clears it.
    #[serde(default)]
    pub compact_keep_recent_tokens: Option<u64>,
    /// Turns automatic compaction off.
    #[serde(default)]
    pub disable_auto_compact: Option<bool>,
    /// Tokens; 0 clears the override.
    #[serde(default)]
    pub provider_context_window: Option<u64>,
    /// Replaces the whole alias map (`{}` removes every alias). Each provider must be
    /// configured and each model non-empty.
    #[serde(default)]
    pub model_aliases: Option<BTreeMap<String, ModelAlias>>,
    /// The verification model; an empty `model` clears it.
    #[serde(default)]
    pub verification_model: Option<ModelAlias>,
}

/// `config/advanced/update` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigAdvancedUpdateResult {
    /// The effective settings after the change.
    pub advanced_settings: AdvancedSettings,
    /// The effective aliases (omitted when none).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub model_aliases: BTreeMap<String, ModelAlias>,
    /// Configured providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderSummary>,
}

/// `config/general/update` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigGeneralUpdateParams {
    /// Agent commits carry attribution.
    #[serde(default)]
    pub git_attribution_enabled: Option<bool>,
    /// Per-MCP-server toggles: `true` enables (a project server: approves exactly its
    /// current entry), `false` disables, `null` = back to the default (a project server
    /// then needs approval again). An unknown server name is `invalid_params`.
    #[serde(default)]
    pub mcp_enabled_toggles: Option<BTreeMap<String, Option<bool>>>,
}

/// `config/general/update` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigGeneralUpdateResult {
    /// The effective settings after the change.
    pub general_settings: GeneralSettings,
}

/// `config/provider/remove` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConfigProviderRemoveParams {
    /// The provider to remove.
    pub provider: String,
    /// New default when the removed provider was the default (else the first remaining
    /// provider by id).
    #[serde(default)]
    pub fallback_provider: Option<String>,
    /// Model of the fallback (else that provider's default model).
    #[serde(default)]
    pub fallback_model: Option<String>,
}

/// A selection (`{provider, model}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Selection {
    /// Provider id.
    pub provider: String,
    /// Model id.
    pub model: String,
}

/// `config/provider/remove` result: the workspace defaults after the removal (like
/// `config/model/update`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigProviderRemoveResult {
    /// The provider that was removed.
    pub removed: String,
    /// Default provider now.
    pub provider: String,
    /// Default model now.
    pub model: String,
    /// Default effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Default variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Set when the removed provider was the default: the selection that replaced it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback: Option<Selection>,
    /// Default permissions.
    pub permissions: Permissions,
    /// Remaining providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderSummary>,
    /// Agent settings.
    pub advanced_settings: AdvancedSettings,
}

/// One skill (`SkillSummary` of the TS mirror): a folder with a `SKILL.md` under the
/// project's `.wuu/skills/` or the user's `$WUU_HOME/skills/`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillSummary {
    /// Frontmatter `name` (else the folder name).
    pub name: String,
    /// Frontmatter `description` (else the first paragraph of the body).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Frontmatter `when_to_use`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_to_use: Option<String>,
    /// `project` | `user` (a project skill hides a user skill of the same name).
    pub source: String,
    /// Absolute path of the `SKILL.md`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Frontmatter `argument-hint`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
    /// Frontmatter `allowed-tools`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allowed_tools: Vec<String>,
    /// Frontmatter `user-invocable` (default true).
    pub user_invocable: bool,
    /// Frontmatter `disable-model-invocation`: not offered through `load_skill`.
    pub disable_model_invoke: bool,
    /// Frontmatter `version`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Times the model loaded it (`load_skill`), all conversations.
    pub use_count: u64,
    /// RFC 3339 time of the last use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at: Option<String>,
}

/// `skill/list` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SkillListResult {
    /// Skills by name.
    pub skills: Vec<SkillSummary>,
}

/// `instructions/list` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InstructionsListParams {
    /// Include each file's text (default true, as the Go server always did).
    #[serde(default)]
    pub include_content: Option<bool>,
}

/// One instruction file loaded into the system prompt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstructionFile {
    /// Absolute path.
    pub path: String,
    /// File name (`AGENTS.md`).
    pub name: String,
    /// `project` (the workspace's `AGENTS.md` files).
    pub source: String,
    /// `global` | `project`.
    pub scope: String,
    /// Size of the content in bytes (UTF-8).
    pub bytes: u64,
    /// The text, unless `include_content: false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// `instructions/list` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstructionsListResult {
    /// Files in the order they enter the prompt (outermost first).
    pub files: Vec<InstructionFile>,
}

/// `text/polish` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TextPolishParams {
    /// Dictated text (1 ..= 20 000 characters after trimming).
    pub text: String,
    /// Use this conversation's provider and model (default: the workspace default).
    #[serde(default)]
    pub thread_id: Option<String>,
}

/// `text/polish` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TextPolishResult {
    /// The polished text.
    pub text: String,
}

/// `git/commit-message` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GitCommitMessageParams {
    /// The staged diff (the first 64 000 characters are sent).
    pub diff: String,
    /// Paths of the changed files (trimmed, deduplicated).
    #[serde(default)]
    pub files: Option<Vec<String>>,
    /// Use this conversation's provider and model (default: the workspace default).
    #[serde(default)]
    pub thread_id: Option<String>,
}

/// `git/commit-message` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GitCommitMessageResult {
    /// Subject line, optionally a blank line and a body.
    pub message: String,
}

/// `thread/regenerate-title` params.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ThreadRegenerateTitleParams {
    /// The conversation.
    pub thread_id: String,
    /// Generate only; do not store it.
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// Use this model instead of the conversation's.
    #[serde(default)]
    pub model_override: Option<String>,
    /// Use this provider instead of the conversation's.
    #[serde(default)]
    pub provider: Option<String>,
}

/// `thread/regenerate-title` result.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ThreadRegenerateTitleResult {
    /// The conversation.
    pub thread_id: String,
    /// Provider asked.
    pub provider: String,
    /// Model asked.
    pub model: String,
    /// The cleaned title.
    pub title: String,
    /// Whether it was stored (false for `dry_run`).
    pub persisted: bool,
    /// The stored title afterwards.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persisted_title: Option<String>,
    /// The conversation after the change (when persisted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread: Option<Thread>,
}

/// `config/changed`: a hand edit of a configuration file was applied (spec §4.6). Clear
/// any shown `config/error`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigChanged {
    /// Default provider now.
    pub provider: String,
    /// Default model now.
    pub model: String,
    /// Default effort.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Default variant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
    /// Aliases.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub model_aliases: BTreeMap<String, ModelAlias>,
    /// Configured providers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderSummary>,
    /// Advanced settings now.
    pub advanced_settings: AdvancedSettings,
    /// General settings now.
    pub general_settings: GeneralSettings,
    /// The files whose change was applied.
    pub paths: Vec<String>,
}

/// `config/error`: a hand edit was rejected; the previous configuration stays in force.
/// Sent once per distinct rejected document.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ConfigError {
    /// `PATH: REASON`.
    pub message: String,
    /// The file that does not validate.
    pub path: String,
    /// Why (JSON syntax error, or the field path and the problem).
    pub reason: String,
}
