//! The session registry: conversation id → mailbox of its live session thread.
//!
//! A request naming a conversation that is not live gets a mailbox at once (so later
//! requests of that conversation queue behind it, in order) and the id goes to the
//! reviver: one thread with its own read connection that checks the conversation exists
//! and only then spawns its session thread (a conversation started here whose row the
//! registry keeps, [`super::started`], skips the check and the store reads of a
//! revival). An unknown id is answered `thread_not_found`
//! without any thread being created; the reviver's queue is bounded, so a flood of
//! unknown ids is refused (`overloaded`) instead of piling up mailboxes.
//!
//! Sends happen under the registry lock with `try_send`, so a session that parks
//! (removes itself under the same lock after finding its mailbox empty) can never lose a
//! message. A client request never waits for room (the reader must not stall every
//! conversation behind one): a full mailbox, or a full reviver queue, answers it
//! `overloaded` (retryable). Messages from the server's own workers (snapshots, titles,
//! calls) wait outside the lock instead; if the session parked meanwhile, the message
//! comes back and is re-dispatched to a revived session.

use super::started::StartedRows;
use super::Host;
use crate::engine::{Control, LiveStream};
use crate::session::{self, SessionMsg};
use crossbeam_channel::Receiver;
use crossbeam_channel::{Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};
use wuu_protocol::ErrorCode;
use wuu_store::ThreadRow;

/// Messages a session mailbox holds; a client request finding it full is answered
/// `overloaded`.
pub const MAILBOX_CAPACITY: usize = 256;

/// One message in a session mailbox. Boxed because a bounded channel preallocates all
/// its slots: unboxed, every live session's mailbox held 256 slots of the largest
/// request (~440 bytes each, 110 KiB per live session, measured with heaptrack; issue
/// 15); boxed, a slot is a pointer and a stamp (16 bytes, 4 KiB per mailbox), for one
/// small allocation per message.
pub type Mail = Box<SessionMsg>;

/// A new, empty session mailbox ([`MAILBOX_CAPACITY`] messages).
pub fn mailbox() -> (Sender<Mail>, Receiver<Mail>) {
    crossbeam_channel::bounded(MAILBOX_CAPACITY)
}

/// Conversations waiting for the reviver's existence check; more are refused
/// (`overloaded`). Each holds an empty mailbox (~4 KiB), so a client that opens many
/// parked conversations at once is served without retries.
pub const REVIVE_QUEUE: usize = 1024;

/// Idle persisted sessions the registry keeps before idle sessions park early (after
/// [`EARLY_PARK_AFTER`] instead of `park_after`): live session threads stay bounded
/// when a client touches many conversations at once.
pub const SOFT_SESSION_CAP: usize = 256;

/// Idleness after which a session parks while the registry is over [`SOFT_SESSION_CAP`].
/// Short, so that the number of live sessions stays near the cap however fast turns
/// end (with 1 s, a fast machine running 1,000 short turns kept nearly all of them
/// live, about 120 KiB each); a parked conversation is revived from the store in about a
/// millisecond (pooled connection, history loaded on demand).
pub const EARLY_PARK_AFTER: Duration = Duration::from_millis(250);

/// Least time between two trims asked for after turns ([`Registry::trim_after_turn`]).
pub const TURN_TRIM_INTERVAL: Duration = Duration::from_millis(200);

/// A conversation waiting for its existence check: its id, the mailbox's receiving end
/// and its running flag.
type Revival = (String, Receiver<Mail>, Arc<AtomicBool>, LiveStream);

/// A live session as the registry sees it.
#[derive(Clone)]
pub struct SessionEntry {
    /// Mailbox.
    pub tx: Sender<Mail>,
    /// True while a turn executes (for listings' `status`).
    pub running: Arc<AtomicBool>,
    /// The provider stream the session's turn reads, if any, and the session thread's
    /// wake: whoever queues a message tells it ([`LiveStream::posted`]), which ends a
    /// read the session thread is parked in so it serves the message.
    pub live: LiveStream,
}

