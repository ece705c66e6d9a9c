//! Conversation lifecycle: `thread/start`, `thread/fork`, `thread/resume`,
//! `thread/rename`, `thread/archive`, `thread/delete` (spec `app-server.md` §3.1, §6
//! rules 11, 12, 14, 18; seed: resume, delete archived, titles).

use super::convert::{item_wire, thread_wire, TurnState};
use super::{Session, SessionMsg, Snapshot};
use crate::config::LoadedConfig;
use crate::outbound::Responder;
use crate::session::connections::PooledStore;
use crate::session::Host;
use crate::tools::PermissionMode;
use crate::util::now_ms;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use wuu_protocol::*;
use wuu_store::{DeleteOutcome, ItemRow, LeaseOutcome, Store, ThreadRow};

type Refusal = (ErrorCode, String);

/// Longest accepted title, in characters.
pub const MAX_TITLE_CHARS: usize = 500;
type Created = (Option<PooledStore>, ThreadRow, Vec<TurnState>);

/// Loads a persisted conversation and its history with a fresh connection.
/// `Ok(None)` when it does not exist.
pub fn load(
    shared: &Host,
    id: &str,
) -> Result<Option<(PooledStore, ThreadRow, Vec<TurnState>)>, String> {
    let Some((mut store, thread)) = load_thread(shared, id).map_err(|e| format!("store: {e}"))?
    else {
        return Ok(None);
    };
    let turns = load_turns(shared, &mut store, id)?;
    Ok(Some((store, thread, turns)))
}

/// Loads a persisted conversation's row (not its history) with a fresh connection.
/// `Ok(None)` when it does not exist.
pub fn load_thread(
    shared: &Host,
    id: &str,
) -> Result<Option<(PooledStore, ThreadRow)>, wuu_store::StoreError> {
    if crate::util::is_ephemeral(id) {
        return Ok(None);
    }
    let store = shared.connections.take()?;
    let Some(thread) = store.get_thread(id)? else {
        return Ok(None);
    };
    Ok(Some((store, thread)))
}

/// Loads a conversation's whole history. A turn left running by a dead process is
/// settled first (no turn is reported running without a live lease); items left in
/// progress inside settled turns are shown settled.
pub fn load_turns(shared: &Host, store: &mut Store, id: &str) -> Result<Vec<TurnState>, String> {
    let mut history = store.load_history(id).map_err(|e| format!("store: {e}"))?;
    if history.iter().any(|t| t.turn.status == "in_progress") {
        // Taking the lease settles a dead owner's turn as interrupted; a live owner
        // elsewhere keeps it.
        if let Ok(LeaseOutcome::Acquired { .. }) = store.acquire_lease(id, &shared.owner) {
            let _ = store.release_lease(id, &shared.owner);
            history = store.load_history(id).map_err(|e| format!("store: {e}"))?;
        }
    }
    Ok(history
        .into_iter()
        .map(|t| {
            let settled = t.turn.status != "in_progress";
            let mut items: Vec<ThreadItem> = t.items.iter().map(item_wire).collect();
            if settled {
                for it in &mut items {
                    if it.status.as_deref() == Some("in_progress") {
                        if it.item_type == "tool_call" {
                            it.status = Some("failed".into());
                            it.error.get_or_insert_with(|| {
                                "interrupted: the outcome is unknown".into()
                            });
                        } else {
                            it.status = Some("completed".into());
                        }
                    }
                }
            }
            TurnState { items, row: t.turn }
        })
        .collect())
}

fn invalid(msg: impl Into<String>) -> Refusal {
    (
        ErrorCode::InvalidParams,
        format!("invalid params: {}", msg.into()),
    )
}

