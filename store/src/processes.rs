//! The process ledger: the process group of every running command, so that a later
//! start can kill what a dead owner left behind (migration 5).

use crate::error::Result;
use crate::lease::pid_alive;
use crate::sql::{values, Ops};
use crate::store::{Store, Tx};
use crate::util::get;

/// One running command's process group, recorded when it starts and forgotten when it
/// ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessGroupRow {
    /// The process group id (the launcher's pid).
    pub pgid: i64,
    /// Host name of the owner (pids mean something only there).
    pub host: String,
    /// The owner's (host process's) pid.
    pub owner_pid: u32,
    /// The owner's store instance id.
    pub instance: String,
    /// A random token in the command's environment (`WUU_COMMAND_TOKEN`): only
    /// processes that carry it are killed by a sweep, never a reused group id.
    pub token: String,
    /// When the command started (Unix ms).
    pub started_at_ms: i64,
}

impl Ops<'_> {
    /// See [`Store::record_process_group`].
    pub(crate) fn record_process_group(&self, r: &ProcessGroupRow) -> Result<()> {
        self.conn.exec(
            "INSERT INTO process_groups \
             (pgid, host, owner_pid, instance, token, started_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (host, pgid) DO UPDATE SET \
             owner_pid = excluded.owner_pid, instance = excluded.instance, \
             token = excluded.token, started_at_ms = excluded.started_at_ms",
            &values![
                r.pgid,
                &r.host,
                r.owner_pid,
                &r.instance,
                &r.token,
                r.started_at_ms
            ],
        )?;
        Ok(())
    }

    /// See [`Store::forget_process_group`].
    pub(crate) fn forget_process_group(&self, host: &str, pgid: i64, token: &str) -> Result<()> {
        self.conn.exec(
            "DELETE FROM process_groups WHERE host = ?1 AND pgid = ?2 AND token = ?3",
            &values![host, pgid, token],
        )?;
        Ok(())
    }

    /// See [`Store::orphaned_process_groups`].
    pub(crate) fn orphaned_process_groups(&self, host: &str) -> Result<Vec<ProcessGroupRow>> {
        let rows = self.conn.rows(
            "SELECT pgid, host, owner_pid, instance, token, started_at_ms \
             FROM process_groups WHERE host = ?1 ORDER BY started_at_ms",
            &values![host],
        )?;
        let mut out = Vec::new();
        for row in &rows {
            let pgid: i64 = get(row, 0, "process_groups", "?")?;
            let key = pgid.to_string();
            let r = ProcessGroupRow {
                pgid,
                host: get(row, 1, "process_groups", &key)?,
                owner_pid: get(row, 2, "process_groups", &key)?,
                instance: get(row, 3, "process_groups", &key)?,
                token: get(row, 4, "process_groups", &key)?,
                started_at_ms: get(row, 5, "process_groups", &key)?,
            };
            if !pid_alive(r.owner_pid) {
                out.push(r);
            }
        }
        Ok(out)
    }
}

impl Tx<'_> {
    /// See [`Store::record_process_group`].
    pub fn record_process_group(&self, r: &ProcessGroupRow) -> Result<()> {
        self.ops().record_process_group(r)
    }

    /// See [`Store::forget_process_group`].
    pub fn forget_process_group(&self, host: &str, pgid: i64, token: &str) -> Result<()> {
        self.ops().forget_process_group(host, pgid, token)
    }

    /// See [`Store::orphaned_process_groups`].
    pub fn orphaned_process_groups(&self, host: &str) -> Result<Vec<ProcessGroupRow>> {
        self.ops().orphaned_process_groups(host)
    }
}

impl Store {
    /// Records a command's process group (replacing a row with the same host and pgid).
    pub fn record_process_group(&mut self, r: &ProcessGroupRow) -> Result<()> {
        self.transaction(|tx| tx.record_process_group(r))
    }

    /// Forgets a process group (its command ended and the group was killed).
    pub fn forget_process_group(&mut self, host: &str, pgid: i64, token: &str) -> Result<()> {
        self.transaction(|tx| tx.forget_process_group(host, pgid, token))
    }

    /// The recorded process groups on `host` whose owner process is dead (not running,
    /// or a zombie). A reused owner pid counts as alive (nothing is killed in doubt).
    pub fn orphaned_process_groups(&self, host: &str) -> Result<Vec<ProcessGroupRow>> {
        self.read(|tx| tx.orphaned_process_groups(host))
    }
}
