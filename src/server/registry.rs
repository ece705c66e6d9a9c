//! The session registry: conversation id → mailbox of its live session thread.
//!
//! Sends happen under the registry lock with `try_send`, so a session that parks
//! (removes itself under the same lock after finding its mailbox empty) can never lose a
//! message. When a mailbox is full the sender waits outside the lock (backpressure);
//! if the session parked meanwhile, the message comes back and is re-dispatched to a
//! revived session.

use super::Shared;
use crate::session::{self, SessionMsg};
use crossbeam_channel::{Sender, TrySendError};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Messages a session mailbox holds before senders wait.
pub const MAILBOX_CAPACITY: usize = 256;

/// A live session as the registry sees it.
#[derive(Clone)]
pub struct SessionEntry {
    /// Mailbox.
    pub tx: Sender<SessionMsg>,
    /// True while a turn executes (for listings' `status`).
    pub running: Arc<AtomicBool>,
}

/// Live sessions by conversation id.
#[derive(Default)]
pub struct Registry {
    inner: Mutex<HashMap<String, SessionEntry>>,
    generation: std::sync::atomic::AtomicU64,
}

impl Registry {
    /// A counter that changes whenever a conversation starts or stops executing
    /// (listing caches key on it, because `status` comes from here, not the store).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Sets a session's running flag and bumps [`Registry::generation`].
    pub fn set_running(&self, flag: &AtomicBool, running: bool) {
        flag.store(running, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Delivers `msg` to the session of `thread_id`, reviving it from the store when it
    /// is not live (a missing conversation answers `thread_not_found` from the revived
    /// session, which then ends).
    pub fn dispatch(&self, shared: &Arc<Shared>, thread_id: &str, mut msg: SessionMsg) {
        loop {
            let tx = {
                let mut map = self.inner.lock();
                let entry = match map.get(thread_id) {
                    Some(e) => e.clone(),
                    None => {
                        let e = session::spawn_existing(shared, thread_id);
                        map.insert(thread_id.to_owned(), e.clone());
                        e
                    }
                };
                match entry.tx.try_send(msg) {
                    Ok(()) => return,
                    Err(TrySendError::Full(m)) => {
                        msg = m;
                        entry.tx
                    }
                    Err(TrySendError::Disconnected(m)) => {
                        // The session thread ended without unregistering (panic).
                        log::warn!("session {thread_id} died; reviving");
                        map.remove(thread_id);
                        msg = m;
                        continue;
                    }
                }
            };
            match tx.send(msg) {
                Ok(()) => return,
                Err(e) => msg = e.0,
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

    /// Whether the live session of `thread_id` is running a turn.
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
            if e.tx
                .send_timeout(SessionMsg::Shutdown { done: done_tx }, left)
                .is_ok()
            {
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
