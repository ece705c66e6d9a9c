//! The panels around the conversation (issue 16): settings updates
//! (`config/advanced/update`, `config/general/update`, `config/provider/remove`), live
//! configuration (`config/changed`, `config/error`), instructions (`instructions/list`),
//! skills (`skill/list`, the model's `load_skill` tool) and one-shot helpers
//! (`text/polish`, `git/commit-message`, `thread/regenerate-title`).
//!
//! Threads: the router hands these requests to [`handle`] on the reader thread, which
//! never touches the disk or the network: every request runs on one of two small work
//! pools. The *views* pool (2 threads, queue of 64; a full queue makes the reader wait,
//! like the catalog pool) serves quick disk work: config edits, listings. The *helpers*
//! pool (2 threads, queue of 8) serves one-shot model calls of up to a minute; when its
//! queue is full the request is refused at once with `error` ("retry shortly") instead
//! of stalling the reader behind minutes of model latency.

pub mod helpers;
pub mod instructions;
pub mod settings;
pub mod skills;
pub mod workspace;

use crate::config::LoadedConfig;
use crate::server::{Responder, Shared};
use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use wuu_protocol::{ClientRequest, ErrorCode};

/// Per-server state of the panels.
pub struct PanelState {
    /// Hand-edit detection of the configuration files.
    pub watcher: crate::config::watch::Watcher,
    /// Discovered skills (rescanned when their files change).
    pub skills: skills::Catalog,
    /// SHA-256 of the last rejected content per file (`config/error` is sent once per
    /// distinct rejected document).
    rejected: Mutex<HashMap<PathBuf, [u8; 32]>>,
}

impl PanelState {
    /// State for a server started with `loaded` over `workdir`.
    pub fn new(loaded: &LoadedConfig, workdir: &std::path::Path, explicit: bool) -> PanelState {
        PanelState {
            watcher: crate::config::watch::Watcher::new(loaded.watched_paths(workdir, explicit)),
            skills: skills::Catalog::default(),
            rejected: Mutex::new(HashMap::new()),
        }
    }
}

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    tx: Sender<Job>,
}

impl Pool {
    fn start(name: &str, threads: usize, queue: usize) -> Pool {
        let (tx, rx) = bounded::<Job>(queue);
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("wuu-{name}-{i}"))
                .spawn(move || {
                    for job in rx.iter() {
                        // A panic in one job must not take the pool thread with it; the
                        // job's responder answers `internal_error` when dropped.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    }
                });
            if let Err(e) = spawned {
                log::error!("cannot start the {name} pool thread: {e}");
            }
        }
        Pool { tx }
    }
}

fn views() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| Pool::start("panels", 2, 64))
}

fn helper_pool() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| Pool::start("helpers", 2, 8))
}

/// Runs `f` on the views pool, or refuses at once (`overloaded`) when its queue is full:
/// the reader never waits for room.
fn on_views(
    shared: &Arc<Shared>,
    reply: Responder,
    f: impl FnOnce(&Arc<Shared>, Responder) + Send + 'static,
) {
    let s = shared.clone();
    let slot = Arc::new(Mutex::new(Some(reply)));
    let slot2 = slot.clone();
    let job: Job = Box::new(move || {
        let Some(reply) = slot2.lock().take() else {
            return;
        };
        if s.is_closing() {
            return reply.err(ErrorCode::ServerClosed, "the server is shutting down");
        }
        f(&s, reply)
    });
    if let Err(e) = views().tx.try_send(job) {
        if let Some(reply) = slot.lock().take() {
            match e {
                TrySendError::Full(_) => reply.err(
                    ErrorCode::Overloaded,
                    "overloaded: the panels queue is full (64 requests waiting); nothing was done, retry later",
                ),
                TrySendError::Disconnected(_) => {
                    reply.err(ErrorCode::InternalError, "the panels pool is gone")
                }
            }
        }
    }
}

/// Runs `f` on the helpers pool, or refuses at once when its queue is full.
fn on_helpers(
    shared: &Arc<Shared>,
    reply: Responder,
    f: impl FnOnce(&Arc<Shared>, Responder) + Send + 'static,
) {
    let s = shared.clone();
    let slot = Arc::new(Mutex::new(Some(reply)));
    let slot2 = slot.clone();
    let job: Job = Box::new(move || {
        let Some(reply) = slot2.lock().take() else {
            return;
        };
        if s.is_closing() {
            return reply.err(ErrorCode::ServerClosed, "the server is shutting down");
        }
        f(&s, reply)
    });
    match helper_pool().tx.try_send(job) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            if let Some(reply) = slot.lock().take() {
                reply.err(
                    ErrorCode::Overloaded,
                    "overloaded: too many model helper requests are waiting (8); retry shortly",
                );
            }
        }
    }
}

