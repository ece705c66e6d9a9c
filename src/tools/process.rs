//! Commands and engine hosts die with their host.
//!
//! Three mechanisms (see also the launcher in `sandbox` and its `reap` module):
//!
//! 1. **The launcher ends them all.** Each command (and each external engine host) is
//!    started through the launcher, which ends every process it started when the command
//!    ends, whatever session or process group they made: through a PID namespace whose
//!    init it forks (confined commands), else as a child subreaper that kills its
//!    descendants. It asks the kernel for `SIGHUP` when the host thread that started it
//!    ends (`PR_SET_PDEATHSIG`), and then does the same at once: `setsid sleep 1000`
//!    dies with the host, even after `kill -9` of the host.
//! 2. **The ledger and the startup sweep.** Each command's process group (the
//!    launcher's pid) and a random token, which every process of the command carries in
//!    its environment as `WUU_COMMAND_TOKEN`, are recorded in the store when it starts
//!    ([`started`]) and forgotten when it has ended ([`ended`]). At startup ([`sweep`])
//!    every process carrying a token recorded by a dead owner on this host gets
//!    `SIGKILL`, in whatever group or session it is. This covers a launcher without a
//!    PID namespace killed together with the host. The token is the key, so a reused pid
//!    is never hit.
//! 3. **The host's own sweep by token** when it had to `SIGKILL` a command's launcher
//!    (its orphans, without a PID namespace, were not ended by it).
//!
//! A process that both leaves the launcher's reach (only possible without a PID
//! namespace, after the launcher was killed) and clears its environment escapes.
//!
//! Processes owned by a conversation rather than by one command (background jobs) fit
//! the same scheme: a launcher of their own, a token and a ledger row that live as long
//! as the conversation holds them.

use super::sandbox::SandboxSettings;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use wuu_store::{LeaseOwner, Location, ProcessGroupRow, Store};

/// The environment variable that marks a command's processes.
pub const TOKEN_VAR: &str = "WUU_COMMAND_TOKEN";

struct Ledger {
    store: Mutex<Option<Store>>,
}

static OWNER: LazyLock<LeaseOwner> = LazyLock::new(LeaseOwner::current);
static LEDGERS: LazyLock<Mutex<HashMap<PathBuf, Arc<Ledger>>>> = LazyLock::new(Default::default);
/// The store of each wuu home whose host keeps its conversations elsewhere than
/// `<home>/wuu.db` ([`use_store`]); the ledger lives with the conversations.
static LOCATIONS: LazyLock<Mutex<HashMap<PathBuf, Location>>> = LazyLock::new(Default::default);

/// Keeps the ledger of the host of `home` in the store at `location` (the host's
/// choice at start; `<home>/wuu.db` when never called).
pub fn use_store(home: &Path, location: &Location) {
    LOCATIONS
        .lock()
        .insert(home.to_path_buf(), location.clone());
}

fn ledger(home: &Path) -> Arc<Ledger> {
    LEDGERS
        .lock()
        .entry(home.to_path_buf())
        .or_insert_with(|| {
            Arc::new(Ledger {
                store: Mutex::new(None),
            })
        })
        .clone()
}

fn with_store(home: &Path, f: impl FnOnce(&mut Store) -> wuu_store::Result<()>) {
    let l = ledger(home);
    let mut guard = l.store.lock();
    if guard.is_none() {
        let location = LOCATIONS
            .lock()
            .get(home)
            .cloned()
            .unwrap_or_else(|| Location::home(home));
        match Store::open_location(&location) {
            Ok(s) => *guard = Some(s),
            Err(e) => {
                log::warn!("process ledger: cannot open the store: {e}");
                return;
            }
        }
    }
    if let Some(store) = guard.as_mut() {
        if let Err(e) = f(store) {
            log::warn!("process ledger: {e}");
        }
    }
}

/// Records that a command with process group `pgid` and `token` started (no-op when
/// `settings.process_ledger` is unset).
pub(crate) fn started(settings: &SandboxSettings, pgid: i32, token: &str) {
    let Some(home) = &settings.process_ledger else {
        return;
    };
    let row = ProcessGroupRow {
        pgid: pgid.into(),
        host: OWNER.host.clone(),
        owner_pid: std::process::id(),
        instance: OWNER.instance.clone(),
        token: token.to_string(),
        started_at_ms: crate::util::now_ms(),
    };
    with_store(home, |s| s.record_process_group(&row));
}

/// Forgets a command's process group (it ended and nothing of it is left).
pub(crate) fn ended(settings: &SandboxSettings, pgid: i32, token: &str) {
    let Some(home) = &settings.process_ledger else {
        return;
    };
    with_store(home, |s| {
        s.forget_process_group(&OWNER.host, pgid.into(), token)
    });
}

/// Pids of the processes whose environment holds `TOKEN_VAR=token`, whatever their
/// process group or session (a `setsid` child keeps its environment). Processes whose
/// environment cannot be read (another user's, a non-dumpable launcher) are not seen.
fn carriers(token: &str) -> Vec<i32> {
    let needle = format!("{TOKEN_VAR}={token}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
}

/// Sends `SIGKILL` to every process carrying `token` (twice: one may have been forking
/// during the first pass). Returns how many were signalled.
pub(crate) fn kill_carriers(token: &str) -> usize {
    let mut killed = 0;
    for _ in 0..2 {
        for pid in carriers(token) {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                    killed += 1;
                }
            }
        }
    }
    killed
}

/// Kills what dead owners left: every recorded process group on this host whose owner
/// is gone (see the module docs), then forgets the rows. Returns the number of
/// processes killed. Run once at startup, off the request path.
pub fn sweep(store: &mut Store) -> usize {
    let rows = match store.orphaned_process_groups(&OWNER.host) {
        Ok(r) => r,
        Err(e) => {
            log::warn!("process sweep: {e}");
            return 0;
        }
    };
    let mut killed = 0;
    for r in rows {
        killed += kill_carriers(&r.token);
        if let Err(e) = store.forget_process_group(&r.host, r.pgid, &r.token) {
            log::warn!("process sweep: {e}");
        }
    }
    if killed > 0 {
        log::info!("process sweep: killed {killed} process(es) left by a dead host");
    }
    killed
}
