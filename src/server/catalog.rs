//! The catalog pool: a few threads, each with its own read connection, that answer
//! listings (`thread/list`, `thread/listAll`, `thread/listArchived`, `thread/search`),
//! resolve `thread/resume` without a `session_id`, and refresh model catalogs. A large
//! listing never delays a turn; responses may arrive out of request order (clients
//! correlate by id).

use super::Shared;
use crate::outbound::Responder;
use crate::session::{self, SessionMsg};
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use wuu_protocol::{
    ClientRequest, ErrorCode, ThreadResumeParams, ThreadSearchHit, ThreadSearchParams,
    ThreadSearchResult,
};
use wuu_store::{Store, ThreadFilter};

/// Jobs a pool queue holds; a job submitted to a full queue is answered `overloaded`
/// at once (the reader never waits for room).
pub const CATALOG_QUEUE: usize = 256;

/// A job running longer than this is overrunning: when every worker of a pool is
/// overrunning, the next submission starts an extra worker (up to the pool's maximum),
/// so a job stuck on a slow source (a model service that does not answer, a huge
/// ledger) never takes the other requests of its pool with it.
pub const OVERRUN_AFTER: Duration = Duration::from_secs(2);

/// An extra worker ends after this long without a job.
pub const EXTRA_IDLE: Duration = Duration::from_secs(30);

/// Longest accepted `thread/search` query, in bytes (after trimming). A search scans the
/// text of every conversation, so its cost grows with the query; longer queries are
/// refused with `invalid_params` on the reader.
pub const MAX_SEARCH_QUERY_BYTES: usize = 4096;

type Job = (ClientRequest, Responder);

/// Handle of a pool: `base` workers that live as long as the server, plus extra
/// workers started while every worker is overrunning ([`OVERRUN_AFTER`]).
pub struct CatalogPool {
    tx: Mutex<Option<Sender<Job>>>,
    state: Arc<PoolState>,
}

struct PoolState {
    /// Thread name prefix (`wuu-catalog`, `wuu-search`).
    name: String,
    /// What the queue is called in `overloaded` messages.
    label: &'static str,
    rx: Receiver<Job>,
    shared: Weak<Shared>,
    max: usize,
    /// Live workers by id: when each started its current job (`None`: waiting).
    workers: Mutex<PoolWorkers>,
}

#[derive(Default)]
struct PoolWorkers {
    busy_since: HashMap<usize, Option<Instant>>,
    next_id: usize,
}

impl CatalogPool {
    /// Starts the catalog pool: 2 workers (`wuu-catalog-<i>`), at most 8.
    pub fn start(shared: Weak<Shared>) -> CatalogPool {
        CatalogPool::start_named("wuu-catalog", "catalog pool", 2, 8, shared)
    }

    /// Starts `n` worker threads named `<name>-<i>`; at most `max` (≥ `n`) run at once
    /// when jobs overrun. `label` names the queue in `overloaded` answers.
    pub fn start_named(
        name: &str,
        label: &'static str,
        n: usize,
        max: usize,
        shared: Weak<Shared>,
    ) -> CatalogPool {
        let (tx, rx) = bounded::<Job>(CATALOG_QUEUE);
        let state = Arc::new(PoolState {
            name: name.to_owned(),
            label,
            rx,
            shared,
            max: max.max(n),
            workers: Mutex::new(PoolWorkers::default()),
        });
        for _ in 0..n {
            spawn_worker(&state, false);
        }
        CatalogPool {
            tx: Mutex::new(Some(tx)),
            state,
        }
    }

    /// Queues a job without waiting: a full queue answers `overloaded` (retryable), a
    /// stopped pool `server_closed`.
    pub fn submit(&self, req: ClientRequest, reply: Responder) {
        let tx = self.tx.lock().clone();
        let Some(tx) = tx else {
            return reply.err(ErrorCode::ServerClosed, "the server is shutting down");
        };
        let refused = match tx.try_send((req, reply)) {
            Ok(()) => None,
            Err(TrySendError::Full((_, reply))) => Some((
                reply,
                ErrorCode::Overloaded,
                format!(
                    "overloaded: the {} queue is full ({CATALOG_QUEUE} requests waiting); nothing was done, retry later",
                    self.state.label
                ),
            )),
            Err(TrySendError::Disconnected((_, reply))) => Some((
                reply,
                ErrorCode::ServerClosed,
                "the server is shutting down".to_owned(),
            )),
        };
        self.grow_if_overrunning();
        if let Some((reply, code, message)) = refused {
            reply.err(code, message);
        }
    }

