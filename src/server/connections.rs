//! Store connections shared by the session threads (issue 15).
//!
//! A session thread needs a connection only while it works on a message (a request, a
//! turn, a title). Before, every live session kept its own connection for as long as it
//! lived, idle or not: ~35–40 KiB of SQLite state (schema, lookaside, statements) plus
//! its cached pages (~100 KiB after a turn), times every live conversation. Now a
//! session takes a connection from here when a message needs one ([`Connections::take`])
//! and gives it back when the message is done ([`Connections::give_back`]), so idle
//! sessions hold none and only busy ones (each with its own, exclusively) do.
//!
//! Nothing about durability or ordering changes: a connection is used by one thread at a
//! time, every store call still commits (IMMEDIATE transaction, `synchronous=NORMAL`,
//! WAL) before the session acknowledges, and the session thread still serializes the
//! conversation's mutations. Connections carry no per-conversation state between calls
//! (the store's methods open and end their transactions inside the call).

use parking_lot::Mutex;
use std::path::PathBuf;
use wuu_store::{Store, StoreError};

/// Idle connections kept for reuse; more given back at once are closed. Busy sessions
/// each hold one; this only bounds the ones waiting for the next message.
pub const IDLE_CONNECTIONS: usize = 4;

/// The pool of idle connections to `<home>/wuu.db`.
pub struct Connections {
    home: PathBuf,
    idle: Mutex<Vec<Store>>,
}

impl Connections {
    /// An empty pool for the store of the wuu home `home` (connections open on demand).
    pub fn new(home: PathBuf) -> Connections {
        Connections {
            home,
            idle: Mutex::new(Vec::with_capacity(IDLE_CONNECTIONS)),
        }
    }

    /// A connection for the caller's exclusive use until it is given back (or dropped):
    /// an idle one, else a newly opened one. Errors: opening failed
    /// ([`Store::open_home`]: I/O, a newer schema, busy …).
    pub fn take(&self) -> Result<Store, StoreError> {
        if let Some(store) = self.idle.lock().pop() {
            return Ok(store);
        }
        Store::open_home(&self.home)
    }

    /// Gives a connection back for reuse (it keeps its page cache and prepared
    /// statements, which the next session reuses). Beyond [`IDLE_CONNECTIONS`] idle ones
    /// it is closed.
    pub fn give_back(&self, store: Store) {
        let mut idle = self.idle.lock();
        if idle.len() < IDLE_CONNECTIONS {
            idle.push(store);
        } else {
            drop(idle);
            drop(store);
        }
    }

    /// Number of idle connections (for tests and logs).
    pub fn idle(&self) -> usize {
        self.idle.lock().len()
    }
}
