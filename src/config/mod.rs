//! Configuration: `$WUU_HOME/config.json` plus project layers (`.wuu.json` or
//! `wuu.json`, `.wuu/settings.json`, `.wuu/settings.local.json`). Objects merge
//! recursively, arrays and scalars replace; unknown fields are rejected with their path;
//! user-owned fields are stripped from project layers and reported.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One provider connection (providers.md §6.7, reduced to what this host supports).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ProviderConfig {
    /// `openai-responses` | `openai-compatible` | `anthropic` | `replay`.
    #[serde(rename = "type")]
    pub provider_type: String,
    /// Base URL, e.g. `https://api.openai.com/v1` (include `/v1` when the service needs
    /// it; for Anthropic the host root, `/v1/messages` is appended).
    #[serde(default)]
    pub base_url: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Default model.
    #[serde(default)]
    pub model: String,
    /// Known models.
    #[serde(default)]
    pub models: Option<Vec<String>>,
    /// Context window of this provider's models, in tokens (reported as
    /// `turn/usage.context_window_tokens`; overrides the model catalog).
    #[serde(default)]
    pub context_window: Option<u64>,
    /// `replay` only: the cassette file (relative paths resolve against the config file's
    /// directory).
    #[serde(default)]
    pub cassette: Option<String>,
    /// Extra HTTP headers.
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// Longest silence between two pieces of a streaming answer, ms (default 90 000):
    /// past it the attempt counts as stalled and is retried.
    #[serde(default)]
    pub stream_idle_timeout_ms: Option<u64>,
    /// Connect / first-header timeout, ms (default 60 000).
    #[serde(default)]
    pub stream_connect_timeout_ms: Option<u64>,
    /// Retries after the first attempt (default 4).
    #[serde(default)]
    pub max_retries: Option<u32>,
    /// Cap of one backoff wait, ms (default 30 000). Tests set it low.
    #[serde(default)]
    pub max_backoff_ms: Option<u64>,
    /// Initial backoff, ms (default 1 000).
    #[serde(default)]
    pub initial_backoff_ms: Option<u64>,
    /// Longest time a request may go without progress (no event, counted from its start
    /// or the last event received) before retrying stops, ms (default 120 000).
    #[serde(default)]
    pub max_retry_time_ms: Option<u64>,
    /// Output limit in tokens sent with every request of this provider (Responses
    /// `max_output_tokens`, Chat `max_tokens`, Messages `max_tokens`); unset: Chat and
    /// Responses send none, Messages sends 8192 (32000 with thinking).
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Per-model output limits (model id → tokens), overriding `max_output_tokens`.
    #[serde(default)]
    pub model_max_output_tokens: Option<BTreeMap<String, u32>>,
    /// The connection is managed outside the settings panel (dotfiles, an
    /// administrator): `config/provider/remove` and connection edits through
    /// `config/model/update` refuse it. Reported as `connection_locked`.
    #[serde(default)]
    pub locked: Option<bool>,
}

/// A named model selection (`agent.model_aliases.<name>`, `agent.verification_model`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AliasConfig {
    /// Provider id.
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

/// General settings (`general` object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct GeneralConfig {
    /// Commits made by the agent carry a `Co-authored-by` attribution (default true).
    #[serde(default)]
    pub git_attribution_enabled: Option<bool>,
    /// Per-MCP-server switches set by `config/general/update {mcp_enabled_toggles}`:
    /// `false` keeps a server from starting, `true` enables it (for a project server:
    /// approves it, see `mcp_project_approvals`).
    #[serde(default)]
    pub mcp_server_enabled: Option<BTreeMap<String, bool>>,
    /// Approved project MCP servers (`.mcp.json`): name → fingerprint (hex SHA-256 of the
    /// workspace root and the entry as approved). A changed entry needs a new approval.
    #[serde(default)]
    pub mcp_project_approvals: Option<BTreeMap<String, String>>,
}