/// Handles a panel request routed `inline` (see the module docs for where it runs).
pub fn handle(shared: &Arc<Shared>, req: ClientRequest, reply: Responder) {
    match req {
        ClientRequest::ConfigAdvancedUpdate(p) => on_views(shared, reply, move |s, r| {
            settings::advanced_update(s, p, r)
        }),
        ClientRequest::ConfigGeneralUpdate(p) => {
            on_views(shared, reply, move |s, r| settings::general_update(s, p, r))
        }
        ClientRequest::ConfigProviderRemove(p) => on_views(shared, reply, move |s, r| {
            settings::provider_remove(s, p, r)
        }),
        ClientRequest::SkillList(_) => on_views(shared, reply, skills::list),
        ClientRequest::InstructionsList(p) => {
            on_views(shared, reply, move |s, r| instructions::list(s, p, r))
        }
        ClientRequest::TextPolish(p) => {
            on_helpers(shared, reply, move |s, r| helpers::polish(s, p, r))
        }
        ClientRequest::GitCommitMessage(p) => {
            on_helpers(shared, reply, move |s, r| helpers::commit_message(s, p, r))
        }
        ClientRequest::ThreadRegenerateTitle(p) => on_helpers(shared, reply, move |s, r| {
            helpers::regenerate_title(s, p, r)
        }),
        req @ (ClientRequest::WorkspaceGitStatus(_)
        | ClientRequest::WorkspaceGitChanges(_)
        | ClientRequest::WorkspaceGitDiff(_)
        | ClientRequest::WorkspaceDirectoryList(_)
        | ClientRequest::WorkspaceFileRead(_)
        | ClientRequest::WorkspaceFileResolve(_)
        | ClientRequest::WorkspaceFileChunk(_)) => {
            on_views(shared, reply, move |s, r| workspace::handle(s, req, r))
        }
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not an inline method", other.method()),
        ),
    }
}

/// Puts `new` in force: swaps the configuration snapshot, drops provider instances
/// whose connection changed (they are rebuilt on next use; running turns keep the
/// instance they started with) and refreshes the catalog entries of configured
/// providers. Call with [`crate::config::edit::WRITE_LOCK`] held.
pub fn apply_loaded(shared: &Shared, new: LoadedConfig) -> Arc<LoadedConfig> {
    let old = shared.config();
    let new = Arc::new(new);
    *shared.config.write() = new.clone();
    {
        let old_p = old.config.providers.clone().unwrap_or_default();
        let new_p = new.config.providers.clone().unwrap_or_default();
        let mut instances = shared.providers.lock();
        instances.retain(|id, _| old_p.get(id) == new_p.get(id) && new_p.contains_key(id));
    }
    {
        let fresh = crate::server::init::embedded_catalog(&new);
        let old_ids: Vec<String> = old
            .config
            .providers
            .iter()
            .flatten()
            .map(|(k, _)| k.clone())
            .collect();
        let mut catalog = shared.model_catalog.lock();
        // Entries of providers that are no longer configured (and not embedded) go.
        catalog.retain(|c| fresh.iter().any(|f| f.id == c.id) || !old_ids.contains(&c.id));
        for entry in fresh {
            let configured = new
                .config
                .providers
                .as_ref()
                .is_some_and(|p| p.contains_key(&entry.id));
            match catalog.iter_mut().find(|c| c.id == entry.id) {
                Some(slot) if configured => *slot = entry,
                Some(_) => {}
                None => catalog.push(entry),
            }
        }
    }
    new
}

/// Reloads the configuration from disk (same sources and `--provider`/`--model`
/// overrides as at start).
pub fn reload(shared: &Shared) -> LoadedConfig {
    shared.opts.load_config()
}

/// One tick of the configuration watcher (called by the lease-heartbeat thread every
/// [`crate::config::watch::TICK`]). A changed file that does not validate is reported
/// with `config/error {message, path, reason}` (once per distinct content) and the
/// configuration in force stays; otherwise the configuration is reloaded and announced
/// with `config/changed`.
pub fn config_tick(shared: &Shared) {
    let _guard = crate::config::edit::WRITE_LOCK.lock();
    let changed = shared.panels.watcher.poll();
    if changed.is_empty() {
        return;
    }
    for path in &changed {
        if shared.opts.ignore_user_config && *path == shared.config().config_path {
            continue;
        }
        // A removed user config is treated like an invalid one: the configuration in
        // force stays (a missing optional project layer is a legitimate change).
        let removed = *path == shared.config().config_path
            && matches!(std::fs::symlink_metadata(path), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        // Project layers are read beneath the workspace (never through a link out).
        let beneath =
            (*path != shared.config().config_path).then_some(shared.opts.workdir.as_path());
        let verdict = if removed {
            Err("the file was removed".to_owned())
        } else {
            crate::config::read_layer(path, beneath).map(drop)
        };
        if let Err(reason) = verdict {
            let digest = crate::config::layer_bytes(path, beneath)
                .ok()
                .flatten()
                .map(|b| {
                    use sha2::Digest;
                    sha2::Sha256::digest(&b).into()
                })
                .unwrap_or([0; 32]);
            let mut rejected = shared.panels.rejected.lock();
            if rejected.get(path) == Some(&digest) {
                return;
            }
            rejected.insert(path.clone(), digest);
            drop(rejected);
            let shown = path.display().to_string();
            let reason = reason
                .strip_prefix(&format!("{shown}: "))
                .unwrap_or(&reason)
                .to_owned();
            log::warn!("config edit rejected: {shown}: {reason}");
            let _ = shared.notify(&wuu_protocol::ConfigError {
                message: format!("{shown}: {reason} (the previous configuration stays in force)"),
                path: shown,
                reason,
            });
            return;
        }
    }
    shared.panels.rejected.lock().clear();
    let new = reload(shared);
    let cfg = apply_loaded(shared, new);
    shared.panels.skills.invalidate();
    log::info!(
        "configuration reloaded after a hand edit of {}",
        changed
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let agent = cfg.agent();
    let _ = shared.notify(&wuu_protocol::ConfigChanged {
        provider: cfg.default_provider(),
        model: cfg.default_model(),
        effort: agent.effort.clone(),
        variant: agent.effort.clone(),
        model_aliases: settings::model_aliases(&cfg),
        providers: crate::server::init::provider_summaries(&cfg),
        advanced_settings: settings::advanced_settings(&cfg),
        general_settings: settings::general_settings(&cfg),
        paths: changed.iter().map(|p| p.display().to_string()).collect(),
    });
}
