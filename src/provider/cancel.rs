//! Cancellation of one logical provider request (spec `providers.md` §6.6): a shared
//! flag, a channel that wakes every waiter at once, and the HTTP agent of the attempt
//! in flight, shut down so a read blocked on a silent socket returns; and the
//! [`Wake`] of the thread that reads the stream, if it serves more than the stream.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};

use super::wake::Wake;

/// Cancellation of one logical request, shared between the consumer and the thread
/// running it. Cloning shares the token.
#[derive(Clone, Debug)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Debug)]
struct CancelInner {
    cancelled: AtomicBool,
    /// Dropped on cancel: wakes every `select!`/`recv_timeout` on `wake_rx` at once.
    wake_tx: Mutex<Option<Sender<()>>>,
    wake_rx: Receiver<()>,
    /// The HTTP agent of the attempt in flight; shut down on cancel.
    agent: Mutex<Option<ureq::Agent>>,
    /// The reading thread's wake: its streaming reads return when it is signalled.
    wake: std::sync::OnceLock<Arc<Wake>>,
}

impl Default for CancelToken {
    fn default() -> Self {
        Self::new()
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        let (tx, rx) = crossbeam_channel::bounded(0);
        CancelToken {
            inner: Arc::new(CancelInner {
                cancelled: AtomicBool::new(false),
                wake_tx: Mutex::new(Some(tx)),
                wake_rx: rx,
                agent: Mutex::new(None),
                wake: std::sync::OnceLock::new(),
            }),
        }
    }

    /// Cancels: sets the flag, wakes waiters and shuts down the connection in flight.
    /// Idempotent.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        lock(&self.inner.wake_tx).take();
        if let Some(agent) = lock(&self.inner.agent).take() {
            agent.shutdown();
        }
        // A reading thread parked between attempts (a backoff) returns too.
        if let Some(w) = self.inner.wake.get() {
            w.signal();
        }
    }

    /// Whether [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// A receiver that becomes disconnected when the token is cancelled (for `select!`).
    pub fn wake_receiver(&self) -> &Receiver<()> {
        &self.inner.wake_rx
    }

    /// Sleeps up to `d`; returns true (early) if cancelled.
    pub fn sleep(&self, d: Duration) -> bool {
        if self.is_cancelled() {
            return true;
        }
        let _ = self.inner.wake_rx.recv_timeout(d);
        self.is_cancelled()
    }

    /// Makes the request's streaming reads return when `wake` is signalled (the reading
    /// thread serves what woke it, then reads on). Set once; later calls are ignored.
    pub fn set_wake(&self, wake: Arc<Wake>) {
        let _ = self.inner.wake.set(wake);
    }

    /// The wake set by [`CancelToken::set_wake`].
    pub fn wake(&self) -> Option<&Arc<Wake>> {
        self.inner.wake.get()
    }

    /// Registers the agent of the attempt in flight (replacing the previous one). When
    /// already cancelled, shuts it down at once and returns false.
    pub(crate) fn set_agent(&self, agent: &ureq::Agent) -> bool {
        let mut slot = lock(&self.inner.agent);
        if self.is_cancelled() {
            drop(slot);
            agent.clone().shutdown();
            return false;
        }
        *slot = Some(agent.clone());
        true
    }

    /// Forgets the attempt's agent.
    pub(crate) fn clear_agent(&self) {
        lock(&self.inner.agent).take();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