/// One MCP server (`mcp_servers.<name>`): a command spoken to over stdio, or a URL
/// spoken to over streamable HTTP (MCP revision 2025-06-18).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program (looked up in `PATH` when it has no `/`).
    #[serde(default)]
    pub command: Option<String>,
    /// stdio: its arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// stdio: variables added to the scrubbed environment.
    #[serde(default)]
    pub env: Option<BTreeMap<String, String>>,
    /// stdio: working directory (relative = to the workspace root; default the root).
    #[serde(default)]
    pub cwd: Option<String>,
    /// HTTP: the endpoint URL.
    #[serde(default)]
    pub url: Option<String>,
    /// HTTP: headers sent with every request (values are secrets in every output).
    #[serde(default)]
    pub headers: Option<BTreeMap<String, String>>,
    /// HTTP: environment variable whose value is sent as `Authorization: Bearer …`.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// HTTP: OAuth client settings (`mcp/auth/start`); discovered from the server when
    /// absent.
    #[serde(default)]
    pub oauth: Option<McpOAuthConfig>,
    /// Start this server (default true).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// How long starting (spawn/connect, `initialize`, `tools/list`) may take, in ms
    /// (default 30000).
    #[serde(default)]
    pub startup_timeout_ms: Option<u64>,
    /// How long one tool call may take, in ms (default 120000).
    #[serde(default)]
    pub tool_timeout_ms: Option<u64>,
    /// Only these tools of the server are offered (default all).
    #[serde(default)]
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    #[serde(default)]
    pub disabled_tools: Option<Vec<String>>,
    /// Tools that may run in `read_only` mode although the server does not mark them
    /// `readOnlyHint`.
    #[serde(default)]
    pub read_only_tools: Option<Vec<String>>,
}

/// OAuth client settings of a remote MCP server (all optional: the endpoints are
/// discovered from the server's metadata, the client id is registered dynamically).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct McpOAuthConfig {
    /// Registered client id.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Authorization endpoint.
    #[serde(default)]
    pub authorization_url: Option<String>,
    /// Token endpoint.
    #[serde(default)]
    pub token_url: Option<String>,
    /// Scopes to ask for.
    #[serde(default)]
    pub scopes: Option<Vec<String>>,
    /// Redirect URI registered for the client (default `http://127.0.0.1/callback`).
    #[serde(default)]
    pub redirect_uri: Option<String>,
}

use serde_json::{Map, Value};
use std::path::{Path, PathBuf};

pub mod edit;
pub mod mcp;
pub mod views;
pub mod watch;

/// Default of `agent.max_parallel` (spec `subagents.md` §1.4).
pub const DEFAULT_MAX_PARALLEL: u32 = 5;

/// Agent settings (`agent` object).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// Default permission mode of new conversations (user-owned).
    #[serde(default)]
    pub permission_mode: Option<String>,
    /// Default model override of new conversations (user-owned model routing).
    #[serde(default)]
    pub model: Option<String>,
    /// Default reasoning effort (user-owned model routing).
    #[serde(default)]
    pub effort: Option<String>,
    /// Model steps per turn before the turn stops (default 200).
    #[serde(default)]
    pub max_steps: Option<u32>,
    /// Subagent workers of one root conversation that run at once (default
    /// [`DEFAULT_MAX_PARALLEL`]; 0 means the default); more wait in a durable queue.
    #[serde(default)]
    pub max_parallel: Option<u32>,
    /// Default `bash` timeout, ms (default 120 000).
    #[serde(default)]
    pub bash_timeout_ms: Option<u64>,
    /// Bytes of each command output stream kept inline (default 64 KiB).
    #[serde(default)]
    pub output_cap_bytes: Option<usize>,
    /// Concurrent background processes per conversation (`bash` `run_in_background`;
    /// default 8).
    #[serde(default)]
    pub max_background_processes: Option<u32>,
    /// Generate titles automatically after successful turns (default true).
    #[serde(default)]
    pub auto_title: Option<bool>,
    /// How long an `offer`-mode user question stays open before it expires unanswered,
    /// ms (default 20 000; seed "回答原生引擎问题"). `user-question/hold` pauses it.
    #[serde(default)]
    pub question_offer_ttl_ms: Option<u64>,
    /// Per-call timeout of a request to the client (browser reverse requests), ms
    /// (default 30 000; spec §1.5).
    #[serde(default)]
    pub reverse_request_timeout_ms: Option<u64>,
    /// The environment of commands (user-owned): which secret-looking variables pass.
    #[serde(default)]
    pub shell_env: Option<ShellEnvConfig>,
    /// Extra roots of the command sandbox (user-owned).
    #[serde(default)]
    pub sandbox: Option<SandboxConfig>,
    /// Sampling temperature (0 ..= 2; absent = the provider's default).
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Context budget of a request, tokens (absent or 0 = the model's window).
    #[serde(default)]
    pub max_context_tokens: Option<u64>,
    /// Fraction of the context window at which history is compacted (0 < x ≤ 1).
    #[serde(default)]
    pub compact_threshold_pct: Option<f64>,
    /// Recent tokens a compaction keeps verbatim.
    #[serde(default)]
    pub compact_keep_recent_tokens: Option<u64>,
    /// Turn automatic compaction off.
    #[serde(default)]
    pub disable_auto_compact: Option<bool>,
    /// Override of the model's context window, tokens.
    #[serde(default)]
    pub provider_context_window: Option<u64>,
    /// Named selections (`cheap`, `review`, …; user-owned model routing: an alias may
    /// name any model, the default one included).
    #[serde(default)]
    pub model_aliases: Option<BTreeMap<String, AliasConfig>>,
    /// The model used for verification (user-owned model routing).
    #[serde(default)]
    pub verification_model: Option<AliasConfig>,
}

