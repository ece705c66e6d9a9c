//! Execution leases, the process registry and crash recovery, one body of logic for
//! both backends ([`crate::sql::Conn`]). A lease is a row with its owner (instance, host,
//! pid) and heartbeat; an owner whose heartbeat is older than the stale limit is dead
//! wherever it ran, so a host of a shared database takes over a dead host's leases.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};

use serde_json::json;

use crate::error::Result;
use crate::rows::{turn_status, LeaseOutcome, LeaseOwner, RecoveryReport, SettledTurn};
use crate::sql::{values, Dialect, Ops};
use crate::store::Tx;
use crate::util::{get, json_text, now_ms};

/// Error message stored on turns settled by recovery.
pub const INTERRUPTED_MESSAGE: &str = "interrupted: the process that ran this turn stopped";

/// Error stored on a tool call that recovery settled: it was running when its process
/// stopped, so whether it took effect is unknown.
pub const TOOL_OUTCOME_UNKNOWN: &str = "interrupted: the outcome is unknown";

/// Run statuses that mean "not finished".
const LIVE_RUN_STATUSES: &[&str] = &["accepted", "running"];

/// The stale limit new connections start with (see [`set_default_stale_ms`]).
static DEFAULT_STALE_MS: AtomicI64 = AtomicI64::new(crate::DEFAULT_LEASE_STALE_MS);

/// Sets the stale limit (ms, at least 1) every connection opened afterwards in this
/// process starts with ([`crate::Store::set_lease_stale_ms`] still changes one
/// connection). A host sets it once at start from its configuration, so its sessions,
/// its recovery and its takeover sweep judge owners alike.
pub fn set_default_stale_ms(stale_ms: i64) {
    DEFAULT_STALE_MS.store(stale_ms.max(1), Ordering::Relaxed);
}

/// The stale limit (ms) new connections start with: [`crate::DEFAULT_LEASE_STALE_MS`]
/// unless [`set_default_stale_ms`] changed it.
pub fn default_stale_ms() -> i64 {
    DEFAULT_STALE_MS.load(Ordering::Relaxed)
}

/// Whether process `pid` of this host is alive. Linux: `/proc/<pid>` exists and is not a
/// zombie. Where `/proc` is unavailable the answer is always `true` (liveness then rests
/// on heartbeats alone).
pub fn pid_alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    if !proc.join("self").exists() {
        return true;
    }
    let dir = proc.join(pid.to_string());
    match std::fs::read_to_string(dir.join("stat")) {
        // The state letter follows the last ')' (the command name may contain parens).
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z' | 'X')
        ),
        Err(_) => dir.exists(),
    }
}

