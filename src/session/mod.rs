//! Session threads: one OS thread per live conversation owns its state (selection,
//! history, pending input, the active turn) and serializes every mutation of it through
//! its mailbox — no locks around conversation state.
//!
//! A session is created by `thread/start`/`thread/fork` ([`spawn_new`]) or revived from
//! the store when a request names a conversation that is not live ([`spawn_existing`]).
//! Idle persisted sessions park (the thread ends; the state lives in the store).
//! Ephemeral conversations never touch the database and never park.
//!
//! The module also holds what the sessions share: the [`registry`] of live
//! conversations that owns their threads, and the [`Host`] bundle of handles (store
//! connections, outbox, pending client requests, providers, runs, live configuration).

pub mod actions;
pub mod activity;
pub mod agents;
pub mod attachments;
pub mod background;
pub mod browser;
pub mod client_tools;
pub mod connections;
pub mod convert;
pub mod driver;
pub mod engines;
pub mod history_page;
pub mod host;
pub mod inputs;
pub mod lifecycle;
pub mod live_config;
pub mod preview;
pub mod questions;
pub mod registry;
pub mod reverse;
pub mod run;
pub mod selection;
pub mod skills;
pub mod started;
pub mod takeover;
pub mod title;
pub mod turn;

pub use host::{Host, ServerOptions};

use crate::outbound::Responder;
use connections::PooledStore;
use convert::TurnState;
use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use registry::{Mail, SessionEntry};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wuu_protocol::{ClientRequest, ErrorCode};
use wuu_store::ThreadRow;

/// A message to a session thread.
// Requests are the common message; boxing them would add an allocation per request for
// the sake of the rare small variants.
#[allow(clippy::large_enum_variant)]
pub enum SessionMsg {
    /// A client request routed to this conversation.
    Request {
        /// The decoded request.
        req: ClientRequest,
        /// Where the answer goes.
        reply: Responder,
    },
    /// Stop active work, settle it, then acknowledge and end.
    Shutdown {
        /// Acknowledged once settled.
        done: Sender<()>,
    },
    /// The answer of an automatic title request (`engine::title`).
    Title {
        /// `title_revision` when the request started (a rename since then wins).
        expected_revision: u64,
        /// The title, or why there is none.
        title: Result<String, String>,
    },
    /// A copy of the conversation (for `thread/fork`).
    Snapshot {
        /// Receives the copy, or why there is none.
        reply: crate::util::reply::ReplyTx<Result<Snapshot, (ErrorCode, String)>>,
    },
    /// Runs a closure on the session thread with the conversation (its history loaded),
    /// or with `Err` (code, message) when the conversation does not exist. Used by work
    /// that must change a conversation from outside a request (`thread/regenerate-title`
    /// stores its title through it).
    Call(SessionCall),
}

/// A closure run on a session thread ([`SessionMsg::Call`]).
pub type SessionCall = Box<dyn FnOnce(Result<&mut Session, (ErrorCode, String)>) + Send>;

/// A copy of a conversation's state.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The thread row.
    pub thread: ThreadRow,
    /// Its turns.
    pub turns: Vec<TurnState>,
}

/// The state a session thread owns.
pub struct Session {
    /// Server state.
    pub shared: Arc<Host>,
    /// Conversation id.
    pub id: String,
    /// Mailbox.
    pub rx: Receiver<Mail>,
    /// The store connection while this session works on a message (taken from
    /// [`crate::session::connections`] before it and given back after it: idle sessions
    /// hold none; a turn also gives it back while it waits for its engine and takes one
    /// again before anything but a text delta, see `driver`); always `None` for
    /// ephemeral conversations. Code that may run while it is given back goes through
    /// [`Session::persist`] or [`Session::acquire_store`], never `None` = ephemeral.
    pub store: Option<PooledStore>,
    /// The conversation row (kept in memory for ephemeral ones).
    pub thread: ThreadRow,
    /// History, oldest turn first (loaded on first need after a revival: reading a page
    /// of a long conversation does not load all of it).
    pub turns: Vec<TurnState>,
    /// Whether `turns` holds the whole history.
    pub history_loaded: bool,
    /// True while a turn executes (read by listings).
    pub running: Arc<AtomicBool>,
    /// Set when the session must end after the current message (deleted, shut down).
    pub exit: bool,
    /// Pending inputs of an ephemeral conversation (persisted ones live in the store).
    pub mem_inputs: Vec<wuu_store::InputRow>,
    /// Set when a steer arrived; the turn driver takes it at the next model step (and
    /// ends a streaming answer at the visible text).
    pub steer_signal: bool,
    /// The external engine session kept between turns ([`engines::open`]).
    pub engine: Option<Box<dyn crate::engine::Engine>>,
    /// The thread an external engine's turns run on (long-lived); the built-in engine
    /// runs on this session's thread.
    pub engine_thread: engines::EngineThread,
    /// The provider stream of the running turn, shared with the registry entry, which
    /// cuts it for requests that must reach a turn blocked on a silent stream.
    pub live: crate::engine::LiveStream,
    /// Set while a run waits for its workers' results: a result arriving at the idle
    /// conversation is stored as queued input and the run starts its turn (rather
    /// than the queue drain).
    pub hold_agent_turns: bool,
    /// Set while `thread` was read from the store by this very message's revival, so
    /// the first message skips re-reading it (one query less per revival).
    pub row_fresh: bool,
    /// Set by a takeover ([`takeover`]): the dead owner's queued input runs once the
    /// current message is answered (never inside it: a read waits for no turn).
    pub drain_due: bool,
}