/// `agent.shell_env`: commands run without the `api_key_env` variables of every
/// configured provider and without any variable whose name contains `KEY`, `TOKEN`,
/// `SECRET` or `PASSWORD` (case-insensitive); `keep` names variables to pass anyway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ShellEnvConfig {
    /// Exact variable names passed through to commands although they look secret.
    #[serde(default)]
    pub keep: Option<Vec<String>>,
}

/// `agent.sandbox`: directories added to what `standard` / `read_only` commands may
/// read or write. Absolute paths, or `~/…` for the home directory; others are ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SandboxConfig {
    /// Directories commands may also read and execute from.
    #[serde(default)]
    pub readable_roots: Option<Vec<String>>,
    /// Directories commands may also write (in `standard` mode only).
    #[serde(default)]
    pub writable_roots: Option<Vec<String>>,
}

/// One external engine's settings (`engines.<id>`; spec `engines.md` §1.3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EngineSettings {
    /// Absent = automatic (available when its executable is found); `false` = opted
    /// out; `true` = opted in.
    #[serde(default)]
    pub enabled: Option<bool>,
    /// The executable (a program, not a command line).
    #[serde(default)]
    pub binary_path: Option<String>,
}

/// Engine settings (`engines` object; user-owned: a project cannot name executables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct EnginesConfig {
    /// Engine for new conversations; empty → `wuu`. Kept when that engine is disabled
    /// (new conversations then fail until it is re-enabled or the default changes).
    #[serde(default)]
    pub default_engine: Option<String>,
    /// Codex.
    #[serde(default)]
    pub codex: Option<EngineSettings>,
    /// Claude Code.
    #[serde(default)]
    pub claude: Option<EngineSettings>,
    /// Cursor.
    #[serde(default)]
    pub cursor: Option<EngineSettings>,
    /// Devin.
    #[serde(default)]
    pub devin: Option<EngineSettings>,
    /// Grok.
    #[serde(default)]
    pub grok: Option<EngineSettings>,
    /// Hermes.
    #[serde(default)]
    pub hermes: Option<EngineSettings>,
    /// Pi.
    #[serde(default)]
    pub pi: Option<EngineSettings>,
    /// OpenCode.
    #[serde(default)]
    pub opencode: Option<EngineSettings>,
    /// Antigravity.
    #[serde(default)]
    pub antigravity: Option<EngineSettings>,
}

impl EnginesConfig {
    /// The settings of engine `id`, if any.
    pub fn settings(&self, id: &str) -> Option<&EngineSettings> {
        match id {
            "codex" => self.codex.as_ref(),
            "claude" => self.claude.as_ref(),
            "cursor" => self.cursor.as_ref(),
            "devin" => self.devin.as_ref(),
            "grok" => self.grok.as_ref(),
            "hermes" => self.hermes.as_ref(),
            "pi" => self.pi.as_ref(),
            "opencode" => self.opencode.as_ref(),
            "antigravity" => self.antigravity.as_ref(),
            _ => None,
        }
    }
}