/// The control a message implies for a running turn's provider stream: an interrupt
/// (turn or run interrupt, forced archive, shutdown) or a steer; `None` for the rest
/// (used to cut a read the session cannot be woken from, [`LiveStream::posted`]).
fn cut_of(msg: &SessionMsg) -> Option<Control> {
    use wuu_protocol::ClientRequest as R;
    match msg {
        SessionMsg::Request { req, .. } => match req {
            R::TurnInterrupt(_) | R::RunInterrupt(_) => Some(Control::Interrupt),
            R::ThreadArchive(p) if p.archived && p.force.unwrap_or(false) => {
                Some(Control::Interrupt)
            }
            R::TurnSteer(_) => Some(Control::Steer(None)),
            _ => None,
        },
        SessionMsg::Shutdown { .. } => Some(Control::Interrupt),
        _ => None,
    }
}

/// Live sessions by conversation id.
pub struct Registry {
    inner: Mutex<HashMap<String, SessionEntry>>,
    generation: std::sync::atomic::AtomicU64,
    revive: Sender<Revival>,
    /// Sessions parked since the lease thread last returned free memory.
    parked: std::sync::atomic::AtomicU64,
    /// When free memory was last returned after a turn ([`Registry::trim_after_turn`]),
    /// in ms since `epoch`.
    last_trim_ms: std::sync::atomic::AtomicU64,
    /// Running flags now set ([`Registry::set_running`]).
    running: std::sync::atomic::AtomicUsize,
    epoch: Instant,
    /// Rows of conversations started here whose session parked before any request
    /// ([`super::started`]); locked inside `inner` only.
    started: Mutex<StartedRows>,
}

impl Registry {
    /// Counts a session that parked (its thread ends and frees its state).
    pub fn note_parked(&self) {
        self.parked.fetch_add(1, Ordering::Relaxed);
    }

    /// How many sessions parked since the last call (resets the count).
    pub fn take_parked(&self) -> u64 {
        self.parked.swap(0, Ordering::Relaxed)
    }

    /// An empty registry and its reviver thread (which ends when `shared` is gone).
    pub fn start(shared: Weak<Host>) -> Registry {
        let (revive, rx) = crossbeam_channel::bounded::<Revival>(REVIVE_QUEUE);
        let spawned = crate::util::spawn("wuu-revive".into(), move || revive_loop(shared, rx));
        if let Err(e) = spawned {
            // Without the reviver, requests to parked conversations are refused with
            // `internal_error` by `dispatch` (the queue reports disconnection).
            log::error!("cannot spawn the reviver thread: {e}");
        }
        Registry {
            inner: Mutex::new(HashMap::new()),
            generation: Default::default(),
            revive,
            parked: Default::default(),
            last_trim_ms: Default::default(),
            running: Default::default(),
            epoch: Instant::now(),
            started: Default::default(),
        }
    }

    /// A session finished a turn: what the turn allocated (request and answer buffers,
    /// the engine's and the provider's threads) is free now but stays in the
    /// allocator's arenas until trimmed (measured: ~90 KiB per conversation after 1,000
    /// short turns). Returns it when no other turn is running, unless a trim ran in the
    /// last [`TURN_TRIM_INTERVAL`] (one trim walks every arena: ~1 ms, so at most a few
    /// per second); the lease thread's next heartbeat trims what turns freed since.
    ///
    /// Not while other turns run: they allocate the same memory again at once, and a
    /// trim is hundreds of `madvise` calls, each a TLB shootdown that interrupts every
    /// CPU running this process (with many turns streaming, trims after the first turns
    /// to end took a large share of the session threads' CPU).
    pub fn trim_after_turn(&self) {
        self.note_parked();
        if self.running.load(Ordering::SeqCst) > 0 {
            return;
        }
        let now = self.epoch.elapsed().as_millis() as u64;
        let last = self.last_trim_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= TURN_TRIM_INTERVAL.as_millis() as u64;
        if due
            && self
                .last_trim_ms
                .compare_exchange(last, now.max(1), Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return_free_memory();
        }
    }

    /// Number of live (and reviving) sessions.
    pub fn len(&self) -> usize {
        self.inner.lock().len()
    }

    /// Whether no session is live.
    pub fn is_empty(&self) -> bool {
        self.inner.lock().is_empty()
    }