/// This machine's host name, trimmed: `$WUU_HOST_NAME` when set (containers that share
/// a name, tests of hosts on "other machines"), else `/proc/sys/kernel/hostname`,
/// `/etc/hostname`, `$HOSTNAME`, else `localhost`. Pids are only checked between owners
/// of the same host name.
pub fn host_name() -> String {
    std::env::var("WUU_HOST_NAME")
        .ok()
        .into_iter()
        .chain(
            ["/proc/sys/kernel/hostname", "/etc/hostname"]
                .iter()
                .filter_map(|p| std::fs::read_to_string(p).ok()),
        )
        .chain(std::env::var("HOSTNAME").ok())
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

/// Whether `other` (seen alive at `heartbeat_ms`) is dead from `me`'s point of view:
/// a different instance whose heartbeat is older than `stale_ms`, or whose pid is not
/// alive on this host.
fn owner_dead(
    other: &LeaseOwner,
    heartbeat_ms: i64,
    me: &LeaseOwner,
    now: i64,
    stale_ms: i64,
) -> bool {
    if other.instance == me.instance {
        return false;
    }
    if now.saturating_sub(heartbeat_ms) > stale_ms {
        return true;
    }
    other.host == me.host && !pid_alive(other.pid)
}

/// A thread's running turns (?1 the thread, ?2 `in_progress`), read by its key.
pub(crate) const THREAD_TURNS_IN_PROGRESS: &str =
    "SELECT thread_id, id FROM turns WHERE thread_id = ?1 AND status = ?2 ORDER BY ordinal";

/// A thread's live runs (?1 the thread, ?2 and ?3 the live statuses), read by
/// `runs_by_thread`.
pub(crate) const THREAD_LIVE_RUNS: &str =
    "SELECT id, thread_id, owner_instance, updated_at_ms FROM runs \
     WHERE thread_id = ?1 AND status IN (?2, ?3) ORDER BY created_at_ms, rowid";

/// Key of the PostgreSQL advisory lock that lease changes and recovery hold for the
/// rest of their transaction, so hosts take and settle leases one at a time (SQLite's
/// `BEGIN IMMEDIATE` already serializes every writer).
const LEASE_LOCK_KEY: i64 = 0x7775_755f_6c65_6173;

impl Ops<'_> {
    /// On PostgreSQL, waits for the cluster-wide lease lock (held until commit).
    fn lock_leases(&self) -> Result<()> {
        if self.conn.dialect() == Dialect::Postgres {
            self.conn
                .exec("SELECT pg_advisory_xact_lock(?1)", &values![LEASE_LOCK_KEY])?;
        }
        Ok(())
    }

    /// Registers `me` as alive at `now`. A registration of the same pid and host whose
    /// heartbeat is at most `fresh_ms` old is left as it is (no write): taking a lease
    /// registers its owner, and a host taking many leases a second would otherwise
    /// rewrite its row with each.
    fn register_instance(&self, me: &LeaseOwner, now: i64, fresh_ms: i64) -> Result<()> {
        self.conn.exec(
            "INSERT INTO instances (instance, pid, host, started_at_ms, heartbeat_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT (instance) DO UPDATE SET \
             pid = excluded.pid, host = excluded.host, heartbeat_at_ms = excluded.heartbeat_at_ms \
             WHERE instances.pid <> excluded.pid OR instances.host <> excluded.host \
             OR instances.heartbeat_at_ms < excluded.heartbeat_at_ms - ?5",
            &values![&me.instance, me.pid, &me.host, now, fresh_ms],
        )?;
        Ok(())
    }

    /// Settles one turn as interrupted with `message` (unless it already has an error)
    /// and, in the same transaction, the items it left `in_progress`: a `tool_call`
    /// becomes `failed` with error [`TOOL_OUTCOME_UNKNOWN`] (its outcome is unknown),
    /// every other item `completed`. Both the `status` column and the body's `status`
    /// change (a body that is not valid JSON keeps its text; its column still changes).
    fn settle_turn(&self, thread_id: &str, turn_id: &str, now: i64, message: &str) -> Result<()> {
        let error = json_text(&json!({ "message": message }));
        self.conn.exec(
            "UPDATE turns SET status = ?3, error = coalesce(error, ?4), \
             completed_at_ms = coalesce(completed_at_ms, ?5) \
             WHERE thread_id = ?1 AND id = ?2",
            &values![thread_id, turn_id, turn_status::INTERRUPTED, error, now],
        )?;
        self.conn.exec(
            "UPDATE items SET \
               status = CASE WHEN item_type = 'tool_call' THEN 'failed' ELSE 'completed' END, \
               body = CASE WHEN NOT json_valid(body) THEN body \
                 WHEN item_type = 'tool_call' \
                   THEN json_insert(json_set(body, '$.status', 'failed'), '$.error', ?3) \
                 ELSE json_set(body, '$.status', 'completed') END \
             WHERE thread_id = ?1 AND turn_id = ?2 AND status = 'in_progress'",
            &values![thread_id, turn_id, TOOL_OUTCOME_UNKNOWN],
        )?;
        Ok(())
    }

    /// See [`crate::Store::settle_abandoned`].
    pub(crate) fn settle_abandoned(
        &self,
        thread_id: &str,
        me: &LeaseOwner,
        message: &str,
    ) -> Result<RecoveryReport> {
        let now = now_ms();
        let mut report = RecoveryReport::default();
        let mut turns = Vec::new();
        for row in self.conn.rows(
            "SELECT id FROM turns WHERE thread_id = ?1 AND status = ?2 ORDER BY ordinal",
            &values![thread_id, turn_status::IN_PROGRESS],
        )? {
            let turn_id: String = get(&row, 0, "turns", thread_id)?;
            turns.push(SettledTurn {
                thread_id: thread_id.to_string(),
                turn_id,
            });
        }
        for t in &turns {
            self.settle_turn(&t.thread_id, &t.turn_id, now, message)?;
        }
        report.interrupted_turns = turns;
        let mut runs = Vec::new();
        for row in self.conn.rows(
            "SELECT id FROM runs WHERE thread_id = ?1 AND owner_instance = ?2 \
             AND status IN (?3, ?4) ORDER BY created_at_ms, rowid",
            &values![
                thread_id,
                &me.instance,
                LIVE_RUN_STATUSES[0],
                LIVE_RUN_STATUSES[1]
            ],
        )? {
            runs.push(get::<String>(&row, 0, "runs", thread_id)?);
        }
        for id in &runs {
            self.settle_run(id, now)?;
        }
        report.interrupted_runs = runs;
        self.release_lease(thread_id, me)?;
        Ok(report)
    }

    fn settle_run(&self, id: &str, now: i64) -> Result<()> {
        self.conn.exec(
            "UPDATE runs SET status = 'interrupted', updated_at_ms = ?2, \
             body = CASE WHEN json_valid(body) AND json_type(body, '$.status') IS NOT NULL \
                    THEN json_set(body, '$.status', 'interrupted') ELSE body END \
             WHERE id = ?1",
            &values![id, now],
        )?;
        Ok(())
    }

    /// Settles orphaned work (restricted to `only_thread` when given): every
    /// `in_progress` turn of a thread for which `orphan_thread` holds, and every
    /// `accepted`/`running` run whose thread is orphaned and whose owner instance
    /// `run_owner_dead(owner_instance, run_updated_at_ms)` says is dead.
    fn settle_orphans(
        &self,
        orphan_thread: &dyn Fn(&str) -> bool,
        run_owner_dead: &dyn Fn(&str, i64) -> bool,
        only_thread: Option<&str>,
        now: i64,
        report: &mut RecoveryReport,
    ) -> Result<()> {
        // One query per case: a filter `(? IS NULL OR thread_id = ?)` cannot use the
        // thread's key and would read every running turn and run for each lease.
        let mut turns = Vec::new();
        let rows = match only_thread {
            Some(thread) => self.conn.rows(
                THREAD_TURNS_IN_PROGRESS,
                &values![thread, turn_status::IN_PROGRESS],
            )?,
            None => self.conn.rows(
                "SELECT thread_id, id FROM turns WHERE status = ?1 ORDER BY thread_id, ordinal",
                &values![turn_status::IN_PROGRESS],
            )?,
        };
        for row in rows {
            let thread_id: String = get(&row, 0, "turns", "?")?;
            let turn_id: String = get(&row, 1, "turns", &thread_id)?;
            if orphan_thread(&thread_id) {
                turns.push(SettledTurn { thread_id, turn_id });
            }
        }
        for t in &turns {
            self.settle_turn(&t.thread_id, &t.turn_id, now, INTERRUPTED_MESSAGE)?;
        }
        report.interrupted_turns.extend(turns);

        let mut runs = Vec::new();
        let rows = match only_thread {
            Some(thread) => self.conn.rows(
                THREAD_LIVE_RUNS,
                &values![thread, LIVE_RUN_STATUSES[0], LIVE_RUN_STATUSES[1]],
            )?,
            None => self.conn.rows(
                "SELECT id, thread_id, owner_instance, updated_at_ms FROM runs \
                 WHERE status IN (?1, ?2) ORDER BY created_at_ms, rowid",
                &values![LIVE_RUN_STATUSES[0], LIVE_RUN_STATUSES[1]],
            )?,
        };
        for row in rows {
            let id: String = get(&row, 0, "runs", "?")?;
            let thread_id: String = get(&row, 1, "runs", &id)?;
            let owner: String = get(&row, 2, "runs", &id)?;
            let updated: i64 = get(&row, 3, "runs", &id)?;
            if orphan_thread(&thread_id) && run_owner_dead(&owner, updated) {
                runs.push(id);
            }
        }
        for id in &runs {
            self.settle_run(id, now)?;
        }
        report.interrupted_runs.extend(runs);
        Ok(())
    }

    /// Liveness of run owners: `me` is alive; a registered instance is alive unless
    /// dead by [`owner_dead`]; an unregistered instance counts as dead once the run
    /// was not updated for `stale_ms`.
    fn instance_liveness(
        &self,
        me: &LeaseOwner,
        now: i64,
        stale_ms: i64,
    ) -> Result<HashMap<String, bool>> {
        let mut out = HashMap::new();
        for row in self.conn.rows(
            "SELECT instance, pid, host, heartbeat_at_ms FROM instances",
            &[],
        )? {
            let instance: String = get(&row, 0, "instances", "?")?;
            let owner = LeaseOwner {
                pid: get(&row, 1, "instances", &instance)?,
                host: get(&row, 2, "instances", &instance)?,
                instance: instance.clone(),
            };
            let heartbeat: i64 = get(&row, 3, "instances", &instance)?;
            out.insert(instance, !owner_dead(&owner, heartbeat, me, now, stale_ms));
        }
        out.insert(me.instance.clone(), true);
        Ok(out)
    }

    /// See [`crate::Store::acquire_lease`].
    pub(crate) fn acquire_lease(
        &self,
        thread_id: &str,
        owner: &LeaseOwner,
    ) -> Result<LeaseOutcome> {
        self.lock_leases()?;
        let now = now_ms();
        let stale_ms = self.lease_stale_ms;
        // A registration a small part of the stale limit old is as good as a new one.
        self.register_instance(owner, now, (stale_ms / 8).clamp(0, 1_000))?;
        let current = self.lease_of(thread_id)?;
        let previous = match current {
            Some((holder, _)) if holder.instance == owner.instance => {
                self.conn.exec(
                    "UPDATE leases SET heartbeat_at_ms = ?2 WHERE thread_id = ?1",
                    &values![thread_id, now],
                )?;
                return Ok(LeaseOutcome::AlreadyHeld);
            }
            Some((holder, heartbeat)) => {
                if !owner_dead(&holder, heartbeat, owner, now, stale_ms) {
                    return Ok(LeaseOutcome::Busy(holder));
                }
                log::info!(
                    "taking over lease of thread {thread_id} from dead owner pid {} instance {} host {}",
                    holder.pid,
                    holder.instance,
                    holder.host
                );
                Some(holder)
            }
            None => None,
        };
        self.conn.exec(
            "INSERT INTO leases \
             (thread_id, pid, instance, host, acquired_at_ms, heartbeat_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT (thread_id) DO UPDATE SET \
             pid = excluded.pid, instance = excluded.instance, host = excluded.host, \
             acquired_at_ms = excluded.acquired_at_ms, heartbeat_at_ms = excluded.heartbeat_at_ms",
            &values![thread_id, owner.pid, &owner.instance, &owner.host, now],
        )?;
        // Nobody live held the lease, so nothing of this thread can be running elsewhere
        // (except an unfinished run of a live process that has not started it yet).
        let liveness = self.instance_liveness(owner, now, stale_ms)?;
        let mut settled = RecoveryReport::default();
        if let Some(prev) = &previous {
            settled
                .removed_leases
                .push((thread_id.to_string(), prev.clone()));
        }
        self.settle_orphans(
            &|_| true,
            &|inst, updated| run_owner_dead(&liveness, inst, updated, now, stale_ms),
            Some(thread_id),
            now,
            &mut settled,
        )?;
        Ok(LeaseOutcome::Acquired { previous, settled })
    }

    /// See [`crate::Store::release_lease`].
    pub(crate) fn release_lease(&self, thread_id: &str, owner: &LeaseOwner) -> Result<()> {
        self.conn.exec(
            "DELETE FROM leases WHERE thread_id = ?1 AND instance = ?2",
            &values![thread_id, &owner.instance],
        )?;
        Ok(())
    }

    /// See [`crate::Store::heartbeat`].
    pub(crate) fn heartbeat(&self, owner: &LeaseOwner) -> Result<()> {
        let now = now_ms();
        self.register_instance(owner, now, 0)?;
        self.conn.exec(
            "UPDATE leases SET heartbeat_at_ms = ?2 WHERE instance = ?1",
            &values![&owner.instance, now],
        )?;
        Ok(())
    }

    /// See [`crate::Store::lease_of`].
    pub(crate) fn lease_of(&self, thread_id: &str) -> Result<Option<(LeaseOwner, i64)>> {
        let rows = self.conn.rows(
            "SELECT pid, instance, host, heartbeat_at_ms FROM leases WHERE thread_id = ?1",
            &values![thread_id],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let (t, k) = ("leases", thread_id);
        Ok(Some((
            LeaseOwner {
                pid: get(row, 0, t, k)?,
                instance: get(row, 1, t, k)?,
                host: get(row, 2, t, k)?,
            },
            get(row, 3, t, k)?,
        )))
    }

    /// See [`crate::Store::dead_leases`].
    pub(crate) fn dead_leases(&self, me: &LeaseOwner) -> Result<Vec<(String, LeaseOwner, i64)>> {
        let now = now_ms();
        let mut out = Vec::new();
        for row in self.conn.rows(
            "SELECT thread_id, pid, instance, host, heartbeat_at_ms FROM leases \
             WHERE instance <> ?1 ORDER BY thread_id",
            &values![&me.instance],
        )? {
            let (thread_id, owner, heartbeat) = lease_row(&row)?;
            if owner_dead(&owner, heartbeat, me, now, self.lease_stale_ms) {
                out.push((thread_id, owner, heartbeat));
            }
        }
        Ok(out)
    }

    /// See [`crate::Store::recover`].
    pub(crate) fn recover(
        &self,
        me: &LeaseOwner,
        stale_ms: i64,
        started_at_ms: i64,
    ) -> Result<RecoveryReport> {
        self.lock_leases()?;
        let now = now_ms();
        self.register_instance(me, now, 0)?;
        let mut report = RecoveryReport::default();

        // 1. Dead leases.
        let mut leases = Vec::new();
        for row in self.conn.rows(
            "SELECT thread_id, pid, instance, host, heartbeat_at_ms FROM leases \
             ORDER BY thread_id",
            &[],
        )? {
            leases.push(lease_row(&row)?);
        }
        let mut live_threads = HashSet::new();
        for (thread_id, owner, heartbeat) in leases {
            // An owner that heartbeat while this process ran died after it started: the
            // takeover sweep settles and announces its work as a survivor's.
            if heartbeat < started_at_ms && owner_dead(&owner, heartbeat, me, now, stale_ms) {
                self.conn.exec(
                    "DELETE FROM leases WHERE thread_id = ?1 AND instance = ?2",
                    &values![&thread_id, &owner.instance],
                )?;
                report.removed_leases.push((thread_id, owner));
            } else {
                live_threads.insert(thread_id);
            }
        }

        // 2. Orphaned turns and runs.
        let liveness = self.instance_liveness(me, now, stale_ms)?;
        self.settle_orphans(
            &|thread| !live_threads.contains(thread),
            &|inst, updated| run_owner_dead(&liveness, inst, updated, now, stale_ms),
            None,
            now,
            &mut report,
        )?;

        // 3. Forget dead processes.
        for (instance, alive) in &liveness {
            if !alive {
                self.conn.exec(
                    "DELETE FROM instances WHERE instance = ?1",
                    &values![instance],
                )?;
            }
        }
        if !report.is_empty() {
            log::info!(
                "recovery: {} turn(s) and {} run(s) interrupted, {} dead lease(s) removed",
                report.interrupted_turns.len(),
                report.interrupted_runs.len(),
                report.removed_leases.len()
            );
        }
        Ok(report)
    }
}

impl Tx<'_> {
    /// See [`crate::Store::settle_abandoned`].
    pub fn settle_abandoned(
        &self,
        thread_id: &str,
        me: &LeaseOwner,
        message: &str,
    ) -> Result<RecoveryReport> {
        self.ops().settle_abandoned(thread_id, me, message)
    }

    /// See [`crate::Store::acquire_lease`].
    pub fn acquire_lease(&self, thread_id: &str, owner: &LeaseOwner) -> Result<LeaseOutcome> {
        self.ops().acquire_lease(thread_id, owner)
    }

    /// See [`crate::Store::release_lease`].
    pub fn release_lease(&self, thread_id: &str, owner: &LeaseOwner) -> Result<()> {
        self.ops().release_lease(thread_id, owner)
    }

    /// See [`crate::Store::heartbeat`].
    pub fn heartbeat(&self, owner: &LeaseOwner) -> Result<()> {
        self.ops().heartbeat(owner)
    }

    /// See [`crate::Store::lease_of`].
    pub fn lease_of(&self, thread_id: &str) -> Result<Option<(LeaseOwner, i64)>> {
        self.ops().lease_of(thread_id)
    }

    /// See [`crate::Store::dead_leases`].
    pub fn dead_leases(&self, me: &LeaseOwner) -> Result<Vec<(String, LeaseOwner, i64)>> {
        self.ops().dead_leases(me)
    }

    /// See [`crate::Store::recover`].
    pub fn recover(
        &self,
        me: &LeaseOwner,
        stale_ms: i64,
        started_at_ms: i64,
    ) -> Result<RecoveryReport> {
        self.ops().recover(me, stale_ms, started_at_ms)
    }
}