    /// Starts an extra worker when jobs wait and every live worker is overrunning.
    fn grow_if_overrunning(&self) {
        let st = &self.state;
        if st.rx.is_empty() {
            return;
        }
        let grow = {
            let w = st.workers.lock();
            let live = w.busy_since.len();
            let available = w
                .busy_since
                .values()
                .filter(|b| b.is_none_or(|t| t.elapsed() < OVERRUN_AFTER))
                .count();
            available == 0 && live < st.max
        };
        if grow {
            log::warn!(
                "every {} worker is overrunning ({} s or more); starting another",
                st.label,
                OVERRUN_AFTER.as_secs()
            );
            spawn_worker(st, true);
        }
    }

    /// Workers now alive (base and extra).
    pub fn workers(&self) -> usize {
        self.state.workers.lock().busy_since.len()
    }

    /// Stops accepting jobs; workers end after the queued ones.
    pub fn stop(&self) {
        self.tx.lock().take();
    }
}

/// Starts one worker (`extra`: it ends after [`EXTRA_IDLE`] without a job).
fn spawn_worker(state: &Arc<PoolState>, extra: bool) {
    let id = {
        let mut w = state.workers.lock();
        let id = w.next_id;
        w.next_id += 1;
        w.busy_since.insert(id, None);
        id
    };
    let st = state.clone();
    let spawned = crate::util::spawn(format!("{}-{id}", state.name), move || {
        worker_loop(&st, id, extra);
        st.workers.lock().busy_since.remove(&id);
    });
    if let Err(e) = spawned {
        log::error!("cannot start a {} worker: {e}", state.label);
        state.workers.lock().busy_since.remove(&id);
    }
}

fn worker_loop(st: &PoolState, id: usize, extra: bool) {
    let mut store: Option<Store> = None;
    let mut cache = ListCache::default();
    loop {
        let job = if extra {
            match st.rx.recv_timeout(EXTRA_IDLE) {
                Ok(j) => j,
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match st.rx.recv() {
                Ok(j) => j,
                Err(_) => return,
            }
        };
        let (req, reply) = job;
        let Some(shared) = st.shared.upgrade() else {
            return;
        };
        if let Some(b) = st.workers.lock().busy_since.get_mut(&id) {
            *b = Some(Instant::now());
        }
        run_job(&shared, &mut store, &mut cache, req, reply);
        if let Some(b) = st.workers.lock().busy_since.get_mut(&id) {
            *b = None;
        }
    }
}

/// Runs one job on a worker's connection (opened on first use).
fn run_job(
    shared: &Arc<Shared>,
    store: &mut Option<Store>,
    cache: &mut ListCache,
    req: ClientRequest,
    reply: Responder,
) {
    if store.is_none() {
        match shared.host.open_store() {
            Ok(s) => *store = Some(s),
            Err(e) => {
                let (code, message) = crate::session::host::store_refusal(&shared.host, &e);
                return reply.err(code, message);
            }
        }
    }
    let Some(st) = store.as_mut() else { return };
    // A bug in one listing must not take a pool worker down (the pool would shrink
    // until listings hang): the request gets `internal_error` from its dropped
    // responder, the worker goes on with a fresh connection and cache.
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        handle(shared, st, cache, req, reply)
    }));
    if r.is_err() {
        log::error!("a catalog request panicked; the worker goes on");
        *store = None;
        *cache = ListCache::default();
    }
}