fn clean(s: &Option<String>) -> Option<String> {
    s.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// `thread/start`: validates the selection, then persists (unless ephemeral).
pub fn create(shared: &Arc<Host>, p: ThreadStartParams) -> Result<Created, Refusal> {
    let cfg = shared.config();
    let engine = select_engine(&cfg, &p)?;
    check_workspace(&p)?;
    let mode = select_mode(&cfg, &p)?;
    if engine == crate::engine::opencode::ID && mode == "read_only" {
        return Err(invalid(
            "permission_mode: engine \"opencode\" has no read-only mode that keeps Wuu's read-only boundary; choose standard or unconfined",
        ));
    }
    let Selection {
        provider,
        model,
        effort,
        variant,
    } = select_model(&cfg, &p)?;
    let cwd = resolve_cwd(shared, &p)?;
    let ephemeral = p.ephemeral.unwrap_or(false);
    let now = now_ms();
    let thread = ThreadRow {
        id: crate::util::new_thread_id(ephemeral),
        cwd: cwd.to_string_lossy().into_owned(),
        title: None,
        title_revision: 0,
        preview: String::new(),
        provider,
        model,
        variant,
        effort,
        permission_mode: mode,
        engine_id: engine,
        archived: false,
        archive_reason: None,
        forked_from_id: None,
        forked_from_turn_id: None,
        forked_from_item_id: None,
        created_at_ms: now,
        updated_at_ms: now,
        extra: match clean(&p.workspace_id).or_else(|| shared.opts.workspace_id.clone()) {
            Some(w) => serde_json::json!({ "workspace_id": w }),
            None => serde_json::json!({}),
        },
        damage: None,
    };
    if ephemeral {
        return Ok((None, thread, vec![]));
    }
    let mut store = open(shared)?;
    store
        .insert_thread(&thread)
        .map_err(|e| crate::session::host::store_refusal(shared, &e))?;
    shared.threads_changed();
    Ok((Some(store), thread, vec![]))
}

/// The engine of a new conversation: the requested one, else the configured default,
/// else the built-in one. It must be available now; never a silent fallback (seed:
/// default-engine rules), and it is refused before anything is stored.
fn select_engine(cfg: &LoadedConfig, p: &ThreadStartParams) -> Result<String, Refusal> {
    let engine = clean(&p.engine)
        .or_else(|| {
            cfg.config
                .engines
                .as_ref()
                .and_then(|e| clean(&e.default_engine))
        })
        .unwrap_or_else(|| "wuu".into());
    if engine != crate::engine::BUILTIN {
        if !crate::engine::catalog::known(&engine) {
            return Err(invalid(format!(
                "engine: unknown engine {:?}",
                crate::util::clip(&engine, 100)
            )));
        }
        if let Err(why) = crate::engine::catalog::available(
            &engine,
            cfg.config.engines.as_ref(),
            &crate::engine::catalog::Env::current(),
        ) {
            return Err((ErrorCode::Error, why));
        }
    }
    Ok(engine)
}

/// Refuses workspace fields this server does not serve: a workspace other than
/// `shared`, a `workspace_id` that is not a valid directory name, a `base_revision`.
fn check_workspace(p: &ThreadStartParams) -> Result<(), Refusal> {
    if let Some(w) = clean(&p.workspace) {
        if w != "shared" {
            return Err(invalid(format!(
                "workspace: {w:?} is not supported (only \"shared\")"
            )));
        }
    }
    if let Some(w) = clean(&p.workspace_id) {
        // Same rule as `--workspace-id` and `workspace/state/cleanup`: the id names a
        // directory under `$WUU_HOME`, so `../x`, NUL bytes and long ids are refused.
        if !crate::util::valid_workspace_id(&w) {
            return Err(invalid(format!(
                "workspace_id: {:?} is not a workspace id (use 1-128 letters, digits, '.', '_' or '-')",
                crate::util::clip(&w, 40)
            )));
        }
    }
    if clean(&p.base_revision).is_some() {
        return Err(invalid("base_revision: requires workspace \"worktree\""));
    }
    Ok(())
}

/// The permission mode of a new conversation: the requested one, else the configured
/// default, else `standard`.
fn select_mode(cfg: &LoadedConfig, p: &ThreadStartParams) -> Result<String, Refusal> {
    let mode = clean(&p.permission_mode)
        .or_else(|| cfg.agent().permission_mode)
        .unwrap_or_else(|| "standard".into());
    if PermissionMode::parse(&mode).is_none() {
        return Err(invalid(format!(
            "permission_mode: {mode:?} is not one of standard, read_only, unconfined"
        )));
    }
    Ok(mode)
}

/// The provider, model, effort and variant of a new conversation.
struct Selection {
    provider: String,
    model: String,
    effort: String,
    variant: String,
}

/// Resolves the model selection of a new conversation: the requested provider and
/// model, falling back to the defaults; a model naming an alias selects its target.
fn select_model(cfg: &LoadedConfig, p: &ThreadStartParams) -> Result<Selection, Refusal> {
    let provider = clean(&p.provider).unwrap_or_else(|| cfg.default_provider());
    let provider_cfg = cfg.provider(&provider);
    if clean(&p.provider).is_some() && provider_cfg.is_none() {
        return Err(invalid(format!("provider: {provider:?} is not configured")));
    }
    let model = clean(&p.model)
        .or_else(|| {
            if clean(&p.provider).is_none() {
                Some(cfg.default_model()).filter(|m| !m.is_empty())
            } else {
                None
            }
        })
        .or_else(|| provider_cfg.map(|c| c.model.clone()))
        .unwrap_or_default();
    // A model naming an alias selects its target (`LoadedConfig::alias`).
    let (provider, model, alias_effort, alias_variant) =
        match cfg.alias(clean(&p.provider).as_deref(), &model) {
            Some(a) => {
                if cfg.provider(&a.provider).is_none() {
                    return Err(invalid(format!(
                        "model alias {model:?} names provider {:?}, which is not configured",
                        a.provider
                    )));
                }
                (a.provider, a.model, a.effort, a.variant)
            }
            None => (provider, model, None, None),
        };
    let effort = clean(&p.effort)
        .or_else(|| alias_effort.filter(|e| !e.is_empty()))
        .or_else(|| cfg.agent().effort)
        .unwrap_or_default();
    let variant = alias_variant
        .filter(|v| !v.is_empty() && clean(&p.effort).is_none())
        .unwrap_or_else(|| effort.clone());
    Ok(Selection {
        provider,
        model,
        effort,
        variant,
    })
}

/// The working directory of a new conversation: `cwd` (relative to the server's
/// workdir) must be a directory inside the workdir; the workdir when absent.
fn resolve_cwd(shared: &Host, p: &ThreadStartParams) -> Result<PathBuf, Refusal> {
    let Some(c) = clean(&p.cwd) else {
        return Ok(shared.opts.workdir.clone());
    };
    let path = Path::new(&c);
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        shared.opts.workdir.join(path)
    };
    if !abs.is_dir() {
        return Err(invalid(format!(
            "cwd: {} is not a directory",
            crate::util::clip(&abs.to_string_lossy(), 200)
        )));
    }
    let abs = abs.canonicalize().unwrap_or(abs);
    if !abs.starts_with(&shared.opts.workdir) {
        return Err(invalid(format!(
            "cwd: {} is outside the workspace {}",
            crate::util::clip(&abs.to_string_lossy(), 200),
            shared.opts.workdir.display()
        )));
    }
    Ok(abs)
}

