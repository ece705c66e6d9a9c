//! The shared `codex app-server` host (spec `engines.md` §1.4): one child per binary
//! path, started with the handshake on first use and shared (weakly, by reference
//! count) by every conversation bound to Codex; a dead host is replaced on next use.

use super::env::child_env;
use super::rpc::Peer;
use super::ChildSettings;
use super::INIT_TIMEOUT;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, Weak};

/// A running, initialized `codex app-server`.
pub struct Host {
    /// The peer.
    pub peer: Arc<Peer>,
    /// Identity of this host process (a new host has a new one).
    pub generation: u64,
}

fn hosts() -> &'static Mutex<HashMap<PathBuf, Weak<Host>>> {
    static HOSTS: OnceLock<Mutex<HashMap<PathBuf, Weak<Host>>>> = OnceLock::new();
    HOSTS.get_or_init(|| Mutex::new(HashMap::new()))
}

fn next_generation() -> u64 {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
}

/// Starts `codex app-server` in `cwd` and completes the handshake.
pub fn start(binary: &Path, cwd: &Path, settings: &ChildSettings) -> Result<Host, String> {
    let peer = Peer::spawn(
        binary,
        &["app-server".into()],
        cwd,
        &child_env(binary, settings),
        settings.ledger.as_deref(),
    )?;
    let init = json!({
        "clientInfo": {"name": "wuu", "title": "Wuu Desktop", "version": "1"},
        "capabilities": {"experimentalApi": true},
    });
    match peer.request("initialize", init, INIT_TIMEOUT) {
        Ok(_) => {}
        Err(e) => {
            let tail = peer.stderr_tail();
            return Err(if tail.is_empty() {
                format!("codex app-server handshake failed: {e}")
            } else {
                format!("codex app-server handshake failed: {e} ({tail})")
            });
        }
    }
    Ok(Host {
        peer,
        generation: next_generation(),
    })
}

/// The shared host of `binary` (started on first use, with `settings`).
pub fn shared_host(
    binary: &Path,
    root: &Path,
    settings: &ChildSettings,
) -> Result<Arc<Host>, String> {
    let mut map = hosts().lock();
    if let Some(h) = map.get(binary).and_then(Weak::upgrade) {
        if !h.peer.is_dead() {
            return Ok(h);
        }
    }
    let host = Arc::new(start(binary, root, settings)?);
    map.insert(binary.to_path_buf(), Arc::downgrade(&host));
    Ok(host)
}