/// The store filter of a listing request (`thread/list`, `thread/listAll`,
/// `thread/listArchived`), or `None` for other requests.
pub fn listing_filter(shared: &Shared, req: &ClientRequest) -> Option<ThreadFilter> {
    let workdir = shared.host.opts.workdir.to_string_lossy().into_owned();
    match req {
        ClientRequest::ThreadList(p) => Some(ThreadFilter {
            cwd: Some(p.cwd.clone().filter(|c| !c.is_empty()).unwrap_or(workdir)),
            archived: Some(false),
            limit: None,
        }),
        ClientRequest::ThreadListAll(_) => Some(ThreadFilter {
            cwd: None,
            archived: Some(false),
            limit: None,
        }),
        ClientRequest::ThreadListArchived(_) => Some(ThreadFilter {
            cwd: None,
            archived: Some(true),
            limit: None,
        }),
        _ => None,
    }
}

/// Per-worker cache of serialized listings, valid while neither the database
/// (`PRAGMA data_version`) nor the live sessions' running flags changed.
#[derive(Default)]
struct ListCache {
    entries: Vec<(ThreadFilter, i64, u64, Arc<Vec<u8>>)>,
}

/// The `thread/list` (`listAll`, `listArchived`) result JSON of the conversations
/// `filter` selects: `{"threads":[…]}` where each entry is the JSON of
/// [`session::convert::thread_wire`]`(row, &[], running)` (see
/// [`session::convert::write_summary`]), written straight from the store's rows into one
/// buffer; subagent workers' threads are left out. `running(id)` says whether a conversation is running a turn.
pub fn listing_json(
    store: &Store,
    filter: &ThreadFilter,
    running: impl Fn(&str) -> bool,
    capacity: usize,
) -> wuu_store::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(b"{\"threads\":[");
    let mut first = true;
    store.visit_threads(filter, |row| {
        // Subagent workers' child threads are not listed (spec `subagents.md` §2.4);
        // they are read by id.
        if row.extra.get("agent").is_some_and(|a| a.is_object()) {
            return Ok(());
        }
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        session::convert::write_summary(&mut out, row, running(row.id));
        Ok(())
    })?;
    out.extend_from_slice(b"]}");
    Ok(out)
}

/// Shares a listing answer with the reader thread (at most 8 filters), valid until this
/// process changes a conversation or the lease thread sees another process's commit.
fn share_listing(
    shared: &Shared,
    filter: ThreadFilter,
    list_gen: u64,
    gen: u64,
    bytes: Arc<Vec<u8>>,
) {
    let mut shared_cache = shared.list_cache.lock();
    shared_cache.retain(|(f, ..)| *f != filter);
    shared_cache.truncate(7);
    shared_cache.push((filter, list_gen, gen, bytes));
}

