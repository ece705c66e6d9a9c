//! The catalog pool: a few threads, each with its own read connection, that answer
//! listings (`thread/list`, `thread/listAll`, `thread/listArchived`, `thread/search`),
//! resolve `thread/resume` without a `session_id`, and refresh model catalogs. A large
//! listing never delays a turn; responses may arrive out of request order (clients
//! correlate by id).

use super::{Responder, Shared};
use crate::session::{self, SessionMsg};
use crossbeam_channel::{bounded, Sender};
use parking_lot::Mutex;
use std::sync::{Arc, Weak};
use wuu_protocol::{
    ClientRequest, ErrorCode, ThreadListResult, ThreadSearchHit, ThreadSearchResult,
};
use wuu_store::{Store, ThreadFilter};

/// Jobs the pool queue holds before the reader waits.
pub const CATALOG_QUEUE: usize = 256;

/// Longest accepted `thread/search` query, in bytes (after trimming). A search scans the
/// text of every conversation, so its cost grows with the query; longer queries are
/// refused with `invalid_params` on the reader.
pub const MAX_SEARCH_QUERY_BYTES: usize = 4096;

type Job = (ClientRequest, Responder);

/// Handle of the pool.
pub struct CatalogPool {
    tx: Mutex<Option<Sender<Job>>>,
}

impl CatalogPool {
    /// Starts `n` worker threads (`wuu-catalog-<i>`).
    pub fn start(n: usize, shared: Weak<Shared>) -> CatalogPool {
        CatalogPool::start_named("wuu-catalog", n, shared)
    }

    /// Starts `n` worker threads named `<name>-<i>`.
    pub fn start_named(name: &str, n: usize, shared: Weak<Shared>) -> CatalogPool {
        let (tx, rx) = bounded::<Job>(CATALOG_QUEUE);
        for i in 0..n {
            let rx = rx.clone();
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || {
                    let mut store: Option<Store> = None;
                    let mut cache = ListCache::default();
                    for (req, reply) in rx.iter() {
                        let Some(shared) = shared.upgrade() else {
                            return;
                        };
                        if store.is_none() {
                            match Store::open_home(&shared.opts.home) {
                                Ok(s) => store = Some(s),
                                Err(e) => {
                                    reply.err(
                                        ErrorCode::InternalError,
                                        format!("store unavailable: {e}"),
                                    );
                                    continue;
                                }
                            }
                        }
                        let Some(st) = store.as_mut() else { continue };
                        // A bug in one listing must not take a pool worker down (the
                        // pool would shrink until listings hang): the request gets
                        // `internal_error` from its dropped responder, the worker goes
                        // on with a fresh connection and cache.
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            handle(&shared, st, &mut cache, req, reply)
                        }));
                        if r.is_err() {
                            log::error!("a catalog request panicked; the worker goes on");
                            store = None;
                            cache = ListCache::default();
                        }
                    }
                })
                .expect("spawn catalog thread");
        }
        CatalogPool {
            tx: Mutex::new(Some(tx)),
        }
    }

    /// Queues a job (waits when the queue is full).
    pub fn submit(&self, req: ClientRequest, reply: Responder) {
        let tx = self.tx.lock().clone();
        match tx {
            Some(tx) => {
                if let Err(e) = tx.send((req, reply)) {
                    let (_, reply) = e.0;
                    reply.err(ErrorCode::ServerClosed, "the server is shutting down");
                }
            }
            None => reply.err(ErrorCode::ServerClosed, "the server is shutting down"),
        }
    }

    /// Stops accepting jobs; workers end after the queued ones.
    pub fn stop(&self) {
        self.tx.lock().take();
    }
}

/// The store filter of a listing request (`thread/list`, `thread/listAll`,
/// `thread/listArchived`), or `None` for other requests.
pub fn listing_filter(shared: &Shared, req: &ClientRequest) -> Option<ThreadFilter> {
    let workdir = shared.opts.workdir.to_string_lossy().into_owned();
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
    entries: Vec<(ThreadFilter, i64, u64, Vec<u8>)>,
}