fn open(shared: &Host) -> Result<PooledStore, Refusal> {
    shared
        .connections
        .take()
        .map_err(|e| crate::session::host::store_refusal(shared, &e))
}

/// Stores a new conversation row with a copy of some history (a worker's child
/// thread, `session::agents`) in one transaction. Errors: the store refused.
pub fn insert_with_history(
    shared: &Arc<Host>,
    thread: &ThreadRow,
    turns: &[TurnState],
) -> Result<(), Refusal> {
    let mut store = open(shared)?;
    store
        .transaction(|tx| {
            tx.insert_thread(thread)?;
            for t in turns {
                tx.insert_turn(&t.row)?;
                for item in &t.items {
                    tx.upsert_item(&ItemRow {
                        thread_id: thread.id.clone(),
                        turn_id: t.row.id.clone(),
                        id: item.id.clone(),
                        item_type: item.item_type.clone(),
                        status: item.status.clone(),
                        seq: 0,
                        body: serde_json::to_value(item).unwrap_or_default(),
                    })?;
                }
            }
            Ok(())
        })
        .map_err(|e| crate::session::host::store_error(shared, &e))?;
    shared.threads_changed();
    Ok(())
}

/// `thread/fork`: copies the source's selection and history up to the cut into a new
/// conversation. Copied in-progress turns settle as interrupted. A fork of an ephemeral
/// conversation is ephemeral.
pub fn fork(shared: &Arc<Host>, p: ThreadForkParams) -> Result<Created, Refusal> {
    if let Some(m) = clean(&p.mode) {
        if m != "local" {
            return Err((ErrorCode::Error, format!("unsupported fork mode {m:?}")));
        }
    }
    let source_id = p.thread_id.trim().to_owned();
    if source_id.is_empty() {
        return Err(invalid("thread_id is required"));
    }
    let (tx, rx) = crate::util::reply::reply();
    shared
        .registry
        .dispatch(shared, &source_id, SessionMsg::Snapshot { reply: tx });
    let Snapshot { thread: src, turns } = rx
        .recv()
        .map_err(|_| (ErrorCode::InternalError, "source session ended".to_owned()))??;
    let cut_turn = clean(&p.turn_id);
    let cut_item = clean(&p.item_id);
    let mut copied: Vec<TurnState> = vec![];
    let mut found = cut_turn.is_none();
    for t in turns {
        let is_cut = cut_turn.as_deref() == Some(t.row.id.as_str());
        let mut t = t;
        if is_cut {
            if let Some(item) = &cut_item {
                let Some(pos) = t.items.iter().position(|i| &i.id == item) else {
                    return Err(invalid(format!(
                        "item_id: {item:?} is not in turn {:?}",
                        t.row.id
                    )));
                };
                t.items.truncate(pos + 1);
            }
        }
        if t.row.status == "in_progress" {
            t.row.status = "interrupted".into();
            t.row.completed_at_ms = Some(now_ms());
            for item in &mut t.items {
                if item.status.as_deref() == Some("in_progress") {
                    item.status = Some("completed".into());
                }
            }
        }
        copied.push(t);
        if is_cut {
            found = true;
            break;
        }
    }
    if !found {
        return Err(invalid(format!(
            "turn_id: {:?} is not a turn of {source_id:?}",
            cut_turn.unwrap_or_default()
        )));
    }
    let ephemeral = crate::util::is_ephemeral(&src.id);
    let now = now_ms();
    let new_id_ = crate::util::new_thread_id(ephemeral);
    let thread = ThreadRow {
        id: new_id_.clone(),
        archived: false,
        archive_reason: None,
        forked_from_id: Some(src.id.clone()),
        forked_from_turn_id: clean(&p.turn_id),
        forked_from_item_id: clean(&p.item_id),
        created_at_ms: now,
        updated_at_ms: now,
        ..src
    };
    for t in &mut copied {
        t.row.thread_id = new_id_.clone();
    }
    if ephemeral {
        return Ok((None, thread, copied));
    }
    let mut store = open(shared)?;
    store
        .transaction(|tx| {
            tx.insert_thread(&thread)?;
            for t in &copied {
                tx.insert_turn(&t.row)?;
                for item in &t.items {
                    tx.upsert_item(&ItemRow {
                        thread_id: new_id_.clone(),
                        turn_id: t.row.id.clone(),
                        id: item.id.clone(),
                        item_type: item.item_type.clone(),
                        status: item.status.clone(),
                        seq: 0,
                        body: serde_json::to_value(item).unwrap_or_default(),
                    })?;
                }
            }
            Ok(())
        })
        .map_err(|e| crate::session::host::store_error(shared, &e))?;
    // Re-read so item seqs are the new conversation's own.
    let turns = store
        .load_history(&new_id_)
        .map_err(|e| crate::session::host::store_error(shared, &e))?
        .into_iter()
        .map(|t| TurnState {
            items: t.items.iter().map(item_wire).collect(),
            row: t.turn,
        })
        .collect();
    shared.threads_changed();
    Ok((Some(store), thread, turns))
}

