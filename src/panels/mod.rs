//! The panels around the conversation (spec `app-server.md`): settings updates
//! (`config/advanced/update`, `config/general/update`, `config/provider/remove`; the
//! live configuration they change is `session::live_config`), workspace views
//! (`workspace/*`), instructions (`instructions/list`), skills (`skill/list`; the
//! model's `load_skill` tool is `session::skills`), one-shot helpers (`text/polish`,
//! `git/commit-message`, `thread/regenerate-title`), side chats (`sideThread/*`), the
//! browser activities' handlers (`activity/*`, state in `session::activity`), the xAI
//! sign-in (`auth/xai/login/*`), the clients' remaining reads (`extras`) and background
//! processes (`process/*`).
//!
//! Threads: the router hands these requests to [`handle`] on the reader thread, which
//! never touches the disk or the network and never waits for a queue: every request
//! runs on one of two small work pools. The *views* pool (2 threads, queue of 64) serves
//! quick disk work: config edits, listings. The *helpers* pool (2 threads, queue of 8)
//! serves one-shot model calls of up to a minute. The *processes* pool (4 threads,
//! queue of 32) serves `process/*`, whose reads may wait up to 30 s. When a pool's queue is full the
//! request is refused at once with the retryable `overloaded`.

pub mod extras;
pub mod helpers;
pub mod instructions;
pub mod mcp;
pub mod processes;
pub mod settings;
pub mod side_chat;
pub mod skills;
pub mod workspace;
pub mod xai_login;

use crate::outbound::Responder;
use crate::session::Host;
use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;
use std::sync::{Arc, OnceLock};
use wuu_protocol::{ClientRequest, ErrorCode};

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    tx: Sender<Job>,
    /// The `overloaded` message when the queue is full.
    full: &'static str,
}

impl Pool {
    fn start(name: &str, threads: usize, queue: usize, full: &'static str) -> Pool {
        let (tx, rx) = bounded::<Job>(queue);
        for i in 0..threads {
            let rx = rx.clone();
            let spawned = crate::util::spawn(format!("wuu-{name}-{i}"), move || {
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
        Pool { tx, full }
    }

    /// Runs `f` on this pool, or refuses at once (`overloaded`, nothing done) when its
    /// queue is full: the reader never waits for room. A job that starts once the
    /// server is shutting down answers `server_closed`.
    fn run(
        &self,
        shared: &Arc<Host>,
        reply: Responder,
        f: impl FnOnce(&Arc<Host>, Responder) + Send + 'static,
    ) {
        let s = shared.clone();
        // The reply is shared with the job so a refused job (which keeps its closure)
        // can still be answered here.
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
        if let Err(e) = self.tx.try_send(job) {
            if let Some(reply) = slot.lock().take() {
                match e {
                    TrySendError::Full(_) => reply.err(ErrorCode::Overloaded, self.full),
                    TrySendError::Disconnected(_) => {
                        reply.err(ErrorCode::InternalError, "the pool's threads are gone")
                    }
                }
            }
        }
    }
}

/// Quick disk work: config edits, listings.
fn views() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| {
        Pool::start(
            "panels",
            2,
            64,
            "overloaded: the panels queue is full (64 requests waiting); nothing was done, retry later",
        )
    })
}

/// `process/*`: reads that wait, stops that wait for the end.
fn processes_pool() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| {
        Pool::start(
            "processes",
            4,
            32,
            "overloaded: too many process requests are waiting (32); nothing was done, retry shortly",
        )
    })
}

/// `mcp/*`: connects and OAuth exchanges that may wait for a server.
fn mcp_pool() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| {
        Pool::start(
            "mcp",
            2,
            32,
            "overloaded: too many MCP requests are waiting (32); retry shortly",
        )
    })
}

/// One-shot model calls of up to a minute.
fn helpers_pool() -> &'static Pool {
    static P: OnceLock<Pool> = OnceLock::new();
    P.get_or_init(|| {
        Pool::start(
            "helpers",
            2,
            8,
            "overloaded: too many model helper requests are waiting (8); retry shortly",
        )
    })
}