/// The whole configuration document (every layer has this shape; every field optional).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// JSON Schema hint for editors; ignored.
    #[serde(default, rename = "$schema")]
    pub schema: Option<String>,
    /// Provider id of new conversations (user-owned).
    #[serde(default)]
    pub default_provider: Option<String>,
    /// Provider connections by id (user-owned).
    #[serde(default)]
    pub providers: Option<BTreeMap<String, ProviderConfig>>,
    /// Extra instructions for the system prompt (user-owned).
    #[serde(default)]
    pub instructions: Option<String>,
    /// Agent settings.
    #[serde(default)]
    pub agent: Option<AgentConfig>,
    /// Engine settings.
    #[serde(default)]
    pub engines: Option<EnginesConfig>,
    /// General settings.
    #[serde(default)]
    pub general: Option<GeneralConfig>,
    /// MCP servers by name (user-owned; a project's servers come from `.mcp.json`).
    #[serde(default)]
    pub mcp_servers: Option<BTreeMap<String, McpServerConfig>>,
    /// Where conversations are stored and how hosts sharing them judge each other
    /// (user-owned).
    #[serde(default)]
    pub store: Option<StoreConfig>,
}

/// `store`: where conversations are kept and how hosts sharing them judge each other
/// (README "Several hosts, one database").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// A PostgreSQL database shared by several hosts: `postgresql://user@host:port/db`
    /// (the password from `PGPASSWORD` or `~/.pgpass`, never written here). Absent →
    /// the SQLite file `$WUU_HOME/wuu.db`. `WUU_STORE_URL` overrides it. Read at start.
    #[serde(default)]
    pub url: Option<String>,
    /// Milliseconds without a heartbeat after which a lease owner on another machine is
    /// dead and its conversations are taken over (default 30000; hosts sharing a
    /// database should agree). `WUU_LEASE_STALE_MS` overrides it. Read at start.
    #[serde(default)]
    pub lease_stale_ms: Option<u64>,
}

/// Paths a project layer may not set (user-owned), as JSON pointers.
pub const USER_OWNED: &[&str] = &[
    "/default_provider",
    "/providers",
    "/instructions",
    "/agent/permission_mode",
    "/agent/model",
    "/agent/effort",
    "/agent/model_aliases",
    "/agent/verification_model",
    "/agent/shell_env",
    "/agent/sandbox",
    "/engines",
    "/mcp_servers",
    "/store",
    "/general/mcp_server_enabled",
    "/general/mcp_project_approvals",
];

/// Project layer file names, in load order (later wins). Only the first of `.wuu.json` /
/// `wuu.json` that exists is read.
pub const PROJECT_LAYERS: &[&str] = &[".wuu/settings.json", ".wuu/settings.local.json"];

/// A readiness problem found while loading (becomes an `initialize` issue).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// Machine code (`missing_user_config`, `invalid_config`, `protected_field_ignored`,
    /// `invalid_provider`, `unknown_provider`, `missing_api_key`).
    pub code: &'static str,
    /// Provider concerned.
    pub provider: Option<String>,
    /// Detail naming the file and the field path.
    pub message: String,
}

/// The effective configuration and how it was obtained.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    /// Merged, validated configuration (the embedded defaults when the user file is
    /// missing or invalid).
    pub config: Config,
    /// The user file (or the `--config` file).
    pub config_path: PathBuf,
    /// Directory that relative paths in the config resolve against.
    pub config_dir: PathBuf,
    /// Project layers read, in order.
    pub layers: Vec<PathBuf>,
    /// Problems; any of them makes `initialize` report `needs_setup`, except
    /// `protected_field_ignored` and `invalid_mcp_config`, which are informational.
    pub issues: Vec<ConfigIssue>,
    /// The project's MCP servers (`.mcp.json` of the workspace; empty with `--config`).
    pub project_mcp: BTreeMap<String, McpServerConfig>,
    /// The workspace root the project layers were read from.
    pub project_root: PathBuf,
}

impl LoadedConfig {
    /// Provider id used for new conversations.
    pub fn default_provider(&self) -> String {
        self.config
            .default_provider
            .clone()
            .or_else(|| {
                self.config
                    .providers
                    .as_ref()
                    .and_then(|p| p.keys().next().cloned())
            })
            .unwrap_or_default()
    }