    /// A counter that changes whenever a conversation starts or stops executing
    /// (listing caches key on it, because `status` comes from here, not the store).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Sets a session's running flag and bumps [`Registry::generation`].
    pub fn set_running(&self, flag: &AtomicBool, running: bool) {
        if flag.swap(running, Ordering::SeqCst) != running {
            if running {
                self.running.fetch_add(1, Ordering::SeqCst);
            } else {
                self.running.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// How many conversations are running a turn now.
    pub fn running_count(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Delivers `msg` to the session of `thread_id`. When it is not live, the message
    /// waits in a new mailbox while the reviver checks the store: an existing
    /// conversation gets its session thread, a missing one answers `thread_not_found`
    /// (no thread is spawned for it).
    pub fn dispatch(&self, _shared: &Arc<Host>, thread_id: &str, msg: SessionMsg) {
        let mut msg: Mail = Box::new(msg);
        loop {
            let mut revival = None;
            let tx = {
                let mut map = self.inner.lock();
                let entry = match map.get(thread_id) {
                    Some(e) => e.clone(),
                    None => {
                        let (tx, rx) = mailbox();
                        let running = Arc::new(AtomicBool::new(false));
                        let e = SessionEntry {
                            tx,
                            running: running.clone(),
                            live: LiveStream::default(),
                        };
                        map.insert(thread_id.to_owned(), e.clone());
                        revival = Some((thread_id.to_owned(), rx, running, e.live.clone()));
                        e
                    }
                };
                let cut = entry.live.cut_target(cut_of(&msg).as_ref());
                match entry.tx.try_send(msg) {
                    Ok(()) => {
                        drop(map);
                        entry.live.posted(cut);
                        if let Some(job) = revival {
                            self.queue_revival(job);
                        }
                        return;
                    }
                    Err(TrySendError::Full(m)) => match *m {
                        SessionMsg::Request { reply, .. } => {
                            drop(map);
                            return reply.err(
                                ErrorCode::Overloaded,
                                format!(
                                    "overloaded: the mailbox of thread {:?} is full ({MAILBOX_CAPACITY} requests waiting); nothing was done, retry later",
                                    crate::util::clip(thread_id, 80)
                                ),
                            );
                        }
                        other => {
                            msg = Box::new(other);
                            (entry.tx, entry.live)
                        }
                    },
                    Err(TrySendError::Disconnected(m)) => {
                        // The session thread ended without unregistering (panic).
                        log::warn!("session {thread_id} died; reviving");
                        map.remove(thread_id);
                        msg = m;
                        continue;
                    }
                }
            };
            let (tx, live) = tx;
            let cut = live.cut_target(cut_of(&msg).as_ref());
            match tx.send(msg) {
                Ok(()) => {
                    live.posted(cut);
                    return;
                }
                Err(e) => msg = e.0,
            }
        }
    }

    /// Hands a new mailbox to the reviver without waiting: when its queue is full the
    /// mailbox is dropped and what it holds is answered `overloaded`.
    fn queue_revival(&self, job: Revival) {
        match self.revive.try_send(job) {
            Ok(()) => {}
            Err(TrySendError::Full((id, rx, ..))) => {
                self.remove_if(&id, || true);
                drain_refusing(
                    &rx,
                    ErrorCode::Overloaded,
                    &format!(
                        "overloaded: {REVIVE_QUEUE} parked conversations are waiting to be revived; nothing was done, retry later"
                    ),
                );
            }
            Err(TrySendError::Disconnected((id, rx, ..))) => {
                log::error!("the reviver is gone; refusing requests to {id:?}");
                self.remove_if(&id, || true);
                drain_refusing(
                    &rx,
                    ErrorCode::InternalError,
                    "the server cannot revive conversations",
                );
            }
        }
    }

    /// Registers a session created by `thread/start` / `thread/fork`.
    pub fn insert(&self, thread_id: &str, entry: SessionEntry) {
        self.inner.lock().insert(thread_id.to_owned(), entry);
    }

    /// Unregisters `thread_id` if `is_idle` holds while the lock is taken (parking).
    /// Returns whether it was removed.
    pub fn remove_if(&self, thread_id: &str, is_idle: impl FnOnce() -> bool) -> bool {
        let mut map = self.inner.lock();
        if is_idle() {
            map.remove(thread_id);
            true
        } else {
            false
        }
    }

    /// Parks the session of a conversation just started here when its mailbox is
    /// empty (`is_idle`, under the lock): unregisters it and keeps its `row`, so that the
    /// revival its first request causes starts from it instead of the store
    /// ([`super::started`]). Kept before the id leaves the map, so the reviver of any
    /// later request finds it. Returns the row back when the session must stay (`None`:
    /// parked).
    pub fn park_started(
        &self,
        row: ThreadRow,
        is_idle: impl FnOnce() -> bool,
    ) -> Option<ThreadRow> {
        let mut map = self.inner.lock();
        if !is_idle() {
            return Some(row);
        }
        map.remove(&row.id);
        self.started.lock().keep(row);
        None
    }

    /// The row kept for `thread_id` by [`Registry::park_started`], taken out.
    pub fn take_started(&self, thread_id: &str) -> Option<ThreadRow> {
        self.started.lock().take(thread_id)
    }

    /// Ids of the live sessions running a turn now (one registry lock).
    pub fn running_ids(&self) -> std::collections::HashSet<String> {
        self.inner
            .lock()
            .iter()
            .filter(|(_, e)| e.running.load(Ordering::SeqCst))
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// Whether the live session of `thread_id` is running a turn (one registry lock; a
    /// listing takes [`Registry::running_ids`] once instead).
    pub fn is_running(&self, thread_id: &str) -> bool {
        self.inner
            .lock()
            .get(thread_id)
            .is_some_and(|e| e.running.load(Ordering::SeqCst))
    }

    /// Asks every live session to stop its work and settle, waiting up to `limit` for
    /// all of them.
    pub fn shutdown_all(&self, limit: Duration) {
        let entries: Vec<(String, SessionEntry)> = self
            .inner
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let deadline = Instant::now() + limit;
        let mut waits = vec![];
        for (id, e) in entries {
            let (done_tx, done_rx) = crossbeam_channel::bounded(1);
            let left = deadline.saturating_duration_since(Instant::now());
            let cut = e.live.cut_target(Some(&Control::Interrupt));
            if e.tx
                .send_timeout(Box::new(SessionMsg::Shutdown { done: done_tx }), left)
                .is_ok()
            {
                e.live.posted(cut);
                waits.push((id, done_rx));
            }
        }
        for (id, rx) in waits {
            let left = deadline.saturating_duration_since(Instant::now());
            if rx.recv_timeout(left).is_err() {
                log::warn!("session {id} did not settle before shutdown");
            }
        }
    }
}

/// Answers everything in `rx` with `code` (a shutdown is acknowledged).
pub fn drain_refusing(rx: &Receiver<Mail>, code: ErrorCode, message: &str) {
    while let Ok(msg) = rx.try_recv() {
        refuse(*msg, code, message);
    }
}

/// Answers one session message with `code` and `message` (a shutdown is acknowledged;
/// a title answer is dropped).
pub fn refuse(msg: SessionMsg, code: ErrorCode, message: &str) {
    match msg {
        SessionMsg::Request { reply, .. } => reply.err(code, message),
        SessionMsg::Shutdown { done } => {
            let _ = done.send(());
        }
        SessionMsg::Snapshot { reply } => {
            let _ = reply.send(Err((code, message.to_owned())));
        }
        SessionMsg::Title { .. } => {}
        SessionMsg::Call(f) => f(Err((code, message.to_owned()))),
    }
}

/// The reviver: checks each waiting conversation against the store and spawns its
/// session thread, or refuses its mailbox (`thread_not_found`; `store_busy` or
/// `internal_error` when the store cannot answer).
fn revive_loop(shared: Weak<Host>, rx: Receiver<Revival>) {
    let mut store: Option<wuu_store::Store> = None;
    for (id, mailbox, running, live) in rx.iter() {
        let Some(shared) = shared.upgrade() else {
            drain_refusing(
                &mailbox,
                ErrorCode::ServerClosed,
                "the server is shutting down",
            );
            continue;
        };
        // Started here and never served: its session resumes from the row it held.
        let kept = shared.registry.take_started(&id);
        let exists = if kept.is_some() {
            Ok(true)
        } else if crate::util::is_ephemeral(&id) {
            // Ephemeral conversations live in memory only: not live means gone.
            Ok(false)
        } else {
            let opened = match store.take() {
                Some(s) => Ok(s),
                None => shared.open_store(),
            };
            match opened {
                Ok(s) => {
                    let r = s.thread_exists(&id);
                    store = Some(s);
                    r.map_err(|e| super::host::store_refusal(&shared, &e))
                }
                Err(e) => Err(super::host::store_refusal(&shared, &e)),
            }
        };
        match exists {
            Ok(true) => {
                if let Err(e) =
                    session::spawn_existing(&shared, &id, kept, mailbox.clone(), running, live)
                {
                    log::error!("cannot spawn a session thread for {id:?}: {e}");
                    shared.registry.remove_if(&id, || true);
                    drain_refusing(
                        &mailbox,
                        ErrorCode::InternalError,
                        &format!("cannot start a session thread: {e}"),
                    );
                }
            }
            Ok(false) => {
                shared.registry.remove_if(&id, || true);
                let message = format!("thread {:?} not found", crate::util::clip(&id, 80));
                drain_refusing(&mailbox, ErrorCode::ThreadNotFound, &message);
            }
            Err((code, message)) => {
                shared.registry.remove_if(&id, || true);
                drain_refusing(&mailbox, code, &message);
            }
        }
    }
}

/// Held by a session thread while it serves its conversation. If the thread panics (a
/// bug), dropping the guard during unwinding keeps the fault inside that conversation:
/// the session is unregistered, its running flag cleared, a turn it was running is
/// settled as interrupted and its lease released (in one store transaction), and every
/// request still in its mailbox is answered `internal_error`. The request being handled
/// is answered `internal_error` by its own responder. The next request to the
/// conversation revives it from the store; the server keeps serving.
pub struct PanicGuard<'a> {
    /// Server state.
    pub shared: &'a Arc<Host>,
    /// The conversation.
    pub id: &'a str,
    /// Its mailbox.
    pub rx: &'a Receiver<Mail>,
    /// Its running flag.
    pub running: Arc<AtomicBool>,
}

impl Drop for PanicGuard<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let id = self.id;
        log::error!(
            "the session thread of {id:?} panicked; its requests are answered internal_error"
        );
        self.shared.registry.remove_if(id, || true);
        if self.running.load(Ordering::SeqCst) {
            self.shared.registry.set_running(&self.running, false);
        }
        if !crate::util::is_ephemeral(id) {
            match self.shared.open_store() {
                Ok(mut store) => {
                    match store.settle_abandoned(id, &self.shared.owner, PANIC_MESSAGE) {
                        Ok(r) if !r.is_empty() => log::warn!("settled after the panic: {r:?}"),
                        Ok(_) => {}
                        Err(e) => log::error!("cannot settle {id:?} after the panic: {e}"),
                    }
                }
                Err(e) => log::error!("cannot settle {id:?} after the panic: {e}"),
            }
            self.shared.threads_changed();
        }
        drain_refusing(
            self.rx,
            ErrorCode::InternalError,
            "internal error: the session of this conversation failed; retry the request",
        );
    }
}

/// Error message stored on a turn whose session thread panicked.
pub const PANIC_MESSAGE: &str =
    "interrupted: the server hit an internal error while running this turn";
/// Returns the allocator's free memory to the operating system.
///
/// Parked sessions free their state (connection, history, buffers), but glibc's malloc
/// keeps freed memory in its per-thread arenas, so a server whose conversations all went
/// idle would keep the RSS of its busiest moment. `malloc_trim(0)` walks every arena and
/// gives whole free pages back (`madvise(MADV_DONTNEED)`); neither std nor rustix offers
/// it. Called from the lease thread after sessions parked (at most once a heartbeat).
/// Returns whether memory was released. A no-op on other platforms / C libraries.
pub fn return_free_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        extern "C" {
            /// glibc `int malloc_trim(size_t pad)` (malloc.h): releases free memory at
            /// the top of the heap and whole free pages inside every arena; returns 1
            /// if any memory was released. Thread-safe (takes each arena's lock).
            fn malloc_trim(pad: usize) -> std::ffi::c_int;
        }
        // SAFETY: malloc_trim takes no pointers and only inspects allocator state under
        // the allocator's own locks; any thread may call it at any time.
        unsafe { malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_count_follows_the_flags_and_holds_trims_back_while_turns_run() {
        let reg = Registry::start(Weak::new());
        let (a, b) = (AtomicBool::new(false), AtomicBool::new(false));
        reg.set_running(&a, true);
        reg.set_running(&a, true); // no transition: counted once
        reg.set_running(&b, true);
        assert_eq!(reg.running_count(), 2);
        // A turn ended while another runs: no trim (the timestamp stays unset).
        reg.set_running(&a, false);
        reg.trim_after_turn();
        assert_eq!(reg.last_trim_ms.load(Ordering::Relaxed), 0);
        reg.set_running(&a, false);
        assert_eq!(reg.running_count(), 1);
        // The last running turn ended: the trim runs.
        reg.set_running(&b, false);
        assert_eq!(reg.running_count(), 0);
        reg.trim_after_turn();
        assert_ne!(reg.last_trim_ms.load(Ordering::Relaxed), 0);
    }
}