/// Handles a panel request routed `inline` (see the module docs for where it runs).
pub fn handle(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    match req {
        ClientRequest::ConfigAdvancedUpdate(p) => views().run(shared, reply, move |s, r| {
            settings::advanced_update(s, p, r)
        }),
        ClientRequest::ConfigGeneralUpdate(p) => {
            views().run(shared, reply, move |s, r| settings::general_update(s, p, r))
        }
        ClientRequest::ConfigProviderRemove(p) => views().run(shared, reply, move |s, r| {
            settings::provider_remove(s, p, r)
        }),
        ClientRequest::SkillList(_) => views().run(shared, reply, skills::list),
        ClientRequest::InstructionsList(p) => {
            views().run(shared, reply, move |s, r| instructions::list(s, p, r))
        }
        ClientRequest::TextPolish(p) => {
            helpers_pool().run(shared, reply, move |s, r| helpers::polish(s, p, r))
        }
        ClientRequest::GitCommitMessage(p) => {
            helpers_pool().run(shared, reply, move |s, r| helpers::commit_message(s, p, r))
        }
        ClientRequest::ThreadRegenerateTitle(p) => {
            helpers_pool().run(shared, reply, move |s, r| {
                helpers::regenerate_title(s, p, r)
            })
        }
        req @ (ClientRequest::McpList(_)
        | ClientRequest::McpConnect(_)
        | ClientRequest::McpDisconnect(_)
        | ClientRequest::McpRefresh(_)
        | ClientRequest::McpAuthStart(_)
        | ClientRequest::McpAuthStatus(_)
        | ClientRequest::McpAuthFinish(_)
        | ClientRequest::McpAuthRemove(_)) => {
            mcp_pool().run(shared, reply, move |s, r| mcp::handle(s, req, r))
        }
        req @ (ClientRequest::WorkspaceGitStatus(_)
        | ClientRequest::WorkspaceGitChanges(_)
        | ClientRequest::WorkspaceGitDiff(_)
        | ClientRequest::WorkspaceDirectoryList(_)
        | ClientRequest::WorkspaceFileRead(_)
        | ClientRequest::WorkspaceFileResolve(_)
        | ClientRequest::WorkspaceFileChunk(_)) => {
            views().run(shared, reply, move |s, r| workspace::handle(s, req, r))
        }
        ClientRequest::SideThreadOpen(p) => {
            views().run(shared, reply, move |s, r| side_chat::open(s, p, r))
        }
        ClientRequest::SideThreadGetHistory(p) => {
            views().run(shared, reply, move |s, r| side_chat::get_history(s, p, r))
        }
        ClientRequest::SideThreadSendMessage(p) => {
            views().run(shared, reply, move |s, r| side_chat::send(s, p, r))
        }
        ClientRequest::SideThreadInterrupt(p) => side_chat::interrupt(shared, p, reply),
        ClientRequest::SideThreadReset(p) => {
            views().run(shared, reply, move |s, r| side_chat::reset(s, p, r))
        }
        req @ (ClientRequest::ActivityList(_)
        | ClientRequest::ActivityTakeover(_)
        | ClientRequest::ActivityRelease(_)
        | ClientRequest::ActivityStop(_)) => views().run(shared, reply, move |s, r| {
            crate::session::activity::handle(s, req, r)
        }),
        ClientRequest::AuthXaiLoginStart(_) => helpers_pool().run(shared, reply, xai_login::start),
        ClientRequest::AuthXaiLoginPoll(p) => {
            helpers_pool().run(shared, reply, move |s, r| xai_login::poll(s, p, r))
        }
        ClientRequest::AuthXaiLoginCancel(p) => xai_login::cancel(shared, p, reply),
        ClientRequest::MessageImageRead(p) => {
            views().run(shared, reply, move |s, r| extras::message_image(s, p, r))
        }
        ClientRequest::ThreadTextSnapshot(p) => {
            views().run(shared, reply, move |s, r| extras::text_snapshot(s, p, r))
        }
        ClientRequest::ConfigCodexCredentials(_) => {
            views().run(shared, reply, extras::codex_credentials)
        }
        req @ (ClientRequest::ThreadControlTake(_)
        | ClientRequest::ThreadControlReturn(_)
        | ClientRequest::DevicePushRegister(_)
        | ClientRequest::DevicePushUnregister(_)
        | ClientRequest::ProjectWork(_)
        | ClientRequest::ProjectSession(_)) => reply.err(ErrorCode::Error, extras::legacy(&req)),
        req @ (ClientRequest::ProcessList(_)
        | ClientRequest::ProcessRead(_)
        | ClientRequest::ProcessWrite(_)
        | ClientRequest::ProcessResize(_)
        | ClientRequest::ProcessStop(_)) => {
            processes_pool().run(shared, reply, move |s, r| processes::handle(s, req, r))
        }
        other => reply.err(
            ErrorCode::InternalError,
            format!("{} is not an inline method", other.method()),
        ),
    }
}