impl Session {
    /// Whether this conversation lives in memory only.
    pub fn ephemeral(&self) -> bool {
        crate::util::is_ephemeral(&self.id)
    }

    /// Gives the store connection back to the shared pool (the session is about to
    /// wait for its next message).
    pub fn release_store(&mut self) {
        self.store = None;
    }

    /// Takes a store connection for the next message, if this persisted session has
    /// none. Errors: the store cannot be opened ((code, message) for the client).
    pub fn acquire_store(&mut self) -> Result<(), (ErrorCode, String)> {
        if self.store.is_some() || self.ephemeral() {
            return Ok(());
        }
        match self.shared.connections.take() {
            Ok(store) => {
                self.store = Some(store);
                Ok(())
            }
            Err(e) => Err(crate::session::host::store_refusal(&self.shared, &e)),
        }
    }

    /// A session loaded from the store: a dead owner's lease is taken over
    /// ([`takeover`]); inputs left pending with no lease (a process that stopped, or
    /// whose crash start-up recovery settled) come back held, never auto-run; a live
    /// owner's stay its own. Then the mailbox is served.
    fn revived(mut self) {
        if self.take_over_dead_owner() == takeover::LeaseCheck::Free {
            self.hold_leftover_pending();
        }
        if agents::role_of(&self.thread) == agents::Role::Root {
            // Workers a previous process left behind, and results it did not deliver.
            agents::recover(&self.shared, &self.id);
        }
        self.release_store();
        self.run();
    }

