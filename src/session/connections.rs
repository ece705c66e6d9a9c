//! Store connections shared by the session threads.
//!
//! A session thread needs a connection only while it works with the store: a request, the
//! start and the end of a turn, an item to persist. Before, every live session kept its
//! own connection for as long as it lived, idle or not: ~35–40 KiB of SQLite state
//! (schema, lookaside, statements) plus its cached pages (~100 KiB after a turn), times
//! every live conversation. Now a session takes a connection from here when it needs one
//! ([`Connections::take`]) and the connection goes back when the [`PooledStore`] is
//! dropped: between messages, and during a turn while the session waits for its engine
//! (see `session::driver`).
//!
//! **Bounded.** At most [`MAX_OPEN`] connections are handed out at once; a session that
//! asks for one beyond that waits (asleep, so the holders get the CPU) until one comes
//! back, up to [`TAKE_WAIT`], and only then opens one more. Without the bound, 200
//! conversations starting a turn at once opened 200 connections, and each paid for a cold
//! one: SQLite parses the schema again, prepares every statement again and closes it
//! afterwards (measured: ~75% of the session threads' CPU at 200 turn starts, 3.5 ms per
//! turn; `WUU_SCALE_ROWS=stream WUU_SCALE_DELTAS=1 cargo bench --bench scale`). With it,
//! the same starts run on a few warm connections. Holders that block (a slow client's
//! backpressure) cost the others at most [`TAKE_WAIT`] before one more is opened, never a
//! deadlock.
//!
//! Nothing about durability or ordering changes: a connection is used by one thread at a
//! time, every store call still commits (IMMEDIATE transaction, `synchronous=NORMAL`,
//! WAL) before the session acknowledges, and the session thread still serializes the
//! conversation's mutations. Connections carry no per-conversation state between calls
//! (the store's methods open and end their transactions inside the call).

use parking_lot::{Condvar, Mutex};
use std::sync::Arc;
use std::time::{Duration, Instant};
use wuu_store::{Location, Store, StoreError};

/// Idle connections kept for reuse; more given back at once are closed.
pub const IDLE_CONNECTIONS: usize = 4;

/// Connections handed out at once before [`Connections::take`] waits for one to come
/// back. SQLite takes one writer at a time and the store work of a session is short, so
/// a few warm connections serve many busy sessions.
pub const MAX_OPEN: usize = 4;

/// How long [`Connections::take`] waits, when [`MAX_OPEN`] are out, without any
/// connection coming back before it opens one more (the holders are then stuck, not
/// busy). While connections keep coming back it keeps waiting for one.
pub const TAKE_WAIT: Duration = Duration::from_millis(200);

/// The pool of connections to the store (`<home>/wuu.db`, or the PostgreSQL database
/// the host was configured with).
pub struct Connections {
    pool: Arc<Pool>,
}

struct Pool {
    location: Location,
    state: Mutex<State>,
    /// Signalled when a connection comes back (or an open failed and its slot is free).
    back: Condvar,
}

struct State {
    idle: Vec<Store>,
    /// Connections handed out and not yet back.
    out: usize,
    /// Connections given back so far (waiters in [`Connections::take`] watch it for
    /// progress).
    returned: u64,
}

/// A connection from [`Connections::take`], for its holder's exclusive use. It derefs
/// to the [`Store`]; dropping it gives it back (or closes it when enough are idle).
pub struct PooledStore {
    store: Option<Store>,
    pool: Arc<Pool>,
}

impl std::ops::Deref for PooledStore {
    type Target = Store;
    fn deref(&self) -> &Store {
        self.store
            .as_ref()
            .expect("a pooled store holds its connection until dropped")
    }
}

impl std::ops::DerefMut for PooledStore {
    fn deref_mut(&mut self) -> &mut Store {
        self.store
            .as_mut()
            .expect("a pooled store holds its connection until dropped")
    }
}

impl Drop for PooledStore {
    fn drop(&mut self) {
        let Some(store) = self.store.take() else {
            return;
        };
        let mut st = self.pool.state.lock();
        st.out = st.out.saturating_sub(1);
        st.returned = st.returned.wrapping_add(1);
        let closed = if st.idle.len() < IDLE_CONNECTIONS {
            st.idle.push(store);
            None
        } else {
            Some(store)
        };
        drop(st);
        self.pool.back.notify_one();
        // Closing (WAL bookkeeping, freeing the page cache) happens outside the lock.
        drop(closed);
    }
}

impl Connections {
    /// An empty pool for the store at `location` (connections open on demand).
    pub fn new(location: Location) -> Connections {
        Connections {
            pool: Arc::new(Pool {
                location,
                state: Mutex::new(State {
                    idle: Vec::with_capacity(IDLE_CONNECTIONS),
                    out: 0,
                    returned: 0,
                }),
                back: Condvar::new(),
            }),
        }
    }

    /// A connection for the caller's exclusive use until the returned [`PooledStore`] is
    /// dropped: an idle one; else a newly opened one while fewer than [`MAX_OPEN`] are
    /// out; else one given back, waiting for it as long as connections keep coming back
    /// (a new one is opened once none came back for [`TAKE_WAIT`]).
    /// Errors: opening failed ([`Store::open_location`]: I/O, a newer schema, busy,
    /// an unreachable server …).
    pub fn take(&self) -> Result<PooledStore, StoreError> {
        let pool = &self.pool;
        let mut st = pool.state.lock();
        loop {
            if let Some(store) = st.idle.pop() {
                st.out += 1;
                return Ok(PooledStore {
                    store: Some(store),
                    pool: pool.clone(),
                });
            }
            if st.out < MAX_OPEN {
                break;
            }
            let seen = st.returned;
            let timed_out = pool
                .back
                .wait_until(&mut st, Instant::now() + TAKE_WAIT)
                .timed_out();
            if timed_out && st.returned == seen && st.idle.is_empty() {
                // No connection came back for a whole TAKE_WAIT: the holders are stuck
                // (a blocked client, a long request), not just busy.
                log::debug!(
                    "{} store connections held for {} ms: opening one more",
                    st.out,
                    TAKE_WAIT.as_millis()
                );
                break;
            }
        }
        // Counted before opening (outside the lock), so concurrent takers wait rather
        // than all open.
        st.out += 1;
        drop(st);
        match Store::open_location(&pool.location) {
            Ok(store) => Ok(PooledStore {
                store: Some(store),
                pool: pool.clone(),
            }),
            Err(e) => {
                let mut st = pool.state.lock();
                st.out = st.out.saturating_sub(1);
                drop(st);
                pool.back.notify_one();
                Err(e)
            }
        }
    }

    /// Number of idle connections (for tests and logs).
    pub fn idle(&self) -> usize {
        self.pool.state.lock().idle.len()
    }
}