impl Session {
    /// The wire snapshot of this conversation.
    pub fn thread_wire(&self) -> Thread {
        thread_wire(
            &self.thread,
            &self.turns,
            self.running.load(Ordering::SeqCst),
        )
    }

    /// Answers `thread/start` / `thread/fork` and announces `thread/started`.
    pub fn announce_created(&self, reply: Responder) {
        let thread = self.thread_wire();
        reply.ok(&ThreadResult {
            thread: thread.clone(),
        });
        let _ = self.shared.outbox.notify(&ThreadStarted { thread });
    }

    /// Sends `thread/updated` with the current snapshot.
    pub fn notify_updated(&self) {
        let _ = self.shared.outbox.notify(&ThreadUpdated {
            thread: self.thread_wire(),
        });
    }

    /// Runs `f` on the store (no-op for ephemeral conversations), mapping errors to
    /// `internal_error`.
    pub fn persist<T: Default>(
        &mut self,
        f: impl FnOnce(&mut Store) -> Result<T, wuu_store::StoreError>,
    ) -> Result<T, (ErrorCode, String)> {
        if self.store.is_none() {
            // A persisted conversation whose connection went back to the pool (a turn
            // waiting for its engine) takes one again; only ephemeral ones have none.
            self.acquire_store()?;
        }
        let r = match self.store.as_mut() {
            None => Ok(T::default()),
            Some(s) => f(s).map_err(|e| crate::session::host::store_error(&self.shared, &e)),
        };
        self.shared.threads_changed();
        r
    }