fn run_owner_dead(
    liveness: &HashMap<String, bool>,
    instance: &str,
    updated_at_ms: i64,
    now: i64,
    stale_ms: i64,
) -> bool {
    match liveness.get(instance) {
        Some(alive) => !alive,
        None => now.saturating_sub(updated_at_ms) > stale_ms,
    }
}

/// Whether `holder`, whose last heartbeat was at `heartbeat_ms`, is dead for `me` with
/// stale limit `stale_ms` (the judgment [`crate::Store::acquire_lease`] makes).
pub fn holder_dead(holder: &LeaseOwner, heartbeat_ms: i64, me: &LeaseOwner, stale_ms: i64) -> bool {
    owner_dead(holder, heartbeat_ms, me, now_ms(), stale_ms)
}

/// One `leases` row as `SELECT thread_id, pid, instance, host, heartbeat_at_ms` reads it:
/// the thread, its owner and the owner's last heartbeat (Unix ms). Errors: a damaged cell.
fn lease_row(row: &crate::sql::ValueRow) -> Result<(String, LeaseOwner, i64)> {
    let thread_id: String = get(row, 0, "leases", "?")?;
    let owner = LeaseOwner {
        pid: get(row, 1, "leases", &thread_id)?,
        instance: get(row, 2, "leases", &thread_id)?,
        host: get(row, 3, "leases", &thread_id)?,
    };
    let heartbeat: i64 = get(row, 4, "leases", &thread_id)?;
    Ok((thread_id, owner, heartbeat))
}