fn handle(
    shared: &Arc<Shared>,
    store: &mut Store,
    cache: &mut ListCache,
    req: ClientRequest,
    reply: Responder,
) {
    let workdir = shared.opts.workdir.to_string_lossy().into_owned();
    let mut list = |filter: ThreadFilter, store: &Store, reply: Responder| {
        let list_gen = shared.list_gen.load(std::sync::atomic::Ordering::SeqCst);
        let version = store.data_version().ok();
        let gen = shared.registry.generation();
        if let Some(v) = version {
            if let Some((_, _, _, bytes)) = cache
                .entries
                .iter()
                .find(|(f, dv, g, _)| *f == filter && *dv == v && *g == gen)
            {
                let mut shared_cache = shared.list_cache.lock();
                shared_cache.retain(|(f, ..)| *f != filter);
                shared_cache.push((filter, list_gen, gen, Arc::new(bytes.clone())));
                drop(shared_cache);
                return reply.ok_raw(bytes);
            }
        }
        match store.list_threads(&filter) {
            Ok(rows) => {
                let threads = rows
                    .iter()
                    .map(|r| session::convert::thread_summary(shared, r))
                    .collect();
                let bytes =
                    serde_json::to_vec(&ThreadListResult { threads }).expect("serialize listing");
                if let Some(v) = version {
                    cache.entries.retain(|(f, ..)| *f != filter);
                    cache.entries.truncate(7);
                    cache.entries.push((filter.clone(), v, gen, bytes.clone()));
                }
                // Share it with the reader thread, valid until this process changes a
                // conversation (or the lease thread sees another process's commit).
                let mut shared_cache = shared.list_cache.lock();
                shared_cache.retain(|(f, ..)| *f != filter);
                shared_cache.truncate(7);
                shared_cache.push((filter, list_gen, gen, Arc::new(bytes.clone())));
                drop(shared_cache);
                reply.ok_raw(&bytes)
            }
            Err(e) => reply.err(ErrorCode::InternalError, format!("listing failed: {e}")),
        }
    };
    match req {
        ClientRequest::ThreadList(p) => list(
            ThreadFilter {
                cwd: Some(p.cwd.filter(|c| !c.is_empty()).unwrap_or(workdir)),
                archived: Some(false),
                limit: None,
            },
            store,
            reply,
        ),
        ClientRequest::ThreadListAll(_) => list(
            ThreadFilter {
                cwd: None,
                archived: Some(false),
                limit: None,
            },
            store,
            reply,
        ),
        ClientRequest::ThreadListArchived(_) => list(
            ThreadFilter {
                cwd: None,
                archived: Some(true),
                limit: None,
            },
            store,
            reply,
        ),
        ClientRequest::ThreadSearch(p) => {
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
                                thread: session::convert::thread_summary(shared, r),
                                snippet: None,
                                message_seq: None,
                            })
                            .collect()
                    })
            } else {
                store.search_threads(query, limit).map(|hits| {
                    hits.iter()
                        .map(|h| ThreadSearchHit {
                            thread: session::convert::thread_summary(shared, &h.thread),
                            snippet: Some(h.snippet.clone()).filter(|s| !s.is_empty()),
                            message_seq: h.item_seq,
                        })
                        .collect()
                })
            };
            match result {
                Ok(results) => reply.ok(&ThreadSearchResult { results }),
                Err(e) => reply.err(ErrorCode::InternalError, format!("search failed: {e}")),
            }
        }
        ClientRequest::ThreadResume(p) => match store.latest_thread(&workdir) {
            Ok(Some(row)) => shared.registry.dispatch(
                shared,
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
            Err(e) => reply.err(ErrorCode::InternalError, format!("store: {e}")),
        },
        ClientRequest::ThreadAttachmentRead(p) => {
            session::attachments::serve_catalog(shared, store, p, reply)
        }
        req @ (ClientRequest::ThreadHistoryRead(_)
        | ClientRequest::ThreadActivityRead(_)
        | ClientRequest::ThreadContentRead(_)
        | ClientRequest::ThreadPreview(_)) => {
            session::history_page::serve_catalog(shared, store, req, reply)
        }
        ClientRequest::ConfigModelUpdate(p) => {
            session::selection::update_defaults(shared, p, reply)
        }
        ClientRequest::ModelCatalogRefresh(_) => super::init::refresh_catalog(shared, reply),
        req @ (ClientRequest::SessionOrganizationList(_)
        | ClientRequest::SessionFolderCreate(_)
        | ClientRequest::SessionFolderUpdate(_)
        | ClientRequest::SessionFolderReorder(_)
        | ClientRequest::SessionFolderDelete(_)) => {
            super::folders::handle(shared, store, req, reply)
        }
        req @ (ClientRequest::WorkspaceList(_) | ClientRequest::WorkspaceStateCleanup(_)) => {
            super::workspace::handle(shared, store, req, reply)
        }
        ClientRequest::UsageOverview(p) => crate::usage::serve_overview(shared, store, p, reply),
        ClientRequest::SettingsUsage(p) => crate::usage::serve_settings(shared, store, p, reply),
        ClientRequest::RunInterrupt(p) => {
            crate::session::run::run_interrupt_catalog(shared, store, p, reply)
        }
        ClientRequest::EngineList(p) => super::engines::list(shared, p, reply),
        ClientRequest::EngineUpdate(p) => super::engines::update(shared, p, reply),
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not a catalog method", other.method()),
        ),
    }
}
