//! The app-server's top: the stdio reader and the router over the method table, the
//! catalog pool for listings, and the composition root ([`start`]) that builds every
//! feature's state and hands it down.
//!
//! Thread layout (DESIGN.md): one reader thread parses and routes lines; one writer
//! thread ([`crate::outbound::transport`]) alone owns the output; one session thread per
//! live conversation ([`crate::session`]); a small catalog pool for listings and model
//! catalogs. No async runtime. Protocol: spec `app-server.md` (`wuu-app-server/v0.1`).

pub mod catalog;
pub mod engine_auth;
pub mod engines;
pub mod folders;
pub mod init;
pub mod params_path;
pub mod router;
pub mod schema;
pub mod workspace;

use crate::outbound::transport::{self, FrameSink, LineSource};
use crate::outbound::Responder;
use crate::provider::catalog::ModelCatalog;
use crate::session::connections::Connections;
use crate::session::live_config::LiveConfig;
use crate::session::registry::{self, Registry};
use crate::session::takeover::{self, Takeover};
use crate::session::{Host, ServerOptions};
use parking_lot::{Mutex, RwLock};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use wuu_protocol::ClientCapabilities;
use wuu_store::LeaseOwner;

/// A serialized listing and the generations it is valid for:
/// `(filter, list_gen, registry generation, bytes)`.
pub type CachedListing = (wuu_store::ThreadFilter, u64, u64, Arc<Vec<u8>>);

/// The composition root's bundle: the sessions' [`Host`] and what only the reader
/// and the router use (the listing pools and their cache, the usage scans). Built by
/// [`start`]; a plain bundle of handles.
pub struct Shared {
    /// The handles the sessions and feature handlers share.
    pub host: Arc<Host>,
    /// Catalog pool.
    pub catalog: catalog::CatalogPool,
    /// The search lane: `thread/search` runs here (one worker, a second while one
    /// overruns), so searches never hold up listings on the catalog pool.
    pub search: catalog::CatalogPool,
    /// Serialized listings the reader may answer inline while nothing changed:
    /// filter → (list_gen, registry generation, bytes).
    pub list_cache: Mutex<Vec<CachedListing>>,
    /// Usage views' shared scans and caches, quota snapshots.
    pub usage: crate::usage::UsageState,
    shutdown_once: Mutex<bool>,
}