    /// The provider config of `id`.
    pub fn provider(&self, id: &str) -> Option<&ProviderConfig> {
        self.config.providers.as_ref()?.get(id)
    }

    /// Default model of new conversations: `agent.model`, else the default provider's
    /// model.
    pub fn default_model(&self) -> String {
        if let Some(m) = self.agent().model.clone().filter(|m| !m.is_empty()) {
            return m;
        }
        self.provider(&self.default_provider())
            .map(|p| p.model.clone())
            .unwrap_or_default()
    }

    /// The target of the alias `model` (`agent.model_aliases.<model>`), when `model`
    /// names one and `provider` is absent or is the alias's own provider; `None` when the
    /// model is to be taken literally. Aliases do not chain: the target's model is used
    /// as written. Applied where a selection is made (`thread/start`, `config/model/update`
    /// with `thread_id`, one-shot helpers), so a conversation stores the resolved
    /// provider and model.
    pub fn alias(&self, provider: Option<&str>, model: &str) -> Option<AliasConfig> {
        let a = self.agent().model_aliases?.remove(model.trim())?;
        provider.is_none_or(|p| p == a.provider).then_some(a)
    }

    /// The agent settings (defaults when absent).
    pub fn agent(&self) -> AgentConfig {
        self.config.agent.clone().unwrap_or_default()
    }

    /// `agent.max_parallel`, with 0 or absent meaning [`DEFAULT_MAX_PARALLEL`].
    pub fn max_parallel(&self) -> u32 {
        match self.config.agent.as_ref().and_then(|a| a.max_parallel) {
            Some(n) if n > 0 => n,
            _ => DEFAULT_MAX_PARALLEL,
        }
    }

    /// The general settings (defaults when absent).
    pub fn general(&self) -> GeneralConfig {
        self.config.general.clone().unwrap_or_default()
    }

    /// Every file this configuration was (or would be) read from, in load order: the
    /// user file (or the `--config` file), then, without `--config`, the project layer
    /// candidates of `workdir` whether or not they exist (`.wuu.json`, `wuu.json`,
    /// `.wuu/settings.json`, `.wuu/settings.local.json`). Watched for hand edits.
    pub fn watched_paths(&self, workdir: &Path, explicit: bool) -> Vec<PathBuf> {
        let mut out = vec![self.config_path.clone()];
        if !explicit {
            out.extend([".wuu.json", "wuu.json"].iter().map(|n| workdir.join(n)));
            out.extend(PROJECT_LAYERS.iter().map(|n| workdir.join(n)));
            out.push(workdir.join(mcp::PROJECT_FILE));
        }
        out
    }

    /// Whether the configuration is usable as is.
    pub fn ready(&self) -> bool {
        self.issues
            .iter()
            .all(|i| i.code == "protected_field_ignored" || i.code == "invalid_mcp_config")
    }
}