/// Answers one catalog request on a pool worker: listings and search
/// ([`list`], [`search`]), `thread/resume` without a `session_id` ([`resume_latest`]),
/// and the other catalog families handed to their own modules.
fn handle(
    shared: &Arc<Shared>,
    store: &mut Store,
    cache: &mut ListCache,
    req: ClientRequest,
    reply: Responder,
) {
    let workdir = || shared.host.opts.workdir.to_string_lossy().into_owned();
    match req {
        ClientRequest::ThreadList(p) => {
            let filter = ThreadFilter {
                cwd: Some(p.cwd.filter(|c| !c.is_empty()).unwrap_or_else(workdir)),
                archived: Some(false),
                limit: None,
            };
            list(shared, store, cache, filter, reply)
        }
        ClientRequest::ThreadListAll(_) => {
            let filter = ThreadFilter {
                cwd: None,
                archived: Some(false),
                limit: None,
            };
            list(shared, store, cache, filter, reply)
        }
        ClientRequest::ThreadListArchived(_) => {
            let filter = ThreadFilter {
                cwd: None,
                archived: Some(true),
                limit: None,
            };
            list(shared, store, cache, filter, reply)
        }
        ClientRequest::ThreadSearch(p) => search(shared, store, p, reply),
        ClientRequest::ThreadResume(p) => resume_latest(shared, store, &workdir(), p, reply),
        ClientRequest::ThreadAttachmentRead(p) => {
            session::attachments::serve_catalog(&shared.host, store, p, reply)
        }
        req @ (ClientRequest::ThreadHistoryRead(_)
        | ClientRequest::ThreadActivityRead(_)
        | ClientRequest::ThreadContentRead(_)
        | ClientRequest::ThreadPreview(_)) => {
            session::history_page::serve_catalog(&shared.host, store, req, reply)
        }
        ClientRequest::ConfigModelUpdate(p) => {
            session::selection::update_defaults(&shared.host, p, reply)
        }
        ClientRequest::ModelCatalogRefresh(_) => super::init::refresh_catalog(&shared.host, reply),
        req @ (ClientRequest::SessionOrganizationList(_)
        | ClientRequest::SessionFolderCreate(_)
        | ClientRequest::SessionFolderUpdate(_)
        | ClientRequest::SessionFolderReorder(_)
        | ClientRequest::SessionFolderDelete(_)) => {
            super::folders::handle(&shared.host, store, req, reply)
        }
        req @ (ClientRequest::WorkspaceList(_) | ClientRequest::WorkspaceStateCleanup(_)) => {
            super::workspace::handle(&shared.host, store, req, reply)
        }
        ClientRequest::UsageOverview(p) => {
            crate::usage::serve_overview(&shared.usage, store, p, reply)
        }
        ClientRequest::SettingsUsage(p) => {
            crate::usage::serve_settings(&shared.usage, store, p, reply)
        }
        ClientRequest::RunInterrupt(p) => {
            crate::session::run::run_interrupt_catalog(&shared.host, store, p, reply)
        }
        ClientRequest::EngineList(p) => super::engines::list(shared, p, reply),
        ClientRequest::EngineUpdate(p) => super::engines::update(&shared.host, p, reply),
        ClientRequest::ConfigCodexModels(p) => super::engines::codex_models(shared, p, reply),
        ClientRequest::EngineAuthMethods(p) => {
            super::engine_auth::run(&shared.host, p, false, reply)
        }
        ClientRequest::EngineAuthenticate(p) => {
            super::engine_auth::run(&shared.host, p, true, reply)
        }
        ClientRequest::EngineAuthCancel(p) => super::engine_auth::cancel(p, reply),
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not a catalog method", other.method()),
        ),
    }
}

/// Answers a listing (`thread/list`, `thread/listAll`, `thread/listArchived`) for
/// `filter`: from the worker's cache while the store's data version and the registry
/// generation are unchanged, else built fresh and cached; either way shared with the
/// reader thread ([`share_listing`]).
fn list(
    shared: &Shared,
    store: &Store,
    cache: &mut ListCache,
    filter: ThreadFilter,
    reply: Responder,
) {
    let list_gen = shared
        .host
        .list_gen
        .load(std::sync::atomic::Ordering::SeqCst);
    let version = store.data_version().ok();
    let gen = shared.host.registry.generation();
    if let Some(v) = version {
        if let Some((_, _, _, bytes)) = cache
            .entries
            .iter()
            .find(|(f, dv, g, _)| *f == filter && *dv == v && *g == gen)
        {
            let bytes = bytes.clone();
            share_listing(shared, filter, list_gen, gen, bytes.clone());
            return reply.ok_raw(&bytes);
        }
    }
    // One registry lock per listing (not one per conversation).
    let running = shared.host.registry.running_ids();
    // The last answer's size is a good guess of this one's.
    let capacity = cache
        .entries
        .iter()
        .find(|(f, ..)| *f == filter)
        .map_or(4096, |(.., b)| b.len() + 1024);
    match listing_json(store, &filter, |id| running.contains(id), capacity) {
        Ok(bytes) => {
            let bytes = Arc::new(bytes);
            if let Some(v) = version {
                cache.entries.retain(|(f, ..)| *f != filter);
                cache.entries.truncate(7);
                cache.entries.push((filter.clone(), v, gen, bytes.clone()));
            }
            share_listing(shared, filter, list_gen, gen, bytes.clone());
            reply.ok_raw(&bytes)
        }
        Err(e) => {
            let (code, message) = crate::session::host::store_error(&shared.host, &e);
            reply.err(code, format!("listing failed: {message}"))
        }
    }
}