impl Shared {
    /// A cached listing for `filter` that is still valid.
    pub fn cached_listing(&self, filter: &wuu_store::ThreadFilter) -> Option<Arc<Vec<u8>>> {
        let gen = self.host.list_gen.load(Ordering::SeqCst);
        let reg = self.host.registry.generation();
        self.list_cache
            .lock()
            .iter()
            .find(|(f, g, r, _)| f == filter && *g == gen && *r == reg)
            .map(|(.., b)| b.clone())
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
        self.host.closing.store(true, Ordering::SeqCst);
        // Outstanding requests to the client fail at once (their tool calls end) and open
        // questions are revoked: nothing waits on a client that is going away.
        self.host.reverse.close_all();
        self.host.questions.revoke_all(
            &self.host,
            "the client disconnected or the server is shutting down",
        );
        self.host.registry.shutdown_all(Duration::from_secs(60));
        self.host.mcp.shutdown();
        self.catalog.stop();
        self.search.stop();
        // Every request read before the end gets its answer (a result, or
        // `server_closed` from work that refuses to start now).
        let own = usize::from(reply.as_ref().is_some_and(Responder::counted));
        let unanswered = self
            .host
            .outbox
            .wait_answered(own, Duration::from_secs(30))
            .saturating_sub(own);
        if unanswered > 0 {
            log::warn!("{unanswered} request(s) were still unanswered at shutdown");
        }
        if let Some(r) = reply {
            r.ok(&serde_json::json!({"ok": true}));
        }
        self.host.outbox.flush();
        true
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
    let location = store_location(&opts, &loaded)?;
    let owner = LeaseOwner::current();
    let takeover = Takeover::new(loaded.config.store.as_ref().and_then(|s| s.lease_stale_ms));
    // The store is opened (a new one created and migrated, which syncs the file several
    // times) by the lease thread, off the startup path: `initialize` never waits for it.
    // What can be known at once is checked here without SQLite (a few µs): a new
    // database file can be created (else the server does not start), an existing one
    // opens for writing and has a sound header. Anything else wrong is reported by the
    // lease thread (`store_error`, seen by later `initialize` calls) and by every
    // request that needs the store. Durability is unchanged: the same open, pragmas and
    // migrations run, on another thread; every write waits for them (`Store::open`).
    // (A PostgreSQL database is reached by the lease thread; a failure is reported the
    // same way.)
    let store_problem = match &location {
        wuu_store::Location::Sqlite(db) => match create_db_file(db) {
            Ok(()) => wuu_store::Store::check_file(db).err().map(|e| {
                log::error!("cannot use the store under {}: {e}", opts.home.display());
                format!("the database {} cannot be used: {e}", db.display())
            }),
            Err(e) => {
                return Err(format!(
                    "cannot create the store under {}: {e}",
                    opts.home.display()
                ))
            }
        },
        wuu_store::Location::Postgres(_) => None,
    };
    crate::tools::process::use_store(&opts.home, &location);
    let closed = Arc::new(AtomicBool::new(false));
    let closed2 = closed.clone();
    let (outbox, _writer) = transport::start_writer(
        sink,
        Box::new(move || closed2.store(true, Ordering::SeqCst)),
    );
    if let Some(id) = &opts.workspace_id {
        workspace::register(&opts.home, id, &opts.workdir);
    }
    let catalog_entries = crate::provider::catalog::embedded_catalog(&loaded);
    let live = LiveConfig::new(&loaded, &opts.workdir, opts.config_file.is_some());
    let mcp = crate::mcp::Manager::new(&opts.home, &opts.workdir, opts.safe_mode);
    mcp.reconcile(&loaded);
    let host = Arc::new_cyclic(|weak| Host {
        opts: opts.clone(),
        store: location.clone(),
        config: RwLock::new(Arc::new(loaded)),
        outbox,
        registry: Registry::start(weak.clone()),
        connections: Connections::new(location.clone()),
        owner,
        takeover,
        closing: AtomicBool::new(false),
        capabilities: RwLock::new(ClientCapabilities::default()),
        model_catalog: ModelCatalog::new(catalog_entries),
        reverse: Default::default(),
        questions: Default::default(),
        browser: Default::default(),
        activities: Default::default(),
        providers: Default::default(),
        runs: Default::default(),
        live,
        mcp: mcp.clone(),
        agents: Default::default(),
        store_error: Mutex::new(store_problem),
        list_gen: Default::default(),
        background: crate::tools::background::Background::new(&opts.home),
    });
    crate::session::background::install(&host);
    let out = host.outbox.clone();
    mcp.set_hook(Arc::new(move |status: wuu_protocol::McpServerStatus| {
        let _ = out.notify(&status);
    }));
    let shared = Arc::new_cyclic(|weak| Shared {
        host,
        catalog: catalog::CatalogPool::start(weak.clone()),
        search: catalog::CatalogPool::start_named("wuu-search", "search lane", 1, 2, weak.clone()),
        usage: Default::default(),
        list_cache: Mutex::new(vec![]),
        shutdown_once: Mutex::new(false),
    });
    let hb = Arc::downgrade(&shared);
    crate::util::spawn("wuu-lease-heartbeat".into(), move || heartbeat_loop(hb))
        .map_err(|e| e.to_string())?;
    if location.is_postgres() {
        let weak = Arc::downgrade(&shared);
        crate::util::spawn("wuu-store-changes".into(), move || {
            changes_loop(weak, location)
        })
        .map_err(|e| e.to_string())?;
    }
    Ok(shared)
}

/// Where this host keeps its conversations: `WUU_STORE_URL` when set, else the
/// config's `store.url`, else `$WUU_HOME/wuu.db`. Errors (the server does not start):
/// a URL that is not PostgreSQL's, or a PostgreSQL URL in a build without the
/// `postgres` feature. Messages never show a password.
fn store_location(
    opts: &ServerOptions,
    loaded: &crate::config::LoadedConfig,
) -> Result<wuu_store::Location, String> {
    let env = std::env::var("WUU_STORE_URL").ok();
    let url = match env.filter(|u| !u.trim().is_empty()) {
        Some(url) => Some(url),
        None if loaded.config.store.is_none() => raw_store_url(loaded)?,
        None => loaded.config.store.as_ref().and_then(|s| s.url.clone()),
    };
    let location = wuu_store::Location::choose(&opts.home, url.as_deref())?;
    if location.is_postgres() && !cfg!(feature = "postgres") {
        return Err(format!(
            "the store {} is a PostgreSQL database, but {}",
            location.shown(),
            wuu_store::NO_POSTGRES
        ));
    }
    Ok(location)
}

/// The store a user file names when the file as a whole was refused (an error anywhere
/// in it makes the server run on the embedded defaults and report `invalid_config`):
/// its `store.url` when that is a string, so a host never acknowledges writes into a
/// store other hosts cannot see. Errors (the server does not start): a `store` section
/// whose `url` is present but not a string, or that is not an object.
fn raw_store_url(loaded: &crate::config::LoadedConfig) -> Result<Option<String>, String> {
    if !loaded.issues.iter().any(|i| i.code == "invalid_config") {
        return Ok(None);
    }
    let Ok(text) = std::fs::read_to_string(&loaded.config_path) else {
        return Ok(None);
    };
    let Ok(raw) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Ok(None);
    };
    let refuse = |why: &str| {
        Err(format!(
            "{}: {why}; the server does not start on another store than the one the \
             configuration names",
            loaded.config_path.display()
        ))
    };
    match raw.get("store") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::Object(store)) => match store.get("url") {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(url)) => Ok(Some(url.clone())),
            Some(_) => refuse("store.url is not a string"),
        },
        Some(_) => refuse("store is not an object"),
    }
}