/// The wuu home: `$WUU_HOME`, else `~/.wuu`.
pub fn wuu_home() -> PathBuf {
    if let Some(h) = std::env::var_os("WUU_HOME").filter(|h| !h.is_empty()) {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").unwrap_or_else(|| ".".into());
    PathBuf::from(home).join(".wuu")
}

/// Loads the configuration for `workdir`.
///
/// - With `explicit = Some(FILE)`: exactly that file, no project layers. A missing or
///   invalid file is an `invalid_config` issue (embedded defaults are used).
/// - Otherwise: `home/config.json` (missing → `missing_user_config`), then the project
///   layers of `workdir`: `.wuu.json` (or `wuu.json`), `.wuu/settings.json`,
///   `.wuu/settings.local.json`. User-owned fields in a project layer are stripped and
///   reported (`protected_field_ignored`).
///
/// Objects merge recursively; arrays and scalars replace. Unknown fields make the layer
/// invalid (`invalid_config`, naming file and field path); an invalid layer is skipped.
pub fn load(home: &Path, workdir: &Path, explicit: Option<&Path>) -> LoadedConfig {
    load_with(home, workdir, explicit, false)
}

/// [`load`], optionally skipping the user file (`skip_user`, `wuu exec
/// --ignore-user-config`): then only the embedded defaults and the project layers apply
/// (no `missing_user_config` issue). Ignored when `explicit` is given.
pub fn load_with(
    home: &Path,
    workdir: &Path,
    explicit: Option<&Path>,
    skip_user: bool,
) -> LoadedConfig {
    let mut out = LoadedConfig::default();
    let mut merged = Value::Object(Map::new());
    let user_path = explicit
        .map(Path::to_path_buf)
        .unwrap_or_else(|| home.join("config.json"));
    out.config_dir = user_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    out.config_path = user_path.clone();
    let user_layer = if skip_user && explicit.is_none() {
        Ok(Some(Value::Object(Map::new())))
    } else {
        read_layer(&user_path, None)
    };
    match user_layer {
        Ok(Some(v)) => merge(&mut merged, v),
        Ok(None) => {
            if explicit.is_some() {
                out.issues.push(ConfigIssue {
                    code: "invalid_config",
                    provider: None,
                    message: format!("config file {} does not exist", user_path.display()),
                });
            } else {
                out.issues.push(ConfigIssue {
                    code: "missing_user_config",
                    provider: None,
                    message: format!(
                        "no user config at {}: create it with at least one provider",
                        user_path.display()
                    ),
                });
            }
        }
        Err(msg) => out.issues.push(ConfigIssue {
            code: "invalid_config",
            provider: None,
            message: msg,
        }),
    }
    if explicit.is_none() {
        let first = [".wuu.json", "wuu.json"]
            .iter()
            .map(|n| workdir.join(n))
            .find(|p| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir()));
        let rest = PROJECT_LAYERS.iter().map(|n| workdir.join(n));
        for path in first.into_iter().chain(rest) {
            match read_layer(&path, Some(workdir)) {
                Ok(Some(mut v)) => {
                    for ptr in USER_OWNED {
                        if remove_pointer(&mut v, ptr) {
                            out.issues.push(ConfigIssue {
                                code: "protected_field_ignored",
                                provider: None,
                                message: format!(
                                    "{}: `{}` is user-owned and was ignored in a project layer",
                                    path.display(),
                                    ptr.trim_start_matches('/').replace('/', ".")
                                ),
                            });
                        }
                    }
                    out.layers.push(path);
                    merge(&mut merged, v);
                }
                Ok(None) => {}
                Err(msg) => out.issues.push(ConfigIssue {
                    code: "invalid_config",
                    provider: None,
                    message: msg,
                }),
            }
        }
    }
    out.project_root = workdir.to_path_buf();
    if explicit.is_none() {
        match mcp::read_project(workdir) {
            Ok(m) => out.project_mcp = m,
            Err(message) => out.issues.push(ConfigIssue {
                code: "invalid_mcp_config",
                provider: None,
                message,
            }),
        }
    }
    out.config = edit::parse_config(merged).unwrap_or_default();
    install_secrets(&out);
    validate_providers(&mut out);
    out
}

/// Largest config layer read, in bytes.
pub const MAX_LAYER_BYTES: u64 = 1024 * 1024;

/// The bytes of one layer file, `Ok(None)` when it does not exist. With `workdir` (a
/// project layer) the file is read beneath the workspace through
/// [`crate::beneath::Root`]: a symlink out of the workspace (or a magic link) is
/// refused, never followed. The user file (`workdir = None`) may be a link anywhere.
/// Either way only a regular file is read (opened non-blocking: a FIFO is refused, never
/// waited on), at most [`MAX_LAYER_BYTES`]. Errors name the file and the reason, never
/// its content.
pub fn layer_bytes(path: &Path, workdir: Option<&Path>) -> Result<Option<Vec<u8>>, String> {
    use crate::beneath::{self, Root};
    let read = match workdir {
        Some(w) => {
            let Some(rel) = beneath::rel_beneath(w, path) else {
                return Err(format!(
                    "{}: refused: a project layer must be inside the workspace",
                    path.display()
                ));
            };
            Root::open(w)
                .map_err(beneath::Error::Io)
                .and_then(|root| root.read_capped(&rel, MAX_LAYER_BYTES))
        }
        None => beneath::read_regular(path, MAX_LAYER_BYTES),
    };
    match read {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(beneath::Error::Outside) => Err(format!(
            "{}: refused: it leads outside the workspace (a symbolic link out of it); not read",
            path.display()
        )),
        Err(e) => Err(format!("{}: cannot read: {e}", path.display())),
    }
}