/// `thread/search`: the latest conversations for an empty query, else the full-text
/// hits with their snippets (1–100 results, 20 by default).
fn search(shared: &Shared, store: &Store, p: ThreadSearchParams, reply: Responder) {
    let limit = p.limit.unwrap_or(20).clamp(1, 100);
    let query = p.query.unwrap_or_default();
    let query = query.trim();
    let result = if query.is_empty() {
        store
            .list_threads(&ThreadFilter {
                cwd: None,
                archived: Some(false),
                limit: Some(limit),
            })
            .map(|rows| {
                rows.iter()
                    .map(|r| ThreadSearchHit {
                        thread: session::convert::thread_summary(&shared.host, r),
                        snippet: None,
                        message_seq: None,
                    })
                    .collect()
            })
    } else {
        store.search_threads(query, limit).map(|hits| {
            hits.iter()
                .map(|h| ThreadSearchHit {
                    thread: session::convert::thread_summary(&shared.host, &h.thread),
                    snippet: Some(h.snippet.clone()).filter(|s| !s.is_empty()),
                    message_seq: h.item_seq,
                })
                .collect()
        })
    };
    match result {
        Ok(results) => reply.ok(&ThreadSearchResult { results }),
        Err(e) => {
            let (code, message) = crate::session::host::store_error(&shared.host, &e);
            reply.err(code, format!("search failed: {message}"))
        }
    }
}

