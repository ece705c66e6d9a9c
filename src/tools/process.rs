//! Commands die with their host.
//!
//! Two mechanisms (see also the launcher in `sandbox`):
//!
//! 1. **Parent death.** The launcher that leads each command's process group asks the
//!    kernel for `SIGHUP` when the host thread that started it ends
//!    (`PR_SET_PDEATHSIG`; the `bash` tool's helper thread lives as long as the
//!    command), and then kills its whole group with `SIGKILL`: `sleep 1000 & wait` dies
//!    with the host at once, even after `kill -9` of the host.
//! 2. **The ledger and the startup sweep.** Each command's process group is recorded in
//!    the store when it starts ([`started`]) and forgotten when it has ended and its
//!    group was killed ([`ended`]). At startup ([`sweep`]) the groups recorded by a
//!    dead owner on this host are killed: every process whose process group is the
//!    recorded one *and* whose environment carries the command's random
//!    `WUU_COMMAND_TOKEN` gets `SIGKILL` (a reused group id is never hit). This covers
//!    a launcher killed together with the host.
//!
//! A process that left the group (`setsid`, a double-forking daemon) escapes both: it
//! keeps running after its command ended or the host died (the README says so).

use super::sandbox::SandboxSettings;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use wuu_store::{LeaseOwner, ProcessGroupRow, Store};

/// The environment variable that marks a command's processes.
pub const TOKEN_VAR: &str = "WUU_COMMAND_TOKEN";

struct Ledger {
    store: Mutex<Option<Store>>,
}

static OWNER: LazyLock<LeaseOwner> = LazyLock::new(LeaseOwner::current);
static LEDGERS: LazyLock<Mutex<HashMap<PathBuf, Arc<Ledger>>>> = LazyLock::new(Default::default);

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
        match Store::open_home(home) {
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

/// Pids in process group `pgid` whose environment holds `TOKEN_VAR=token`.
fn members(pgid: i64, token: &str) -> Vec<i32> {
    let needle = format!("{TOKEN_VAR}={token}");
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`
        let pgrp = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(2))
            .and_then(|f| f.parse::<i64>().ok());
        if pgrp != Some(pgid) {
            continue;
        }
        let Ok(env) = std::fs::read(e.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == needle.as_bytes()) {
            out.push(pid);
        }
    }
    out
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
        // Twice: a member may have been forking during the first pass.
        for _ in 0..2 {
            for pid in members(r.pgid, &r.token) {
                if let Some(p) = rustix::process::Pid::from_raw(pid) {
                    if rustix::process::kill_process(p, rustix::process::Signal::KILL).is_ok() {
                        killed += 1;
                    }
                }
            }
        }
        if let Err(e) = store.forget_process_group(&r.host, r.pgid, &r.token) {
            log::warn!("process sweep: {e}");
        }
    }
    if killed > 0 {
        log::info!("process sweep: killed {killed} process(es) left by a dead host");
    }
    killed
}