/// Reads and validates one layer (`workdir`: see [`layer_bytes`]; `Some` for project
/// layers). `Ok(None)` when the file does not exist; `Err` names the file and the field
/// path of the problem (`PATH: at `agent.max_stepz`: unknown field …`, `PATH: not valid
/// JSON: …`).
pub fn read_layer(path: &Path, workdir: Option<&Path>) -> Result<Option<Value>, String> {
    let Some(bytes) = layer_bytes(path, workdir)? else {
        return Ok(None);
    };
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{}: not valid UTF-8", path.display()))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
    if !value.is_object() {
        return Err(format!(
            "{}: the config must be a JSON object",
            path.display()
        ));
    }
    let parsed = edit::parse_config(value.clone())
        .map_err(|(at, e)| format!("{}: at `{at}`: {e}", path.display()))?;
    edit::check_values(&parsed).map_err(|m| format!("{}: {m}", path.display()))?;
    Ok(Some(value))
}

/// Recursive merge: objects merge, everything else replaces.
pub fn merge(base: &mut Value, layer: Value) {
    match (base, layer) {
        (Value::Object(b), Value::Object(l)) => {
            for (k, v) in l {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, l) => *b = l,
    }
}

fn remove_pointer(v: &mut Value, ptr: &str) -> bool {
    let (parent, key) = ptr.rsplit_once('/').unwrap_or(("", ptr));
    let parent = if parent.is_empty() {
        Some(v)
    } else {
        v.pointer_mut(parent)
    };
    match parent {
        Some(Value::Object(o)) => o.remove(key).is_some(),
        _ => false,
    }
}

/// Provider types this host speaks.
pub const PROVIDER_TYPES: &[&str] = &[
    "openai-responses",
    "openai-compatible",
    "anthropic",
    "replay",
];

fn validate_providers(out: &mut LoadedConfig) {
    let providers = out.config.providers.clone().unwrap_or_default();
    for (id, p) in &providers {
        let bad = |m: String| ConfigIssue {
            code: "invalid_provider",
            provider: Some(id.clone()),
            message: m,
        };
        if !PROVIDER_TYPES.contains(&p.provider_type.as_str()) {
            out.issues.push(bad(format!(
                "providers.{id}.type: unknown provider type `{}` (expected one of {})",
                p.provider_type,
                PROVIDER_TYPES.join(", ")
            )));
            continue;
        }
        if p.provider_type == "replay" {
            if p.cassette.as_deref().unwrap_or("").is_empty() {
                out.issues
                    .push(bad(format!("providers.{id}.cassette: required for replay")));
            }
        } else if p.base_url.trim().is_empty() {
            out.issues
                .push(bad(format!("providers.{id}.base_url: required")));
        } else if !crate::secrets::url_userinfo(&p.base_url).is_empty() {
            out.issues.push(bad(format!(
                "providers.{id}.base_url: credentials in the URL (`user:key@`) are refused; put the key in an environment variable and name it in `api_key_env` (the key is never shown)"
            )));
        }
        if p.model.trim().is_empty() {
            out.issues
                .push(bad(format!("providers.{id}.model: required")));
        }
        if let Some(env) = &p.api_key_env {
            if std::env::var_os(env).is_none_or(|v| v.is_empty()) {
                out.issues.push(ConfigIssue {
                    code: "missing_api_key",
                    provider: Some(id.clone()),
                    message: format!(
                        "providers.{id}.api_key_env: environment variable {env} is not set"
                    ),
                });
            }
        }
    }
    if let Some(d) = &out.config.default_provider {
        if !providers.contains_key(d) {
            out.issues.push(ConfigIssue {
                code: "unknown_provider",
                provider: Some(d.clone()),
                message: format!("default_provider `{d}` is not in providers"),
            });
        }
    } else if providers.is_empty()
        && !out
            .issues
            .iter()
            .any(|i| i.code == "missing_user_config" || i.code == "invalid_config")
    {
        out.issues.push(ConfigIssue {
            code: "invalid_config",
            provider: None,
            message: format!("{}: {NO_PROVIDERS}", out.config_path.display()),
        });
    }
}

/// The tail of the `invalid_config` issue message for a config without providers; exec
/// matches it to tell "no wuu provider" (harmless for an external engine) from a broken file.
pub const NO_PROVIDERS: &str = "no providers configured";

/// The secrets `cfg` names: the provider keys in the environment variables it names
/// (and the standard `OPENAI_API_KEY`, `ANTHROPIC_API_KEY`), the userinfo of provider
/// URLs, and the values of sensitive provider headers (see [`crate::secrets`]).
pub fn secrets_of(cfg: &LoadedConfig) -> Vec<String> {
    let mut out = Vec::new();
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    for name in ["OPENAI_API_KEY", "ANTHROPIC_API_KEY"] {
        out.extend(env(name));
    }
    let mcp = cfg.config.mcp_servers.iter().flat_map(|m| m.values());
    for m in mcp.chain(cfg.project_mcp.values()) {
        if let Some(name) = &m.bearer_token_env {
            out.extend(env(name));
        }
        out.extend(m.url.iter().flat_map(|u| crate::secrets::url_userinfo(u)));
        for v in m.headers.iter().flat_map(|h| h.values()) {
            let v = v.trim();
            out.push(v.to_string());
            if let Some((_, rest)) = v.split_once(' ') {
                out.push(rest.trim().to_string());
            }
        }
        for (k, v) in m.env.iter().flatten() {
            let up = k.to_ascii_uppercase();
            if ["KEY", "TOKEN", "SECRET", "PASSWORD"]
                .iter()
                .any(|w| up.contains(w))
            {
                out.push(v.clone());
            }
        }
    }
    for p in cfg.config.providers.iter().flat_map(|m| m.values()) {
        if let Some(name) = &p.api_key_env {
            out.extend(env(name));
        }
        out.extend(crate::secrets::url_userinfo(&p.base_url));
        for (k, v) in p.headers.iter().flatten() {
            let k = k.to_ascii_lowercase();
            if crate::secrets::SENSITIVE_HEADER_WORDS
                .iter()
                .any(|w| k.contains(w))
            {
                let v = v.trim();
                out.push(v.to_string());
                if let Some((scheme, rest)) = v.split_once(' ') {
                    if ["bearer", "basic", "token"].contains(&scheme.to_ascii_lowercase().as_str())
                    {
                        out.push(rest.trim().to_string());
                    }
                }
            }
        }
    }
    out
}

/// Hands the secrets of `cfg` to the redactor (call after every config load).
pub fn install_secrets(cfg: &LoadedConfig) {
    crate::secrets::set(secrets_of(cfg));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn layers_merge_strip_and_reject() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        fs::write(
            home.path().join("config.json"),
            r#"{"default_provider":"p","providers":{"p":{"type":"openai-compatible","base_url":"http://x/v1","model":"m"}},"agent":{"max_steps":10}}"#,
        )
        .unwrap();
        fs::write(
            ws.path().join(".wuu.json"),
            r#"{"default_provider":"evil","agent":{"max_parallel":2}}"#,
        )
        .unwrap();
        let c = load(home.path(), ws.path(), None);
        assert_eq!(c.default_provider(), "p");
        assert_eq!(c.agent().max_steps, Some(10));
        assert_eq!(c.agent().max_parallel, Some(2));
        assert!(c.ready(), "{:?}", c.issues);
        assert!(c.issues.iter().any(|i| i.code == "protected_field_ignored"));

        fs::create_dir_all(ws.path().join(".wuu")).unwrap();
        fs::write(
            ws.path().join(".wuu/settings.json"),
            r#"{"agent":{"max_stepz":3}}"#,
        )
        .unwrap();
        let c = load(home.path(), ws.path(), None);
        assert!(!c.ready());
        let issue = c
            .issues
            .iter()
            .find(|i| i.code == "invalid_config")
            .unwrap();
        assert!(
            issue.message.contains("agent.max_stepz"),
            "{}",
            issue.message
        );
    }

    #[test]
    fn missing_user_config_needs_setup() {
        let home = tempfile::tempdir().unwrap();
        let c = load(home.path(), home.path(), None);
        assert!(!c.ready());
        assert_eq!(c.issues[0].code, "missing_user_config");
    }
}