    /// Main loop: serve the mailbox; park after `park_after` of idleness.
    fn run(mut self) {
        let park_after = self.shared.opts.park_after;
        while !self.exit {
            if std::mem::take(&mut self.drain_due) {
                self.drain_after_takeover();
                self.release_store();
                continue;
            }
            // Many live conversations: idle ones park sooner (threads stay bounded).
            let wait = if self.shared.registry.len() > crate::session::registry::SOFT_SESSION_CAP {
                park_after.min(crate::session::registry::EARLY_PARK_AFTER)
            } else {
                park_after
            };
            match self.next_message(wait) {
                Ok(msg) => {
                    self.handle(*msg);
                    self.row_fresh = false;
                    self.release_store();
                }
                Err(RecvTimeoutError::Timeout) => {
                    if self.park_if_idle() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        self.unregister_and_drain();
    }

    /// The next message of the mailbox, waiting at most `wait`. The thread sleeps on
    /// the session's wake, which whoever queues a message rings
    /// ([`crate::engine::LiveStream::posted`], from the registry), rather than in the
    /// channel's blocking receive, whose spinning and `sched_yield` before it sleeps cost
    /// every session that goes idle after a turn a share of the CPU the running ones
    /// need. A ring that finds the mailbox empty (left from a message already served)
    /// waits again; when the wake cannot park (no `eventfd`), the channel's receive.
    fn next_message(&self, wait: Duration) -> Result<Mail, RecvTimeoutError> {
        let started = Instant::now();
        loop {
            match self.rx.try_recv() {
                Ok(msg) => return Ok(msg),
                Err(TryRecvError::Disconnected) => return Err(RecvTimeoutError::Disconnected),
                Err(TryRecvError::Empty) => {}
            }
            let left = wait.saturating_sub(started.elapsed());
            if left.is_zero() {
                return Err(RecvTimeoutError::Timeout);
            }
            if let Err(e) = self.live.wake().park(None, Some(left)) {
                log::debug!("session {}: cannot park on its wake ({e})", self.id);
                return self.rx.recv_timeout(left);
            }
        }
    }

    /// Parks a persisted conversation that is idle with an empty mailbox: unregisters it
    /// (under the registry lock, so no message can be lost; the next one revives it from
    /// the store). Returns whether it parked (the caller then ends the thread).
    fn park_if_idle(&self) -> bool {
        if self.ephemeral() || self.running.load(Ordering::SeqCst) {
            return false;
        }
        let rx = self.rx.clone();
        let parked = self
            .shared
            .registry
            .remove_if(&self.id, move || rx.is_empty());
        if parked {
            self.shared.registry.note_parked();
            log::debug!("session {} parked", self.id);
        }
        parked
    }

    /// [`Session::park_if_idle`] for a session that has just created its conversation:
    /// a persisted one with no history keeps its row in the registry
    /// ([`Registry::park_started`](registry::Registry::park_started)) for its revival.
    /// Returns the session when it must stay (then the caller serves it).
    fn park_started(self) -> Option<Session> {
        if !self.turns.is_empty() {
            return (!self.park_if_idle()).then_some(self);
        }
        if self.ephemeral() || self.running.load(Ordering::SeqCst) {
            return Some(self);
        }
        let Session {
            shared,
            id,
            rx,
            thread,
            running,
            live,
            ..
        } = self;
        let idle = rx.clone();
        match shared
            .registry
            .park_started(thread, move || idle.is_empty())
        {
            None => {
                shared.registry.note_parked();
                log::debug!("session {id} parked");
                None
            }
            Some(thread) => {
                let mut session = Session::over(&shared, rx, thread, running, live);
                session.history_loaded = true;
                Some(session)
            }
        }
    }

    /// Ends the session: unregisters it, then re-dispatches anything that was already
    /// in its mailbox (a revived or missing session answers it).
    fn unregister_and_drain(&mut self) {
        self.shared.registry.remove_if(&self.id, || true);
        while let Ok(msg) = self.rx.try_recv() {
            match *msg {
                SessionMsg::Shutdown { done } => {
                    let _ = done.send(());
                }
                other => self.shared.registry.dispatch(&self.shared, &self.id, other),
            }
        }
    }

    /// After a turn: the session now waits (maybe for a long time) for its next
    /// message, so the allocator's free pages what only the turn needed go back
    /// (rate-limited, see [`crate::session::registry::Registry::trim_after_turn`]); the
    /// connection goes back to the pool when the message is done.
    pub fn release_turn_memory(&mut self) {
        self.shared.registry.trim_after_turn();
    }

    /// Another wuu process may have changed this conversation (a turn it ran, a rename):
    /// when idle, re-read the row (a primary-key lookup) and, if it moved, the history.
    fn refresh_from_store(&mut self) {
        if std::mem::take(&mut self.row_fresh)
            || self.running.load(Ordering::SeqCst)
            || crate::util::fault("session_skips_refresh")
        {
            return;
        }
        let Some(store) = self.store.as_ref() else {
            return;
        };
        let Ok(Some(row)) = store.get_thread(&self.id) else {
            return;
        };
        if row == self.thread {
            return;
        }
        let moved = row.updated_at_ms != self.thread.updated_at_ms;
        log::debug!(
            "conversation {} changed in the store (history moved: {moved})",
            self.id
        );
        self.thread = row;
        if moved && self.history_loaded {
            self.history_loaded = false;
            self.ensure_history();
        }
    }

    /// Loads the whole history if this revived session has not yet.
    pub fn ensure_history(&mut self) {
        if self.history_loaded {
            return;
        }
        let id = self.id.clone();
        let shared = self.shared.clone();
        if let Some(store) = self.store.as_mut() {
            match lifecycle::load_turns(&shared, store, &id) {
                Ok(turns) => {
                    self.turns = turns;
                    self.history_loaded = true;
                }
                Err(e) => log::error!("loading the history of {id}: {e}"),
            }
        } else {
            self.history_loaded = true;
        }
    }

    /// Handles one mailbox message.
    pub fn handle(&mut self, msg: SessionMsg) {
        if !matches!(msg, SessionMsg::Shutdown { .. }) {
            if let Err((code, message)) = self.acquire_store() {
                return crate::session::registry::refuse(msg, code, &message);
            }
        }
        // Requests that never need the whole history loaded.
        let paged_read = matches!(
            &msg,
            SessionMsg::Request { req: ClientRequest::ThreadResume(p), .. }
                if p.conversation_history == Some(true) || p.history_page == Some(true)
        ) || matches!(
            &msg,
            SessionMsg::Request {
                req: ClientRequest::ThreadPin(_) | ClientRequest::ThreadOrganizationUpdate(_),
                ..
            }
        );
        if !matches!(msg, SessionMsg::Shutdown { .. } | SessionMsg::Title { .. }) {
            // A dead owner's work is settled (and its input continued) before anything
            // reads this conversation.
            self.take_over_dead_owner();
            self.refresh_from_store();
        }
        if !paged_read && !matches!(msg, SessionMsg::Shutdown { .. }) {
            self.ensure_history();
        }
        match msg {
            SessionMsg::Request { req, reply } => self.handle_request(req, reply),
            SessionMsg::Shutdown { done } => {
                // Outside a turn there is no active work; during a turn the driver
                // interrupts and settles before this runs.
                let _ = done.send(());
                self.exit = true;
            }
            SessionMsg::Title {
                expected_revision,
                title,
            } => title::apply(self, expected_revision, title),
            SessionMsg::Snapshot { reply } => {
                let _ = reply.send(Ok(Snapshot {
                    thread: self.thread.clone(),
                    turns: self.turns.clone(),
                }));
            }
            SessionMsg::Call(f) => f(Ok(self)),
        }
    }

    fn handle_request(&mut self, req: ClientRequest, reply: Responder) {
        match req {
            ClientRequest::ThreadResume(p) => self.resume(p, reply),
            ClientRequest::ThreadRename(_) if crate::util::fault("session_panic_on_rename") => {
                panic!("injected fault: session_panic_on_rename")
            }
            ClientRequest::ThreadRename(p) => self.rename(p, reply),
            ClientRequest::ThreadArchive(p) => self.archive(p, reply),
            ClientRequest::ThreadDelete(p) => self.delete(p, reply),
            // History and selection: see history_page.rs and selection.rs.
            req @ (ClientRequest::ThreadHistoryRead(_)
            | ClientRequest::ThreadActivityRead(_)
            | ClientRequest::ThreadContentRead(_)
            | ClientRequest::ThreadPreview(_)
            | ClientRequest::ThreadAttachmentRead(_)) => {
                history_page::serve_session(self, req, reply)
            }
            ClientRequest::ConfigModelUpdate(p) => self.update_selection(p, reply),
            ClientRequest::TurnStart(p) => turn::turn_start(self, p, reply),
            ClientRequest::ThreadCompactStart(_) => turn::compact_start(self, reply),
            ClientRequest::TurnInterrupt(p) => turn::turn_interrupt(self, p, reply),
            ClientRequest::RunStart(p) => run::run_start(self, p, reply),
            ClientRequest::TurnQueue(p) => self.queue(p, reply),
            ClientRequest::TurnUpdateQueued(p) => self.update_queued(p, reply),
            ClientRequest::TurnDequeue(p) => self.dequeue(p, reply),
            ClientRequest::TurnSteer(p) => self.steer(p, reply),
            ClientRequest::TurnUnsteer(p) => self.unsteer(p, reply),
            ClientRequest::TurnRequeue(p) => self.requeue(p, reply),
            ClientRequest::ThreadPin(p) => self.pin(p, reply),
            ClientRequest::ThreadOrganizationUpdate(p) => self.organize(p, reply),
            ClientRequest::ThreadEditMessage(p) => self.edit_message(p, reply),
            ClientRequest::ThreadContextComposition(_) => self.context_composition(reply),
            ClientRequest::RunInterrupt(p) => run::run_interrupt_idle(self, p, reply),
            other => reply.err(
                ErrorCode::InternalError,
                format!("{} is not a conversation method", other.method()),
            ),
        }
    }
}

impl Session {
    /// A session of conversation `thread` over mailbox `rx`: no store connection,
    /// history not loaded, idle.
    fn over(
        shared: &Arc<Host>,
        rx: Receiver<Mail>,
        thread: ThreadRow,
        running: Arc<AtomicBool>,
        live: crate::engine::LiveStream,
    ) -> Session {
        Session {
            shared: shared.clone(),
            id: thread.id.clone(),
            rx,
            store: None,
            thread,
            turns: vec![],
            history_loaded: false,
            running,
            exit: false,
            mem_inputs: vec![],
            steer_signal: false,
            engine: None,
            engine_thread: Default::default(),
            live,
            hold_agent_turns: false,
            row_fresh: false,
            drain_due: false,
        }
    }
}

fn entry_for(
    tx: Sender<Mail>,
    running: Arc<AtomicBool>,
    live: crate::engine::LiveStream,
) -> SessionEntry {
    SessionEntry { tx, running, live }
}

/// Spawns the session thread of an existing conversation (revival) over the mailbox
/// `rx` the registry created for it. With `kept`, the row of a conversation started on
/// this process whose session parked before any request ([`started`]), the session
/// resumes from it and its empty history as the session that parked held them (each
/// message re-reads the row and the lease first, as in any live session); otherwise the
/// thread loads the conversation and, if it has gone meanwhile, answers
/// `thread_not_found` to what it was sent and ends. Errors: the OS refused a thread (the
/// caller answers the mailbox).
pub fn spawn_existing(
    shared: &Arc<Host>,
    thread_id: &str,
    kept: Option<ThreadRow>,
    rx: Receiver<Mail>,
    running: Arc<AtomicBool>,
    live: crate::engine::LiveStream,
) -> Result<(), String> {
    let shared = shared.clone();
    let id = thread_id.to_owned();
    crate::util::spawn(
        format!("wuu-session-{}", crate::util::name_tail(&id, 12)),
        move || {
            let _guard = crate::session::registry::PanicGuard {
                shared: &shared,
                id: &id,
                rx: &rx,
                running: running.clone(),
            };
            if let Some(thread) = kept {
                let mut session = Session::over(&shared, rx.clone(), thread, running, live);
                session.history_loaded = true;
                return session.run();
            }
            match lifecycle::load_thread(&shared, &id) {
                Ok(Some((store, thread))) => {
                    let mut session = Session::over(&shared, rx.clone(), thread, running, live);
                    session.store = Some(store);
                    session.row_fresh = true;
                    session.revived()
                }
                Ok(None) => refuse_all(&shared, &id, &rx, ErrorCode::ThreadNotFound, None),
                Err(e) => {
                    let (code, message) = crate::session::host::store_refusal(&shared, &e);
                    refuse_all(&shared, &id, &rx, code, Some(message))
                }
            }
        },
    )
    .map(|_| ())
    .map_err(|e| e.to_string())
}

fn refuse_all(
    shared: &Arc<Host>,
    id: &str,
    rx: &Receiver<Mail>,
    code: ErrorCode,
    detail: Option<String>,
) {
    shared.registry.remove_if(id, || true);
    let message =
        detail.unwrap_or_else(|| format!("thread {:?} not found", crate::util::clip(id, 80)));
    crate::session::registry::drain_refusing(rx, code, &message);
}

/// Spawns a new session thread for `thread/start` or `thread/fork`; the thread creates
/// the conversation, registers it, answers, and then serves it.
pub fn spawn_new(shared: &Arc<Host>, req: ClientRequest, reply: Responder) {
    let shared = shared.clone();
    let spawned = crate::util::spawn("wuu-session-new".into(), move || {
        let (tx, rx) = crate::session::registry::mailbox();
        let running = Arc::new(AtomicBool::new(false));
        let live = crate::engine::LiveStream::default();
        let created = match req {
            ClientRequest::ThreadStart(p) => lifecycle::create(&shared, p),
            ClientRequest::ThreadFork(p) => lifecycle::fork(&shared, p),
            other => Err((
                ErrorCode::InternalError,
                format!("{} does not create a conversation", other.method()),
            )),
        };
        match created {
            Err((code, msg)) => reply.err(code, msg),
            Ok((store, thread, turns)) => {
                let id = thread.id.clone();
                shared
                    .registry
                    .insert(&id, entry_for(tx, running.clone(), live.clone()));
                let _guard = crate::session::registry::PanicGuard {
                    shared: &shared,
                    id: &id,
                    rx: &rx,
                    running: running.clone(),
                };
                let mut session = Session::over(&shared, rx.clone(), thread, running, live);
                session.store = store;
                session.turns = turns;
                session.history_loaded = true;
                session.announce_created(reply);
                session.release_store();
                // A conversation only started needs no thread: it parks at once unless
                // a request already arrived, and its first request revives it from the
                // row it holds (a fork's copied history is read from the store).
                if let Some(session) = session.park_started() {
                    session.run();
                }
            }
        }
    });
    if let Err(e) = spawned {
        log::error!("cannot spawn a session thread: {e}");
    }
}