    pub(super) fn resume(&mut self, p: ThreadResumeParams, reply: Responder) {
        // Paged history (seed: paged history; see history_page.rs): compact pages with
        // `conversation_history`, every item with `history_page` (what the clients send).
        let compact = p.conversation_history.unwrap_or(false);
        let paged = compact || p.history_page.unwrap_or(false);
        let mode = if compact {
            super::history_page::PageMode::Compact
        } else {
            super::history_page::PageMode::Items
        };
        let thread = if paged {
            match self.paged_thread_wire(mode) {
                Ok(t) => t,
                Err((c, m)) => return reply.err(c, m),
            }
        } else {
            self.thread_wire()
        };
        let result = ThreadResumeResult {
            thread,
            held_user_messages: self.held_messages(),
            pending_user_messages: self.pending_messages(),
        };
        let quiet = p.response_only.unwrap_or(false) || paged;
        reply.ok(&result);
        if !quiet {
            let _ = self.shared.outbox.notify(&ThreadResumed(result));
        }
    }

    pub(super) fn rename(&mut self, p: ThreadRenameParams, reply: Responder) {
        let title = p.title.trim().to_owned();
        if title.chars().count() > MAX_TITLE_CHARS {
            return reply.err(
                ErrorCode::InvalidParams,
                format!("invalid params: title: longer than {MAX_TITLE_CHARS} characters"),
            );
        }
        // A title is one line: control characters (NUL, ESC, CR, newline, ...) are
        // refused; only tab is allowed.
        if let Some(c) = title.chars().find(|c| c.is_control() && *c != '\t') {
            return reply.err(
                ErrorCode::InvalidParams,
                format!("invalid params: title: contains the control character {c:?}"),
            );
        }
        let revision = p.title_revision.unwrap_or(self.thread.title_revision + 1);
        // Revisions only grow: an explicit revision at or below the stored one is stale.
        if revision < self.thread.title_revision
            || (p.title_revision.is_some()
                && revision == self.thread.title_revision
                && revision > 0)
        {
            // A stale snapshot never overwrites a newer title.
            return reply.ok(&ThreadResult {
                thread: self.thread_wire(),
            });
        }
        let id = self.id.clone();
        let t = (!title.is_empty()).then_some(title.clone());
        match self.persist(|s| s.set_title(&id, t.as_deref(), revision)) {
            Err((c, m)) => return reply.err(c, m),
            Ok(Some(row)) => self.thread = row,
            Ok(None) => {
                self.thread.title = t;
                self.thread.title_revision = revision;
            }
        }
        reply.ok(&ThreadResult {
            thread: self.thread_wire(),
        });
        self.notify_updated();
    }