/// How often [`changes_loop`] looks for other hosts' changes.
const CHANGES_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// On a shared PostgreSQL store: listens for the changes other hosts commit and
/// invalidates cached listings within [`CHANGES_POLL`] of a notification (the catalog
/// pool's cached listings follow [`wuu_store::Store::data_version`], which the same
/// notifications advance). A broken connection counts as a change (notifications may
/// have been missed) and is reopened with backoff.
fn changes_loop(shared: std::sync::Weak<Shared>, location: wuu_store::Location) {
    let mut store: Option<wuu_store::Store> = None;
    let mut wait = CHANGES_POLL;
    loop {
        std::thread::sleep(wait);
        let Some(s) = shared.upgrade() else { return };
        if s.host.is_closing() {
            return;
        }
        let changed = match store.as_mut() {
            None => match wuu_store::Store::open_location(&location)
                .and_then(|mut st| st.listen().map(|()| st))
            {
                Ok(st) => {
                    store = Some(st);
                    true
                }
                Err(e) => {
                    log::warn!("store change feed: {e}");
                    wait = (wait * 2).min(std::time::Duration::from_secs(2));
                    continue;
                }
            },
            Some(st) => match st.changes() {
                Ok(ids) => !ids.is_empty(),
                Err(e) => {
                    log::warn!("store change feed: {e}");
                    store = None;
                    true
                }
            },
        };
        wait = CHANGES_POLL;
        if changed {
            s.host.threads_changed();
        }
    }
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

/// Opens the heartbeat thread's connection, registers this process (a first heartbeat),
/// settles what dead owners left running (crash recovery, owners stale after `stale_ms`;
/// an owner that heartbeat after `started_at_ms`, this process's start, is left to the
/// takeover sweep) and kills the commands a dead host left running. Errors: the store
/// cannot be opened; a failed heartbeat or recovery is only logged.
fn open_and_recover(
    location: &wuu_store::Location,
    owner: &LeaseOwner,
    stale_ms: i64,
    started_at_ms: i64,
) -> Result<wuu_store::Store, wuu_store::StoreError> {
    let mut store = wuu_store::Store::open_location(location)?;
    if let Err(e) = store.heartbeat(owner) {
        log::warn!("lease heartbeat: {e}");
    }
    match store.recover(owner, stale_ms, started_at_ms) {
        Ok(r) if !r.is_empty() => log::info!("recovery: {r:?}"),
        Ok(_) => {}
        Err(e) => log::warn!("recovery failed: {e}"),
    }
    // Commands a dead host left running (its launcher killed with it) die now.
    crate::tools::process::sweep(&mut store);
    Ok(store)
}

/// Registers this process in the store, settles what dead processes left running
/// (crash recovery), then heartbeats this process's leases and sweeps for conversations
/// whose owner died since ([`takeover::sweep`]), every [`Takeover::beat_interval`].
/// Runs off the startup path: a conversation whose lease belonged to a dead owner is
/// also taken over when its session next handles a message, so requests never depend on
/// this having finished. Between beats the same thread polls the configuration files
/// for hand edits (`session::live_config::config_tick`, every
/// [`crate::config::watch::TICK`]).
fn heartbeat_loop(shared: std::sync::Weak<Shared>) {
    let Some(s) = shared.upgrade() else { return };
    let location = s.host.store.clone();
    let owner = s.host.owner.clone();
    let settings = s.host.takeover.clone();
    drop(s);
    // This connection stays open for the life of the process: closing the only
    // connection would checkpoint the WAL and sync the file.
    let opened = open_and_recover(&location, &owner, settings.stale_ms, settings.started_at_ms);
    if let Some(s) = shared.upgrade() {
        if let Err(e) = &opened {
            log::error!("cannot open the store {}: {e}", location.shown());
            *s.host.store_error.lock() = Some(format!(
                "the database {} cannot be used: {e}",
                location.shown()
            ));
        }
    }
    let mut store = opened.ok();
    let mut last_version: Option<i64> = None;
    let beat = settings.beat_interval();
    let tick = crate::config::watch::TICK;
    let mut next_beat = std::time::Instant::now() + beat;
    let mut next_tick = std::time::Instant::now() + tick;
    loop {
        let now = std::time::Instant::now();
        std::thread::sleep(next_beat.min(next_tick).saturating_duration_since(now));
        let Some(s) = shared.upgrade().filter(|s| !s.host.is_closing()) else {
            return;
        };
        let now = std::time::Instant::now();
        if now >= next_tick {
            next_tick = now + tick;
            crate::session::live_config::config_tick(&s.host);
        }
        if now < next_beat {
            continue;
        }
        next_beat = now + beat;
        // A database server that was unreachable at start is tried again every beat:
        // until this thread holds a connection, nothing heartbeats this host's leases,
        // and another host would take over the conversations it runs once they went
        // stale. (A SQLite file that could not be opened stays refused.)
        if store.is_none() && location.is_postgres() {
            match open_and_recover(&location, &owner, settings.stale_ms, settings.started_at_ms) {
                Ok(opened) => {
                    log::info!("the store {} is reachable again", location.shown());
                    *s.host.store_error.lock() = None;
                    store = Some(opened);
                }
                Err(e) => log::debug!("the store {} is still unreachable: {e}", location.shown()),
            }
        }
        let Some(store) = store.as_mut() else {
            continue;
        };
        if let Err(e) = store.heartbeat(&owner) {
            log::warn!("lease heartbeat: {e}");
        }
        takeover::sweep(&s.host, store);
        index_text(store);
        // Sessions that parked freed their state; hand the freed pages back to the
        // system (at most once a heartbeat).
        let parked = s.host.registry.take_parked();
        if parked > 0 {
            let released = registry::return_free_memory();
            log::debug!("{parked} session(s) parked; free memory returned: {released}");
        }
        // Commits by other connections (other processes included) since the last beat
        // invalidate cached listings.
        if let Ok(v) = store.data_version() {
            if Some(v) != last_version {
                last_version = Some(v);
                s.host.threads_changed();
            }
        }
    }
}

/// Items the text index takes in one transaction, and at most this many transactions a
/// beat: turns waiting at the write gate wait for one batch at most.
const TEXT_INDEX_BATCH: usize = 256;
const TEXT_INDEX_BATCHES: usize = 64;

/// Writes the messages stored since the last beat into the search's text index, off
/// the turns that stored them ([`wuu_store::Store::index_text`]; the search reads what
/// is not indexed yet directly).
fn index_text(store: &mut wuu_store::Store) {
    for _ in 0..TEXT_INDEX_BATCHES {
        match store.index_text(TEXT_INDEX_BATCH) {
            Ok(n) if n >= TEXT_INDEX_BATCH => {}
            Ok(_) => break,
            Err(e) => {
                log::warn!("text index: {e}");
                break;
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
