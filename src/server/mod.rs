//! The app-server core: transport threads, router, session registry, catalog pool.
//!
//! Thread layout (DESIGN.md): one reader thread parses and routes lines; one writer
//! thread alone owns the output; one session thread per live conversation
//! ([`crate::session`]); a small catalog pool for listings and model catalogs. No async
//! runtime. Protocol: spec `app-server.md` (`wuu-app-server/v0.1`).

pub mod catalog;
pub mod connections;
pub mod engines;
pub mod folders;
pub mod init;
pub mod registry;
pub mod router;
pub mod schema;
pub mod transport;
pub mod workspace;

use crate::config::{self, LoadedConfig};
use parking_lot::{Mutex, RwLock};
use serde::Serialize;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use transport::{FrameSink, LineSource, Outbox, Overflow};
use wuu_protocol::{
    ClientCapabilities, ErrorCode, ErrorObject, Notification, RequestId, Response,
    ServerNotification,
};
use wuu_store::LeaseOwner;

/// A serialized listing and the generations it is valid for:
/// `(filter, list_gen, registry generation, bytes)`.
pub type CachedListing = (wuu_store::ThreadFilter, u64, u64, Arc<Vec<u8>>);

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
            if !workspace::valid_id(id) {
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

/// State shared by the reader, the sessions and the pool. Small and explicit.
pub struct Shared {
    /// Start options.
    pub opts: ServerOptions,
    /// The configuration snapshot (replaced wholesale on change).
    pub config: RwLock<Arc<LoadedConfig>>,
    /// The outbox (to the writer thread).
    pub outbox: Outbox,
    /// Live sessions.
    pub registry: registry::Registry,
    /// Store connections session threads take while they work ([`connections`]).
    pub connections: connections::Connections,
    /// Catalog pool.
    pub catalog: catalog::CatalogPool,
    /// The search lane: `thread/search` runs here (one worker, a second while one
    /// overruns), so searches never hold up listings on the catalog pool.
    pub search: catalog::CatalogPool,
    /// This process's lease identity.
    pub owner: LeaseOwner,
    /// Set once shutdown began: new work is refused with `server_closed`.
    pub closing: AtomicBool,
    /// What the client declared in `initialize`.
    pub capabilities: RwLock<ClientCapabilities>,
    /// Model catalog (embedded, refreshed on demand).
    pub model_catalog: Mutex<Vec<wuu_protocol::CatalogProvider>>,
    /// Outstanding requests to the client.
    pub reverse: crate::session::reverse::Pending,
    /// Open user questions (`user-question/*`).
    pub questions: crate::session::questions::Questions,
    /// Browser tab ownership and executions.
    pub browser: crate::session::browser::Browser,
    /// Provider instances by id (built on first use; a replay provider's position in its
    /// cassette lives in its instance).
    pub providers: Mutex<std::collections::HashMap<String, Arc<dyn crate::provider::Provider>>>,
    /// Live runs of this process: run id → conversation id.
    pub live_runs: Mutex<std::collections::HashMap<String, String>>,
    /// Changes whenever this process changes conversations in the store (listing cache
    /// validity; see [`Shared::threads_changed`]).
    pub list_gen: std::sync::atomic::AtomicU64,
    /// Serialized listings the reader may answer inline while nothing changed:
    /// filter → (list_gen, registry generation, bytes).
    pub list_cache: Mutex<Vec<CachedListing>>,
    /// Why the database cannot be used: found by the quick check at start or when the
    /// lease thread could not open it (reported by `initialize` as a `store_unavailable`
    /// issue).
    pub store_error: Mutex<Option<String>>,
    /// Set once the lease thread has tried to open the database.
    pub store_checked: AtomicBool,
    /// Runs of ephemeral conversations (never stored).
    pub ephemeral_runs: Mutex<std::collections::HashMap<String, wuu_protocol::Run>>,
    /// Usage views' shared scans and caches, quota snapshots.
    pub usage: crate::usage::UsageState,
    /// Settings, live configuration and skills state (issue 16).
    pub panels: crate::panels::PanelState,
    shutdown_once: Mutex<bool>,
}

impl Shared {
    /// The current configuration.
    pub fn config(&self) -> Arc<LoadedConfig> {
        self.config.read().clone()
    }

    /// Sends a notification, waiting at most [`transport::NOTIFY_DEADLINE`] for room.
    /// The params are serialized once, straight into the frame.
    pub fn notify<N: ServerNotification>(&self, n: &N) -> Result<(), Overflow> {
        let mut frame = Vec::with_capacity(256);
        frame.extend_from_slice(b"{\"method\":");
        serde_json::to_writer(&mut frame, N::METHOD).expect("serialize method");
        frame.extend_from_slice(b",\"params\":");
        serde_json::to_writer(&mut frame, n).expect("serialize notification");
        frame.push(b'}');
        if self.outbox.defer_content() && frame.len() > wuu_protocol::INLINE_IMAGE_CHARS {
            // Deferred content: large images go by reference.
            if let Ok(mut v) = serde_json::to_value(n) {
                if crate::session::attachments::project_frame(&mut v) {
                    frame = serde_json::to_vec(&Notification {
                        method: N::METHOD.to_owned(),
                        params: v,
                    })
                    .expect("serialize notification");
                }
            }
        }
        self.outbox.send_within(frame, transport::NOTIFY_DEADLINE)
    }

    /// Hands the delta frames gathered in `lines` ([`delta_frame_into`]) to the outbox
    /// through the turn's `lane` (its fair share of the outbox, [`transport::Lane`]),
    /// as one hand-off, and leaves `lines` empty. Errors: [`Overflow`] when the client
    /// has not read for [`transport::NOTIFY_DEADLINE`].
    pub fn send_deltas(
        &self,
        lane: &transport::Lane,
        lines: &mut transport::Lines,
    ) -> Result<(), Overflow> {
        self.outbox
            .send_lane(lane, lines, transport::NOTIFY_DEADLINE)
    }

    /// Sends a notification given as a method and params.
    pub fn notify_raw(&self, method: &str, params: serde_json::Value) -> Result<(), Overflow> {
        let n = Notification {
            method: method.to_owned(),
            params,
        };
        let frame = serde_json::to_vec(&n).expect("serialize notification");
        self.outbox.send_within(frame, transport::NOTIFY_DEADLINE)
    }

    /// Invalidates cached listings: call after changing a conversation in the store.
    /// (Changes by other processes are noticed by the lease thread within its heartbeat
    /// interval, and by the catalog pool at once through `PRAGMA data_version`.)
    pub fn threads_changed(&self) {
        self.list_gen.fetch_add(1, Ordering::SeqCst);
    }

    /// A cached listing for `filter` that is still valid.
    pub fn cached_listing(&self, filter: &wuu_store::ThreadFilter) -> Option<Arc<Vec<u8>>> {
        let gen = self.list_gen.load(Ordering::SeqCst);
        let reg = self.registry.generation();
        self.list_cache
            .lock()
            .iter()
            .find(|(f, g, r, _)| f == filter && *g == gen && *r == reg)
            .map(|(.., b)| b.clone())
    }

    /// Whether shutdown began.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Graceful shutdown: refuse new work, stop and settle every session's active work,
    /// then (if given) answer the `shutdown` request, and flush the output. Idempotent:
    /// returns false if shutdown already ran.
    pub fn shutdown(&self, reply: Option<Responder>) -> bool {
        let mut done = self.shutdown_once.lock();
        if *done {
            if let Some(r) = reply {
                r.ok(&serde_json::json!({"ok": true}));
            }
            return false;
        }
        *done = true;
        self.closing.store(true, Ordering::SeqCst);
        // Outstanding requests to the client fail at once (their tool calls end) and open
        // questions are revoked: nothing waits on a client that is going away.
        self.reverse.close_all();
        self.questions.revoke_all(
            self,
            "the client disconnected or the server is shutting down",
        );
        self.registry.shutdown_all(Duration::from_secs(60));
        self.catalog.stop();
        self.search.stop();
        // Every request read before the end gets its answer (a result, or
        // `server_closed` from work that refuses to start now).
        let own = usize::from(reply.as_ref().is_some_and(Responder::counted));
        let unanswered = self
            .outbox
            .wait_answered(own, Duration::from_secs(30))
            .saturating_sub(own);
        if unanswered > 0 {
            log::warn!("{unanswered} request(s) were still unanswered at shutdown");
        }
        if let Some(r) = reply {
            r.ok(&serde_json::json!({"ok": true}));
        }
        self.outbox.flush();
        true
    }
}

/// The error a request gets when the store failed: `store_busy` (retryable) naming the
/// database file when another connection held the lock past the busy timeout,
/// `internal_error` naming the database file otherwise.
pub fn store_refusal(shared: &Shared, e: &wuu_store::StoreError) -> (ErrorCode, String) {
    let path = shared.opts.home.join(wuu_store::DB_FILE);
    if e.is_busy() {
        (
            ErrorCode::StoreBusy,
            format!(
                "store busy: the database {} stayed locked by another connection or process for longer than {} s; retry later ({e})",
                path.display(),
                wuu_store::DEFAULT_BUSY_TIMEOUT.as_secs()
            ),
        )
    } else {
        (
            ErrorCode::InternalError,
            format!("store: the database {}: {e}", path.display()),
        )
    }
}

/// The error a client request gets when a store call on its path failed: the busy case
/// (another connection held the write lock past the busy timeout) goes through
/// [`store_refusal`] (`store_busy`, retryable, naming the database file); every other
/// store error stays `internal_error` with its `store: …` message.
pub fn store_error(shared: &Shared, e: &wuu_store::StoreError) -> (ErrorCode, String) {
    if e.is_busy() {
        store_refusal(shared, e)
    } else {
        (ErrorCode::InternalError, format!("store: {e}"))
    }
}

/// Answers one request. Requests without id (client notifications) are executed but
/// not answered. Dropping a responder without answering answers `internal_error`, so a
/// request is never left without a response.
pub struct Responder {
    id: Option<RequestId>,
    outbox: Outbox,
    method: &'static str,
    answered: bool,
    /// The conversation the request names (locates images of a deferred-content result).
    thread: Option<String>,
}

impl Responder {
    /// A responder for request `id` of `method`. Requests with an id are counted until
    /// answered, so a shutdown answers everything it has read.
    pub fn new(id: Option<RequestId>, outbox: Outbox, method: &'static str) -> Self {
        if id.is_some() {
            outbox.begin_request();
        }
        Responder {
            id,
            outbox,
            method,
            answered: false,
            thread: None,
        }
    }

    /// Names the conversation of the request (images of its result are located in it
    /// when the client asked for deferred content).
    pub fn with_thread(mut self, thread_id: &str) -> Self {
        self.thread = Some(thread_id.to_owned());
        self
    }

    /// Whether this request is counted as in flight (it has an id and no answer yet).
    pub fn counted(&self) -> bool {
        self.id.is_some()
    }

    /// The method being answered.
    pub fn method(&self) -> &'static str {
        self.method
    }

    /// Answers with a result.
    pub fn ok<T: Serialize>(mut self, result: &T) {
        self.answered = true;
        if let Some(id) = self.id.take() {
            let frame = if self.outbox.defer_content() {
                let mut value = serde_json::to_value(result).expect("serialize result");
                crate::session::attachments::project_frame_at(&mut value, self.thread.as_deref());
                serde_json::to_vec(&Response::ok(id, value)).expect("serialize")
            } else {
                // Straight to bytes: no `Value` tree in between, which was most of a
                // small request's CPU (`initialize`: ~80 µs; issue 15). Keys come in the
                // result's declaration order rather than sorted.
                ok_frame(&id, 512, |frame| {
                    serde_json::to_writer(frame, result).expect("serialize result")
                })
            };
            self.outbox.send_direct(frame);
            self.outbox.answered();
        }
    }

    /// Answers with a result given as already-serialized JSON (`result_json` must be one
    /// valid JSON value; used for cached listings).
    pub fn ok_raw(mut self, result_json: &[u8]) {
        self.answered = true;
        if let Some(id) = self.id.take() {
            let frame = ok_frame(&id, result_json.len(), |frame| {
                frame.extend_from_slice(result_json)
            });
            self.outbox.send_direct(frame);
            self.outbox.answered();
        }
    }

    /// Answers with an error.
    pub fn err(mut self, code: ErrorCode, message: impl Into<String>) {
        self.error(ErrorObject::new(code, message));
    }

    /// Answers with an error object.
    pub fn error(&mut self, e: ErrorObject) {
        self.answered = true;
        if let Some(id) = self.id.take() {
            let frame = serde_json::to_vec(&Response::err(Some(id), e)).expect("serialize");
            self.outbox.send_direct(frame);
            self.outbox.answered();
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if !self.answered && self.id.is_some() {
            log::error!("request {} was dropped without an answer", self.method);
            let m = format!("{} was not answered (internal error)", self.method);
            self.error(ErrorObject::new(ErrorCode::InternalError, m));
        }
    }
}

/// Runs a server over `source`/`sink` until end of input or `shutdown`. Returns the exit
/// code (0 on a graceful end). `on_start` receives the shared state once it exists (the
/// CLI uses it to hook SIGTERM).
pub fn serve(
    opts: ServerOptions,
    source: Box<dyn LineSource>,
    sink: Box<dyn FrameSink>,
    on_start: impl FnOnce(Arc<Shared>),
) -> i32 {
    let shared = match start(opts, sink) {
        Ok(s) => s,
        Err(e) => {
            log::error!("{e}");
            return 1;
        }
    };
    on_start(shared.clone());
    router::read_loop(&shared, source);
    shared.shutdown(None);
    0
}

/// Builds the shared state: loads config, starts the writer, the catalog pool and the
/// lease thread (which opens the store, migrates, and recovers in the background).
pub fn start(opts: ServerOptions, sink: Box<dyn FrameSink>) -> Result<Arc<Shared>, String> {
    std::fs::create_dir_all(&opts.home)
        .map_err(|e| format!("cannot create wuu home {}: {e}", opts.home.display()))?;
    opts.validate()?;
    let loaded = opts.load_config();
    let owner = LeaseOwner::current();
    // The store is opened (a new one created and migrated, which syncs the file several
    // times) by the lease thread, off the startup path: `initialize` never waits for it.
    // What can be known at once is checked here without SQLite (a few µs): a new
    // database file can be created (else the server does not start), an existing one
    // opens for writing and has a sound header. Anything else wrong is reported by the
    // lease thread (`store_error`, seen by later `initialize` calls) and by every
    // request that needs the store. Durability is unchanged: the same open, pragmas and
    // migrations run, on another thread; every write waits for them (`Store::open`).
    let db = opts.home.join(wuu_store::DB_FILE);
    let store_problem = match create_db_file(&db) {
        Ok(()) => wuu_store::Store::check_file(&db).err().map(|e| {
            log::error!("cannot use the store under {}: {e}", opts.home.display());
            format!("the database {} cannot be used: {e}", db.display())
        }),
        Err(e) => {
            return Err(format!(
                "cannot create the store under {}: {e}",
                opts.home.display()
            ))
        }
    };
    let closed = Arc::new(AtomicBool::new(false));
    let closed2 = closed.clone();
    let (outbox, _writer) = transport::start_writer(
        sink,
        Box::new(move || closed2.store(true, Ordering::SeqCst)),
    );
    if let Some(id) = &opts.workspace_id {
        workspace::register(&opts.home, id, &opts.workdir);
    }
    let catalog_entries = init::embedded_catalog(&loaded);
    let panels = crate::panels::PanelState::new(&loaded, &opts.workdir, opts.config_file.is_some());
    let shared = Arc::new_cyclic(|weak| Shared {
        opts: opts.clone(),
        config: RwLock::new(Arc::new(loaded)),
        outbox,
        registry: registry::Registry::start(weak.clone()),
        connections: connections::Connections::new(opts.home.clone()),
        catalog: catalog::CatalogPool::start(weak.clone()),
        search: catalog::CatalogPool::start_named("wuu-search", "search lane", 1, 2, weak.clone()),
        owner,
        closing: AtomicBool::new(false),
        capabilities: RwLock::new(ClientCapabilities::default()),
        model_catalog: Mutex::new(catalog_entries),
        reverse: Default::default(),
        questions: Default::default(),
        browser: Default::default(),
        providers: Mutex::new(Default::default()),
        live_runs: Mutex::new(Default::default()),
        ephemeral_runs: Mutex::new(Default::default()),
        usage: Default::default(),
        panels,
        store_error: Mutex::new(store_problem),
        list_gen: Default::default(),
        list_cache: Mutex::new(vec![]),
        store_checked: AtomicBool::new(false),
        shutdown_once: Mutex::new(false),
    });
    let hb = Arc::downgrade(&shared);
    std::thread::Builder::new()
        .name("wuu-lease-heartbeat".into())
        .spawn(move || heartbeat_loop(hb))
        .map_err(|e| e.to_string())?;
    Ok(shared)
}

/// Creates an empty database file at `path` (mode 0644, as SQLite would) when there is
/// none, so a home where no database can be created is refused at start. SQLite treats
/// an empty file as a new database.
fn create_db_file(path: &std::path::Path) -> std::io::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
    match options.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

/// Registers this process in the store, settles what dead processes left running
/// (crash recovery), then heartbeats this process's leases. Runs off the startup path:
/// a conversation whose lease belonged to a dead owner is also settled when a session
/// takes its lease, so requests never depend on this having finished.
fn heartbeat_loop(shared: std::sync::Weak<Shared>) {
    let Some(s) = shared.upgrade() else { return };
    let home = s.opts.home.clone();
    let owner = s.owner.clone();
    drop(s);
    // This connection stays open for the life of the process: closing the only
    // connection would checkpoint the WAL and sync the file.
    let opened = wuu_store::Store::open_home(&home);
    if let Some(s) = shared.upgrade() {
        if let Err(e) = &opened {
            log::error!("cannot open the store under {}: {e}", home.display());
            *s.store_error.lock() = Some(format!(
                "the database {} cannot be used: {e}",
                home.join(wuu_store::DB_FILE).display()
            ));
        }
        s.store_checked.store(true, Ordering::SeqCst);
    }
    let mut store = opened.ok();
    let mut last_version: Option<i64> = None;
    if let Some(store) = store.as_mut() {
        if let Err(e) = store.heartbeat(&owner) {
            log::warn!("lease heartbeat: {e}");
        }
        match store.recover(&owner, wuu_store::DEFAULT_LEASE_STALE_MS) {
            Ok(r) if !r.is_empty() => log::info!("recovery: {r:?}"),
            Ok(_) => {}
            Err(e) => log::warn!("recovery failed: {e}"),
        }
        // Commands a dead host left running (its launcher killed with it) die now.
        crate::tools::process::sweep(store);
    }
    loop {
        // Between beats (every 3 s) the same thread polls the configuration files for
        // hand edits (`panels::config_tick`, every 500 ms).
        for _ in 0..6 {
            std::thread::sleep(crate::config::watch::TICK);
            match shared.upgrade() {
                Some(s) if !s.is_closing() => crate::panels::config_tick(&s),
                _ => return,
            }
        }
        let Some(store) = store.as_mut() else {
            continue;
        };
        if let Err(e) = store.heartbeat(&owner) {
            log::warn!("lease heartbeat: {e}");
        }
        // Sessions that parked freed their state; hand the freed pages back to the
        // system (at most once a heartbeat).
        if let Some(s) = shared.upgrade() {
            let parked = s.registry.take_parked();
            if parked > 0 {
                let released = registry::return_free_memory();
                log::debug!("{parked} session(s) parked; free memory returned: {released}");
            }
        }
        // Commits by other connections (other processes included) since the last beat
        // invalidate cached listings.
        if let Ok(v) = store.data_version() {
            if Some(v) != last_version {
                last_version = Some(v);
                if let Some(s) = shared.upgrade() {
                    s.threads_changed();
                }
            }
        }
    }
}

/// The client side of an in-memory connection to a server running on its own threads
/// (used by `wuu exec`, `wuu debug app-server`, tests and benches). The same protocol
/// messages as stdio, without a process boundary.
pub struct MemoryClient {
    /// Lines to the server (drop it to send end-of-input: graceful shutdown).
    pub tx: Option<crossbeam_channel::Sender<Vec<u8>>>,
    /// Lines from the server, in order.
    pub rx: crossbeam_channel::Receiver<Vec<u8>>,
    /// The server's reader thread; yields the exit code.
    pub join: Option<std::thread::JoinHandle<i32>>,
    /// The shared state, once started.
    pub shared: Arc<Shared>,
}

/// Capacity of the in-memory output channel, in frames.
pub const MEMORY_OUTPUT_CAPACITY: usize = 1024;

impl MemoryClient {
    /// Starts a server over channels.
    pub fn start(opts: ServerOptions) -> Result<MemoryClient, String> {
        let (in_tx, in_rx) = crossbeam_channel::bounded::<Vec<u8>>(64);
        let (out_tx, out_rx) = crossbeam_channel::bounded::<Vec<u8>>(MEMORY_OUTPUT_CAPACITY);
        let shared = start(opts, Box::new(transport::ChannelSink(out_tx)))?;
        let s2 = shared.clone();
        let join = std::thread::Builder::new()
            .name("wuu-reader".into())
            .spawn(move || {
                router::read_loop(&s2, Box::new(transport::ChannelLines(in_rx)));
                s2.shutdown(None);
                0
            })
            .map_err(|e| e.to_string())?;
        Ok(MemoryClient {
            tx: Some(in_tx),
            rx: out_rx,
            join: Some(join),
            shared,
        })
    }

    /// Sends one request line.
    pub fn send(&self, id: &str, method: &str, params: serde_json::Value) -> Result<(), String> {
        let line =
            serde_json::to_vec(&serde_json::json!({"id": id, "method": method, "params": params}))
                .map_err(|e| e.to_string())?;
        self.tx
            .as_ref()
            .ok_or("connection closed")?
            .send(line)
            .map_err(|_| "server closed".to_owned())
    }

    /// Waits for the response to `id`, passing every other line to `other`.
    pub fn wait_response(
        &self,
        id: &str,
        mut other: impl FnMut(serde_json::Value),
    ) -> Result<serde_json::Value, String> {
        for line in self.rx.iter() {
            let v: serde_json::Value =
                serde_json::from_slice(&line).map_err(|e| format!("bad frame: {e}"))?;
            if v.get("method").is_none() && v.get("id").and_then(|i| i.as_str()) == Some(id) {
                return Ok(v);
            }
            other(v);
        }
        Err("the server closed the connection".into())
    }

    /// Closes input and waits for the graceful shutdown.
    pub fn close(mut self) -> i32 {
        self.tx.take();
        // Keep draining so the writer never blocks while sessions settle.
        let rx = self.rx.clone();
        let drain = std::thread::spawn(move || for _ in rx.iter() {});
        let code = self.join.take().map(|j| j.join().unwrap_or(1)).unwrap_or(0);
        drop(drain);
        code
    }
}

/// A success frame `{"id":ID,"result":…}` (the envelope `Response` writes), the result's
/// JSON written by `result`; `size` is its expected length.
fn ok_frame(id: &RequestId, size: usize, result: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut frame = Vec::with_capacity(size + 48);
    frame.extend_from_slice(b"{\"id\":");
    // Serializing an id (a string or a number) into a Vec cannot fail.
    serde_json::to_writer(&mut frame, id).expect("serialize id");
    frame.extend_from_slice(b",\"result\":");
    result(&mut frame);
    frame.push(b'}');
    frame
}

/// One streaming delta notification (`item/agentMessage/delta`, `item/reasoning/delta`,
/// `item/toolCall/delta`, `item/toolCall/outputDelta`), appended to `frame`:
/// `{"method":M,"params":{"thread_id":…,"turn_id":…,"item_id":…,"delta":…[,"stream":…]}}`,
/// byte for byte what [`Shared::notify`] writes for the protocol's delta structs
/// (field order and escaping included; a unit test compares them). Written by hand from
/// borrowed strings: the hottest frame of the server (issue 15), it skips serde and the
/// per-delta copies of the ids. Sent with [`Shared::send_deltas`].
pub fn delta_frame_into(
    frame: &mut Vec<u8>,
    method: &str,
    ids: [&str; 3],
    delta: &str,
    stream: Option<&str>,
) {
    use crate::session::convert::push_json_str;
    let [thread_id, turn_id, item_id] = ids;
    frame
        .reserve(80 + method.len() + thread_id.len() + turn_id.len() + item_id.len() + delta.len());
    frame.extend_from_slice(b"{\"method\":");
    push_json_str(frame, method);
    frame.extend_from_slice(b",\"params\":{\"thread_id\":");
    push_json_str(frame, thread_id);
    frame.extend_from_slice(b",\"turn_id\":");
    push_json_str(frame, turn_id);
    frame.extend_from_slice(b",\"item_id\":");
    push_json_str(frame, item_id);
    frame.extend_from_slice(b",\"delta\":");
    push_json_str(frame, delta);
    if let Some(stream) = stream {
        frame.extend_from_slice(b",\"stream\":");
        push_json_str(frame, stream);
    }
    frame.extend_from_slice(b"}}");
}

#[cfg(test)]
mod delta_frame_tests {
    use super::delta_frame_into;
    use wuu_protocol::*;

    fn delta_frame(method: &str, ids: [&str; 3], delta: &str, stream: Option<&str>) -> Vec<u8> {
        let mut frame = vec![];
        delta_frame_into(&mut frame, method, ids, delta, stream);
        frame
    }

    fn serde_frame<N: ServerNotification>(n: &N) -> Vec<u8> {
        let mut frame = b"{\"method\":".to_vec();
        serde_json::to_writer(&mut frame, N::METHOD).unwrap();
        frame.extend_from_slice(b",\"params\":");
        serde_json::to_writer(&mut frame, n).unwrap();
        frame.push(b'}');
        frame
    }

    #[test]
    fn delta_frames_are_the_serde_frames_byte_for_byte() {
        let texts = [
            "",
            "tok ",
            "line\nbreak \"quoted\" back\\slash \u{1} \u{1f} \u{7f} é 漢字 🦀",
            "</script>\t\r",
        ];
        for (i, text) in texts.iter().enumerate() {
            let (t, u, it) = (
                format!("th\"{i}"),
                "turn-1".to_owned(),
                format!("item\n{i}"),
            );
            let ids = [t.as_str(), u.as_str(), it.as_str()];
            let m = AgentMessageDelta {
                thread_id: t.clone(),
                turn_id: u.clone(),
                item_id: it.clone(),
                delta: text.to_string(),
            };
            assert_eq!(
                delta_frame(AgentMessageDelta::METHOD, ids, text, None),
                serde_frame(&m)
            );
            let r = ReasoningDelta {
                thread_id: t.clone(),
                turn_id: u.clone(),
                item_id: it.clone(),
                delta: text.to_string(),
            };
            assert_eq!(
                delta_frame(ReasoningDelta::METHOD, ids, text, None),
                serde_frame(&r)
            );
            let c = ToolCallDelta {
                thread_id: t.clone(),
                turn_id: u.clone(),
                item_id: it.clone(),
                delta: text.to_string(),
            };
            assert_eq!(
                delta_frame(ToolCallDelta::METHOD, ids, text, None),
                serde_frame(&c)
            );
            for stream in [None, Some("stdout"), Some("std\"err")] {
                let o = ToolCallOutputDelta {
                    thread_id: t.clone(),
                    turn_id: u.clone(),
                    item_id: it.clone(),
                    delta: text.to_string(),
                    stream: stream.map(str::to_owned),
                };
                assert_eq!(
                    delta_frame(ToolCallOutputDelta::METHOD, ids, text, stream),
                    serde_frame(&o)
                );
            }
        }
    }
}
