//! The host of the sessions: how the server was started ([`ServerOptions`]) and the
//! handles every conversation and feature handler shares ([`Host`]): configuration,
//! outbox, registry, store connections, pending client requests. The composition root
//! (`server::start`) builds it; nothing here knows the reader, the router or the
//! feature handlers above. DESIGN.md (shared state); spec `app-server.md` §2.

use crate::config::{self, LoadedConfig};
use crate::outbound::transport::Outbox;
use parking_lot::{Mutex, RwLock};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wuu_protocol::{ClientCapabilities, ErrorCode};
use wuu_store::LeaseOwner;

/// How the server was started.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Workspace root (absolute).
    pub workdir: PathBuf,
    /// The wuu home (database, traces, spill files).
    pub home: PathBuf,
    /// `--config FILE`: load exactly that file.
    pub config_file: Option<PathBuf>,
    /// `--safe-mode`: start without plugins (there are none yet; reported in features).
    pub safe_mode: bool,
    /// Park idle session threads after this long.
    pub park_after: Duration,
    /// `wuu exec --ignore-user-config`: skip `$WUU_HOME/config.json` (embedded defaults
    /// plus project layers only).
    pub ignore_user_config: bool,
    /// Generate automatic titles after successful turns (when the config allows it).
    /// `wuu exec` turns this off: a one-shot run should not spend a model request on a
    /// title it exits before receiving.
    pub auto_titles: bool,
    /// `--workspace-id`: stable id of the workspace (the desktop's project id). Recorded
    /// on new conversations and in the workspace registry (`workspace/list`).
    pub workspace_id: Option<String>,
    /// `--instance-id`: id of this runtime instance (reported in `runtime_host`).
    pub instance_id: Option<String>,
    /// `--host local|cloud` (cloud requires `--instance-id`, `--workspace-id` and
    /// `--config`; reported in `initialize.runtime_host.kind`).
    pub host: String,
    /// `--provider`: default provider of new conversations (overrides the config).
    pub provider: Option<String>,
    /// `--model`: default model of new conversations (overrides the config).
    pub model: Option<String>,
    /// `--no-tools`: offer the model no tools, and refuse any tool call.
    pub no_tools: bool,
    /// Offer `ask_user` to the model (every app-server connection, unless the client
    /// opts out in `initialize`); `wuu exec` turns it off (it never answers questions).
    pub questions: bool,
}

impl ServerOptions {
    /// Options for `workdir` with the default home and no config override.
    pub fn new(workdir: PathBuf) -> Self {
        ServerOptions {
            workdir,
            home: config::wuu_home(),
            config_file: None,
            safe_mode: false,
            park_after: park_after_from_env(),
            ignore_user_config: false,
            auto_titles: true,
            workspace_id: None,
            instance_id: None,
            host: "local".into(),
            provider: None,
            model: None,
            no_tools: false,
            questions: true,
        }
    }

    /// Checks the combination of options (`--host cloud` needs `--instance-id`,
    /// `--workspace-id` and `--config`). Errors name the missing flag.
    pub fn validate(&self) -> Result<(), String> {
        match self.host.as_str() {
            "local" => Ok(()),
            "cloud" => {
                let missing: Vec<&str> = [
                    ("--instance-id", self.instance_id.is_none()),
                    ("--workspace-id", self.workspace_id.is_none()),
                    ("--config", self.config_file.is_none()),
                ]
                .into_iter()
                .filter(|(_, m)| *m)
                .map(|(f, _)| f)
                .collect();
                if missing.is_empty() {
                    Ok(())
                } else {
                    Err(format!("--host cloud requires {}", missing.join(", ")))
                }
            }
            other => Err(format!("--host {other:?}: expected local or cloud")),
        }?;
        if let Some(id) = &self.workspace_id {
            if !crate::util::valid_workspace_id(id) {
                return Err(format!(
                    "--workspace-id {id:?}: use 1-128 letters, digits, '.', '_' or '-'"
                ));
            }
        }
        Ok(())
    }

    /// Loads the configuration these options name, with the `--provider` / `--model`
    /// overrides applied (an unknown `--provider` is reported as an `unknown_provider`
    /// issue). Use this for every (re)load so the overrides survive reloads.
    pub fn load_config(&self) -> LoadedConfig {
        let mut loaded = config::load_with(
            &self.home,
            &self.workdir,
            self.config_file.as_deref(),
            self.ignore_user_config,
        );
        if let Some(p) = &self.provider {
            if loaded.provider(p).is_none() {
                loaded.issues.push(config::ConfigIssue {
                    code: "unknown_provider",
                    provider: Some(p.clone()),
                    message: format!("--provider {p:?} is not a configured provider"),
                });
            }
            loaded.config.default_provider = Some(p.clone());
            if self.model.is_none() {
                // The provider's own default model, not the config's agent.model.
                let m = loaded.provider(p).map(|c| c.model.clone());
                loaded
                    .config
                    .agent
                    .get_or_insert_with(Default::default)
                    .model = m;
            }
        }
        if let Some(m) = &self.model {
            loaded
                .config
                .agent
                .get_or_insert_with(Default::default)
                .model = Some(m.clone());
        }
        loaded
    }
}

/// How long an idle conversation keeps its session thread: `WUU_PARK_AFTER_MS`
/// (milliseconds, at least 10) when set, else 60 s.
pub fn park_after_from_env() -> Duration {
    std::env::var("WUU_PARK_AFTER_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(Duration::from_secs(60), |ms| {
            Duration::from_millis(ms.max(10))
        })
}