    pub(super) fn archive(&mut self, p: ThreadArchiveParams, reply: Responder) {
        // While a turn runs, archive requests are answered by the turn driver (a forced
        // archive interrupts the turn and is applied after settlement).
        if p.archived && self.running.load(Ordering::SeqCst) {
            return reply.err(
                ErrorCode::ThreadBusy,
                "cannot archive a running thread (send force: true after the user confirms)",
            );
        }
        let id = self.id.clone();
        let archived = p.archived;
        if archived {
            if let Err((c, m)) =
                crate::session::agents::guard_removal(&self.shared, &id, p.force.unwrap_or(false))
            {
                return reply.err(c, m);
            }
        }
        if archived {
            // A live execution in another wuu process blocks archiving (mutation lease).
            let owner = self.shared.owner.clone();
            if let Some(store) = self.store.as_mut() {
                match store.acquire_lease(&id, &owner) {
                    Ok(LeaseOutcome::Busy(o)) => {
                        return reply.err(
                            ErrorCode::ThreadBusy,
                            format!(
                                "thread {id:?} is executing in another wuu process (pid {}); it cannot be archived there from here",
                                o.pid
                            ),
                        )
                    }
                    Ok(_) => {
                        let _ = store.release_lease(&id, &owner);
                    }
                    Err(e) => {
                        let (c, m) = crate::session::host::store_error(&self.shared, &e);
                        return reply.err(c, m);
                    }
                }
            }
        }
        match self.persist(|s| s.set_archived(&id, archived, None)) {
            Err((c, m)) => return reply.err(c, m),
            Ok(Some(row)) => self.thread = row,
            Ok(None) => self.thread.archived = archived,
        }
        if archived {
            // Its background processes end with the conversation.
            self.shared.background.end_thread(&id);
        }
        reply.ok(&ThreadResult {
            thread: self.thread_wire(),
        });
        self.notify_updated();
    }

    pub(super) fn delete(&mut self, p: ThreadDeleteParams, reply: Responder) {
        if self.running.load(Ordering::SeqCst) {
            return reply.err(
                ErrorCode::ThreadBusy,
                format!("thread {:?} is running; interrupt it first", self.id),
            );
        }
        let only_if_archived = p.only_if_archived.unwrap_or(false);
        let id = self.id.clone();
        if let Err((c, m)) =
            crate::session::agents::guard_removal(&self.shared, &id, p.force.unwrap_or(false))
        {
            return reply.err(c, m);
        }
        let Some(store) = self.store.as_mut() else {
            if only_if_archived && !self.thread.archived {
                return reply.err(ErrorCode::Error, format!("thread {id:?} is not archived"));
            }
            self.exit = true;
            self.shared.background.forget_thread(&id);
            return reply.ok(&ThreadDeleteResult { thread_id: id });
        };
        let owner = self.shared.owner.clone();
        match store.acquire_lease(&id, &owner) {
            Ok(LeaseOutcome::Busy(o)) => {
                return reply.err(
                    ErrorCode::ThreadBusy,
                    format!(
                        "thread {id:?} is executing in another wuu process (pid {})",
                        o.pid
                    ),
                )
            }
            Ok(_) => {}
            Err(e) => {
                let (c, m) = crate::session::host::store_error(&self.shared, &e);
                return reply.err(c, m);
            }
        }
        let outcome = store.delete_thread(&id, only_if_archived);
        self.shared.threads_changed();
        let _ = store.release_lease(&id, &owner);
        match outcome {
            Ok(DeleteOutcome::Deleted) => {
                self.exit = true;
                self.shared.background.forget_thread(&id);
                reply.ok(&ThreadDeleteResult { thread_id: id })
            }
            Ok(DeleteOutcome::NotArchived) => reply.err(
                ErrorCode::Error,
                format!("thread {id:?} is not archived (only_if_archived); nothing was deleted"),
            ),
            Ok(DeleteOutcome::NotFound) => {
                self.exit = true;
                reply.err(
                    ErrorCode::ThreadNotFound,
                    format!("thread {id:?} not found"),
                )
            }
            Err(e) => {
                let (c, m) = crate::session::host::store_error(&self.shared, &e);
                reply.err(c, m)
            }
        }
    }
}