/// `thread/resume` without a `session_id`: hands the request to the workspace's latest
/// conversation, or answers `thread_not_found` when it has none.
fn resume_latest(
    shared: &Shared,
    store: &Store,
    workdir: &str,
    p: ThreadResumeParams,
    reply: Responder,
) {
    match store.latest_thread(workdir) {
        Ok(Some(row)) => shared.host.registry.dispatch(
            &shared.host,
            &row.id,
            SessionMsg::Request {
                req: ClientRequest::ThreadResume(p),
                reply,
            },
        ),
        Ok(None) => reply.err(
            ErrorCode::ThreadNotFound,
            format!("no sessions found for workspace {workdir}"),
        ),
        Err(e) => {
            let (code, message) = crate::session::host::store_error(&shared.host, &e);
            reply.err(code, message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::listing_json;
    use crate::session::convert::thread_wire;
    use serde_json::json;
    use wuu_protocol::ThreadListResult;
    use wuu_store::{Store, ThreadFilter, ThreadRow};

    /// The listing as it was built before `listing_json`: owned rows, owned `Thread`s,
    /// one `serde_json::to_vec` of the whole result.
    fn owned_listing(store: &Store, filter: &ThreadFilter, running: &[&str]) -> Vec<u8> {
        let threads = store
            .list_threads(filter)
            .unwrap()
            .iter()
            .map(|r| thread_wire(r, &[], running.contains(&r.id.as_str())))
            .collect();
        serde_json::to_vec(&ThreadListResult { threads }).unwrap()
    }

    #[test]
    fn listing_json_is_the_owned_listing_byte_for_byte() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open_home(dir.path()).unwrap();
        let texts = [
            "plain",
            "",
            "quote \" backslash \\ slash / tab \t newline \n cr \r",
            "control \u{1} \u{1f} del \u{7f} nul-free",
            "unicode é € 你好 🎉 \u{2028} \u{2029}",
            "<html>&amp;</html>",
        ];
        let extras = [
            json!({}),
            json!({"pinned": true, "folder_id": "fld_1", "workspace_id": "ws-1"}),
            json!({"pinned": "yes", "folder_id": "", "workspace_id": 7}),
            json!({"pinned": false, "engine_ref": "abc", "nested": {"a": [1, 2.5, null]}}),
            json!([1, 2]),
            json!(5),
            json!({"folder_id": "quote\"d", "workspace_id": "é"}),
        ];
        let modes = [
            "",
            "standard",
            "read_only",
            "unconfined",
            "bogus \"mode\"",
            "  ",
        ];
        let stamps = [
            0i64,
            1,
            1_780_000_000_123,
            -1,
            -62_167_219_200_001,
            253_402_207_200_999,
            i64::MAX,
        ];
        let mut ids = Vec::new();
        for i in 0..84usize {
            let id = match i % 7 {
                0 => format!("ephemeral-{i}"),
                1 => format!("thr_\"{i}\u{e9}"),
                _ => format!("thr_{i:03}"),
            };
            let mut row = ThreadRow::new(
                &id,
                if i % 5 == 0 { "/other" } else { "/work/p" },
                stamps[i % stamps.len()],
            );
            row.updated_at_ms = stamps[(i / 3) % stamps.len()];
            row.title = match i % 4 {
                0 => None,
                1 => Some(String::new()),
                _ => Some(texts[i % texts.len()].to_owned()),
            };
            row.title_revision = (i % 3) as u64;
            row.preview = texts[(i + 1) % texts.len()].to_owned();
            row.provider = texts[(i + 2) % texts.len()].to_owned();
            row.model = texts[(i + 3) % texts.len()].to_owned();
            row.variant = if i % 2 == 0 {
                String::new()
            } else {
                "v1".into()
            };
            row.effort = if i % 3 == 0 {
                "high".into()
            } else {
                String::new()
            };
            row.permission_mode = modes[i % modes.len()].to_owned();
            row.engine_id = if i % 2 == 0 {
                "wuu".into()
            } else {
                String::new()
            };
            row.archived = i % 4 == 3;
            row.archive_reason = (i % 8 == 3).then(|| texts[i % texts.len()].to_owned());
            if i % 6 == 1 {
                row.forked_from_id = Some(format!("thr_src{i}"));
                row.forked_from_turn_id = Some("turn_1".into());
                row.forked_from_item_id = (i % 12 == 1).then(|| "item_\n".into());
            }
            row.extra = extras[i % extras.len()].clone();
            store.insert_thread(&row).unwrap();
            ids.push(id);
        }
        // Damaged rows: unreadable `extra` (listed, flagged), invalid UTF-8 text and a
        // negative revision (skipped by both decodings).
        let conn = rusqlite::Connection::open(dir.path().join(wuu_store::DB_FILE)).unwrap();
        conn.execute(
            "UPDATE threads SET extra = '{not json' WHERE id IN (?1, ?2)",
            [&ids[2], &ids[3]],
        )
        .unwrap();
        conn.execute(
            "UPDATE threads SET preview = CAST(X'FF41' AS TEXT) WHERE id = ?1",
            [&ids[4]],
        )
        .unwrap();
        conn.execute(
            "UPDATE threads SET title_revision = -1 WHERE id = ?1",
            [&ids[6]],
        )
        .unwrap();
        drop(conn);
        let running = [ids[8].as_str(), ids[9].as_str(), "thr_not_listed"];
        let filters = [
            (Some("/work/p"), Some(false), None),
            (Some("/work/p"), Some(true), None),
            (None, Some(false), None),
            (None, Some(true), None),
            (None, None, None),
            (None, None, Some(5)),
            (Some("/work/p"), Some(false), Some(0)),
            (Some("/nowhere"), Some(false), None),
        ];
        for (cwd, archived, limit) in filters {
            let filter = ThreadFilter {
                cwd: cwd.map(str::to_owned),
                archived,
                limit,
            };
            let fast = listing_json(&store, &filter, |id| running.contains(&id), 0).unwrap();
            let owned = owned_listing(&store, &filter, &running);
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&owned),
                "{filter:?}"
            );
        }
        // The damaged rows are really there: two flagged, two skipped.
        let all = listing_json(&store, &ThreadFilter::default(), |id| id == ids[8], 0).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&all).unwrap();
        let threads = v["threads"].as_array().unwrap();
        assert_eq!(threads.len(), 82);
        let flagged = threads
            .iter()
            .filter(|t| {
                t["damage"]
                    .as_str()
                    .is_some_and(|d| d.contains("threads.extra"))
            })
            .count();
        assert_eq!(flagged, 2);
        assert!(threads.iter().any(|t| t["status"] == "in_progress"));
    }
}