/// The handles the sessions and the feature handlers share: each one is a feature's
/// own state (the registry of live conversations, the store connections, the outbox,
/// the pending client requests, questions and browser tabs, provider instances, runs),
/// bundled here so a session thread gets them in one `Arc`.
pub struct Host {
    /// Start options.
    pub opts: ServerOptions,
    /// Where conversations are stored, chosen once at start (`WUU_STORE_URL`, else the
    /// config's `store.url`, else `$WUU_HOME/wuu.db`).
    pub store: wuu_store::Location,
    /// The configuration snapshot (replaced wholesale on change).
    pub config: RwLock<Arc<LoadedConfig>>,
    /// The outbox (to the writer thread).
    pub outbox: Outbox,
    /// Live sessions.
    pub registry: super::registry::Registry,
    /// Store connections session threads take while they work ([`connections`]).
    pub connections: super::connections::Connections,
    /// This process's lease identity.
    pub owner: LeaseOwner,
    /// When this process started and the stale limit it judges lease owners by
    /// ([`super::takeover`]).
    pub takeover: super::takeover::Takeover,
    /// Set once shutdown began: new work is refused with `server_closed`.
    pub closing: AtomicBool,
    /// What the client declared in `initialize`.
    pub capabilities: RwLock<ClientCapabilities>,
    /// Model catalog (embedded, refreshed on demand).
    pub model_catalog: crate::provider::catalog::ModelCatalog,
    /// Outstanding requests to the client.
    pub reverse: crate::session::reverse::Pending,
    /// Open user questions (`user-question/*`).
    pub questions: crate::session::questions::Questions,
    /// Browser tab ownership and executions.
    pub browser: crate::session::browser::Browser,
    /// Browser activities (`activity/*`): who controls each conversation's browser.
    pub activities: crate::session::activity::Activities,
    /// Provider instances by id (built on first use; a replay provider's position in its
    /// cassette lives in its instance).
    pub providers: crate::provider::registry::Providers,
    /// Live runs of this process and the runs of ephemeral conversations.
    pub runs: super::run::Runs,
    /// Changes whenever this process changes conversations in the store (listing cache
    /// validity; see [`Host::threads_changed`]).
    pub list_gen: std::sync::atomic::AtomicU64,
    /// Why the database cannot be used: found by the quick check at start or when the
    /// lease thread could not open it (reported by `initialize` as a `store_unavailable`
    /// issue).
    pub store_error: Mutex<Option<String>>,
    /// The live configuration: hand-edit detection, rejected edits, discovered skills.
    pub live: super::live_config::LiveConfig,
    /// Every conversation's background processes.
    pub background: Arc<crate::tools::background::Background>,
    /// The MCP servers and their tools.
    pub mcp: Arc<crate::mcp::Manager>,
    /// The subagent worker trees of the root conversations.
    pub agents: super::agents::Agents,
}

impl Host {
    /// The current configuration.
    pub fn config(&self) -> Arc<LoadedConfig> {
        self.config.read().clone()
    }

    /// Invalidates cached listings: call after changing a conversation in the store.
    /// (Changes by other processes are noticed by the lease thread within its heartbeat
    /// interval, and by the catalog pool at once through `PRAGMA data_version`; on a
    /// shared PostgreSQL store, other hosts' changes by the change feed thread.)
    pub fn threads_changed(&self) {
        self.list_gen.fetch_add(1, Ordering::SeqCst);
    }

    /// A new connection to the store ([`Host::store`]).
    /// Errors: those of [`wuu_store::Store::open_location`].
    pub fn open_store(&self) -> Result<wuu_store::Store, wuu_store::StoreError> {
        wuu_store::Store::open_location(&self.store)
    }

    /// Whether shutdown began.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }
}

/// The error a request gets when the store failed: `store_busy` (retryable) naming the
/// database file when another connection held the lock past the busy timeout;
/// `store_unavailable` (retryable) when the PostgreSQL server cannot be reached or the
/// connection broke; `internal_error` naming the database file otherwise. A URL is
/// shown without its password.
pub fn store_refusal(shared: &Host, e: &wuu_store::StoreError) -> (ErrorCode, String) {
    let path = shared.store.shown();
    if e.is_unavailable() {
        return (
            ErrorCode::StoreUnavailable,
            format!("store unavailable: the database {path} cannot be reached; retry later ({e})"),
        );
    }
    if e.is_busy() && shared.store.is_postgres() {
        return (
            ErrorCode::StoreBusy,
            format!("store busy: the database {path} refused the transaction (a conflict with another host); retry later ({e})"),
        );
    }
    if e.is_busy() {
        (
            ErrorCode::StoreBusy,
            format!(
                "store busy: the database {} stayed locked by another connection or process for longer than {} s; retry later ({e})",
                path,
                wuu_store::DEFAULT_BUSY_TIMEOUT.as_secs()
            ),
        )
    } else {
        (
            ErrorCode::InternalError,
            format!("store: the database {path}: {e}"),
        )
    }
}

/// The error a client request gets when a store call on its path failed: the busy case
/// (another connection held the write lock past the busy timeout) goes through
/// [`store_refusal`] (`store_busy`, retryable, naming the database file); every other
/// store error stays `internal_error` with its `store: …` message.
pub fn store_error(shared: &Host, e: &wuu_store::StoreError) -> (ErrorCode, String) {
    if e.is_busy() || e.is_unavailable() {
        store_refusal(shared, e)
    } else {
        (ErrorCode::InternalError, format!("store: {e}"))
    }
}
