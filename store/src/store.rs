//! [`Store`]: one connection to the wuu database (the SQLite file `wuu.db`, or with the
//! `postgres` feature a PostgreSQL database, see [`crate::Location`]), and [`Tx`], the
//! same row methods inside one transaction.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rusqlite::Connection;

use crate::error::{Result, StoreError};
use crate::rows::*;
use crate::schema;

/// Why a build without the `postgres` feature refuses a PostgreSQL location.
pub const NO_POSTGRES: &str =
    "this wuu was built without PostgreSQL support (build it with `--features postgres`)";

/// File name of the database inside the wuu home.
pub const DB_FILE: &str = "wuu.db";

/// Default busy timeout: how long a write waits for another connection's write lock.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Default age (ms) after which a lease/instance heartbeat counts as stale, making its
/// owner dead for [`Store::acquire_lease`]. Owners should heartbeat well within it.
pub const DEFAULT_LEASE_STALE_MS: i64 = 30_000;

/// One connection to the wuu database.
///
/// Each OS thread that touches the store owns its own `Store` (it is `Send`, not `Sync`);
/// several processes may open the same file. Reads take `&self` and run in one deferred
/// (snapshot) transaction; writes take `&mut self` and run in one IMMEDIATE transaction
/// each, waiting up to the busy timeout for the write lock ([`StoreError::Busy`] after
/// that). Use [`Store::transaction`] to make several changes atomic.
///
/// Opened on a PostgreSQL [`Location`] (feature `postgres`), the same methods run on
/// [`crate::pg::PgStore`]: every call is one READ COMMITTED transaction, a write is
/// acknowledged only once committed, and each commit is announced to other hosts
/// ([`Store::listen`], [`Store::changes`]).
#[derive(Debug)]
pub struct Store {
    pub(crate) backend: Backend,
    pub(crate) lease_stale_ms: i64,
}

/// The database behind a [`Store`].
#[derive(Debug)]
pub(crate) enum Backend {
    Sqlite(Lite),
    #[cfg(feature = "postgres")]
    Postgres(std::cell::RefCell<crate::pg::PgStore>),
}

/// A [`Store`] on an SQLite file.
#[derive(Debug)]
pub(crate) struct Lite {
    pub(crate) conn: Connection,
    path: PathBuf,
    /// This process's write gate of the file and its writer connection (see
    /// [`write_gate`]).
    gate: Gate,
    /// The connection's busy timeout, also the longest wait at the gate and SQLite's
    /// lock together.
    busy_timeout: Duration,
}

/// The writer of a database file in this process: the connection every
/// [`Store::transaction`] of the process runs on, opened on first use.
#[derive(Debug, Default)]
struct Writer {
    conn: Option<Connection>,
    /// The busy timeout set on `conn`.
    busy: Duration,
}

type Gate = Arc<parking_lot::Mutex<Writer>>;

/// The in-process write gate of a database file: [`Store::transaction`] holds it from
/// `BEGIN IMMEDIATE` to the commit, so the connections of one process take turns on
/// the write lock in a queue (parking_lot's eventually fair mutex: a handoff measured
/// in microseconds) instead of polling it through SQLite's busy handler, which sleeps
/// 1, 2, 5, … up to 100 ms between tries. With 200 conversations writing at once the
/// busy handler left the CPUs idle and started their turns one by one (33,000 sleeps
/// in the scale bench's stream row). Other processes still meet the SQLite lock and
/// its busy timeout as before.
///
/// The gate also owns the process's one writer connection ([`Writer`]): all write
/// transactions of the process run on it. SQLite discards a connection's page cache
/// whenever another connection has written since its last transaction, so with every
/// `Store` writing on its own connection each write started cold, reading its pages
/// again (most of a turn's SQLite time with many concurrent turns). The writer
/// only ever sees its own changes, so its cache stays warm; the `Store`'s own
/// connection serves its reads.
///
/// Keyed by the path as given to [`Store::open`]; two spellings of one file get two
/// gates, which costs only the queueing. The map holds the gates weakly: the writer is
/// closed when the last `Store` of the path is dropped.
fn write_gate(path: &Path) -> Gate {
    static GATES: std::sync::OnceLock<
        parking_lot::Mutex<HashMap<PathBuf, std::sync::Weak<parking_lot::Mutex<Writer>>>>,
    > = std::sync::OnceLock::new();
    let mut gates = GATES.get_or_init(Default::default).lock();
    if let Some(gate) = gates.get(path).and_then(std::sync::Weak::upgrade) {
        return gate;
    }
    gates.retain(|_, g| g.strong_count() > 0);
    let gate = Gate::default();
    gates.insert(path.to_path_buf(), Arc::downgrade(&gate));
    gate
}

/// The row methods of [`Store`] bound to one open IMMEDIATE transaction (see
/// [`Store::transaction`]). Every method behaves as its `Store` namesake, except that
/// nothing is committed until the closure returns `Ok`.
pub struct Tx<'c> {
    /// The connection the shared row logic runs on.
    conn: &'c dyn crate::sql::Conn,
    /// The same connection when it is SQLite's (its hot paths read in place); `None` on
    /// PostgreSQL.
    pub(crate) lite: Option<&'c Connection>,
    pub(crate) lease_stale_ms: i64,
}

impl<'c> Tx<'c> {
    fn sqlite(conn: &'c Connection, lease_stale_ms: i64) -> Tx<'c> {
        Tx {
            conn,
            lite: Some(conn),
            lease_stale_ms,
        }
    }

    /// The SQLite connection, for code that runs on SQLite only (its callers send
    /// PostgreSQL to [`Tx::ops`] first).
    pub(crate) fn lite_conn(&self) -> Result<&'c Connection> {
        self.lite
            .ok_or_else(|| StoreError::Invalid("an SQLite-only path ran on PostgreSQL".into()))
    }

    /// The backend-neutral row logic on this transaction's connection.
    pub(crate) fn ops(&self) -> crate::sql::Ops<'_> {
        crate::sql::Ops {
            conn: self.conn,
            lease_stale_ms: self.lease_stale_ms,
        }
    }
}

#[cfg(feature = "postgres")]
impl<'c> Tx<'c> {
    /// A transaction over the shared row logic of a PostgreSQL connection.
    pub(crate) fn over(ops: &crate::sql::Ops<'c>) -> Tx<'c> {
        Tx {
            conn: ops.conn,
            lite: None,
            lease_stale_ms: ops.lease_stale_ms,
        }
    }
}

impl std::fmt::Debug for Tx<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

/// A transaction opened by [`Store::transaction`] / [`Store::read`]: rolled back when
/// dropped uncommitted (an `Err` from the closure, a failed commit, a panic).
///
/// `BEGIN` and `COMMIT` run as cached prepared statements. rusqlite's `Transaction`
/// runs them through `execute_batch`, which compiles them again every time, a visible
/// part of the session threads' CPU when many turns start.
struct Open<'c> {
    conn: &'c Connection,
    committed: bool,
}

impl<'c> Open<'c> {
    fn begin(conn: &'c Connection, begin: &str) -> Result<Open<'c>> {
        conn.prepare_cached(begin)?.execute([])?;
        Ok(Open {
            conn,
            committed: false,
        })
    }

    fn commit(mut self) -> Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for Open<'_> {
    fn drop(&mut self) {
        if !self.committed && !self.conn.is_autocommit() {
            if let Err(e) = self.conn.execute_batch("ROLLBACK") {
                log::warn!("store: rollback failed: {e}");
            }
        }
    }
}

impl Lite {
    /// See [`Store::transaction`].
    fn transaction<T>(
        &mut self,
        lease_stale_ms: i64,
        f: impl FnOnce(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let started = std::time::Instant::now();
        let Some(mut writer) = self.gate.try_lock_for(self.busy_timeout) else {
            return Err(StoreError::Busy(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
                Some(format!(
                    "another writer of this process held the write lock for {} s",
                    self.busy_timeout.as_secs()
                )),
            )));
        };
        let waited = started.elapsed();
        // Time spent at the gate is taken off SQLite's busy timeout (whole ms, so an
        // uncontended gate leaves the setting alone).
        let busy = if waited >= Duration::from_millis(1) {
            self.busy_timeout.saturating_sub(waited)
        } else {
            self.busy_timeout
        };
        let writer = &mut *writer;
        let conn = match &mut writer.conn {
            Some(conn) => conn,
            slot @ None => {
                let conn = slot.insert(Store::connect(&self.path)?);
                writer.busy = DEFAULT_BUSY_TIMEOUT;
                conn
            }
        };
        if writer.busy != busy {
            conn.busy_timeout(busy)?;
            writer.busy = busy;
        }
        let tx = Open::begin(conn, "BEGIN IMMEDIATE")?;
        let value = f(&Tx::sqlite(conn, lease_stale_ms))?;
        tx.commit()?;
        Ok(value)
    }
}

/// Prepared statements a connection keeps (see [`Store::open`]): enough for every
/// statement of a turn and a listing, ~2–4 KiB each.
const STATEMENT_CACHE: usize = 64;

impl Store {
    /// Opens (creating it and its parent directories if needed) the database at `path`,
    /// sets WAL mode, `busy_timeout` = 10 s, `foreign_keys = ON`, `synchronous = NORMAL`,
    /// and migrates the schema to the current version.
    ///
    /// Errors: [`StoreError::Io`] when the directory cannot be created,
    /// [`StoreError::SchemaTooNew`] when a newer wuu wrote the file, SQLite errors
    /// otherwise (not a database, permissions, [`StoreError::Busy`] …).
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Self::connect(path)?;
        Ok(Store {
            backend: Backend::Sqlite(Lite {
                conn,
                path: path.to_path_buf(),
                gate: write_gate(path),
                busy_timeout: DEFAULT_BUSY_TIMEOUT,
            }),
            lease_stale_ms: crate::lease::default_stale_ms(),
        })
    }

    /// The SQLite side of this store; `None` on PostgreSQL.
    pub(crate) fn lite(&self) -> Option<&Lite> {
        match &self.backend {
            Backend::Sqlite(l) => Some(l),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    /// One configured connection to `path` (see [`Store::open`]), schema migrated.
    fn connect(path: &Path) -> Result<Connection> {
        let mut conn = Connection::open(path)?;
        conn.busy_timeout(DEFAULT_BUSY_TIMEOUT)?;
        // rusqlite keeps 16 prepared statements by default; one turn alone runs more
        // distinct ones, so with 16 they pushed each other out and were compiled again
        // on every turn.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        // The query planner stability guarantee: plans never depend on bound values.
        // This build of SQLite has STAT4, which otherwise marks every statement that
        // compares a parameter with a non-unique index prefix (`inputs WHERE thread_id =
        // ?1`, the history and lease queries) to be compiled again each time a value is
        // bound, i.e. on every call of a cached statement, a large part of the SQLite time
        // of a turn. wuu never runs ANALYZE, so there are no statistics whose plans
        // this could cost.
        conn.set_db_config(
            rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
            true,
        )?;
        // Switching a fresh file to WAL and migrating it can meet another connection
        // doing the same (SQLite then answers "locked" at once, without waiting on the
        // busy handler): retry with a short backoff for up to the busy timeout.
        let deadline = std::time::Instant::now() + DEFAULT_BUSY_TIMEOUT;
        let mut wait = Duration::from_millis(2);
        loop {
            match Self::init_connection(&mut conn, path) {
                Ok(()) => break,
                Err(e) if e.is_busy() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(wait);
                    wait = (wait * 2).min(Duration::from_millis(100));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(conn)
    }

    fn init_connection(conn: &mut Connection, path: &Path) -> Result<()> {
        let mode: String =
            conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            log::warn!("{}: journal_mode is {mode}, not WAL", path.display());
        }
        conn.pragma_update(None, "foreign_keys", true)?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        schema::migrate(conn)
    }

    /// Opens `home/wuu.db` (see [`Store::open`]). `home` is the wuu home
    /// (`$WUU_HOME`, default `~/.wuu`); resolving it is the caller's job.
    pub fn open_home(home: &Path) -> Result<Store> {
        Store::open(&home.join(DB_FILE))
    }

    /// A cheap check of the database file at `path` without SQLite (no lock, no WAL
    /// recovery, no schema parse: a few microseconds), for a caller that must report an
    /// unusable store before a real [`Store::open`] has finished: the file opens for
    /// reading and writing, and when it holds a header, the header starts with SQLite's
    /// magic (`SQLite format 3\0`) and its schema version (`user_version`, big-endian at
    /// byte 60) is not newer than this build migrates to. A missing or empty file passes
    /// (it becomes a new database). Passing says nothing more: [`Store::open`] may still
    /// fail (locks, I/O errors, damage past the header; a version committed only to the
    /// WAL is not in the header).
    ///
    /// Errors: [`StoreError::Io`] when the file exists but cannot be opened or read;
    /// [`StoreError::Sqlite`] with `SQLITE_NOTADB` ("file is not a database") for a wrong
    /// magic; [`StoreError::SchemaTooNew`].
    pub fn check_file(path: &Path) -> Result<()> {
        use std::io::Read;
        let io = |source| StoreError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        let mut header = [0u8; 100];
        let mut len = 0;
        while len < header.len() {
            match file.read(&mut header[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        const MAGIC: &[u8; 16] = b"SQLite format 3\0";
        if len >= MAGIC.len() && &header[..MAGIC.len()] != MAGIC {
            return Err(StoreError::Sqlite(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_NOTADB),
                Some("file is not a database".into()),
            )));
        }
        if len == header.len() {
            let found = i64::from(i32::from_be_bytes([
                header[60], header[61], header[62], header[63],
            ]));
            let supported = schema::latest_version();
            if found > supported {
                return Err(StoreError::SchemaTooNew { found, supported });
            }
        }
        Ok(())
    }

    /// Path of the database file, as given to [`Store::open`]; empty on PostgreSQL.
    pub fn path(&self) -> &Path {
        match &self.backend {
            Backend::Sqlite(l) => &l.path,
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Path::new(""),
        }
    }

    /// Schema version of the open database (`PRAGMA user_version`; on PostgreSQL
    /// `wuu_schema.version`).
    pub fn schema_version(&self) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(l) => Ok(l.conn.query_row("PRAGMA user_version", [], |r| r.get(0))?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => pg.borrow().schema_version(),
        }
    }

    /// `PRAGMA data_version`: changes whenever another connection (of this or another
    /// process) commits to the database. Every write transaction of this process runs on
    /// the process's writer connection ([`write_gate`]), so this `Store`'s own writes
    /// change it too.
    /// Cheap (no disk read): used to validate caches.
    ///
    /// On PostgreSQL: a process-wide count of the commits this process made and of the
    /// other hosts' commits a [`Store::changes`] call has seen, so it changes within the
    /// polling interval of the process's listener.
    pub fn data_version(&self) -> Result<i64> {
        match &self.backend {
            Backend::Sqlite(l) => Ok(l.conn.query_row("PRAGMA data_version", [], |r| r.get(0))?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Ok(crate::pg::change_count()),
        }
    }

    /// Changes how long this connection waits for another connection's lock before
    /// failing with [`StoreError::Busy`] (default 10 s). No effect on PostgreSQL.
    pub fn set_busy_timeout(&mut self, timeout: Duration) -> Result<()> {
        match &mut self.backend {
            Backend::Sqlite(l) => {
                l.conn.busy_timeout(timeout)?;
                l.busy_timeout = timeout;
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => {}
        }
        Ok(())
    }

    /// Changes the heartbeat age (ms) after which [`Store::acquire_lease`] treats another
    /// owner as dead (default [`DEFAULT_LEASE_STALE_MS`]).
    pub fn set_lease_stale_ms(&mut self, stale_ms: i64) {
        self.lease_stale_ms = stale_ms;
        #[cfg(feature = "postgres")]
        if let Backend::Postgres(pg) = &mut self.backend {
            pg.get_mut().set_lease_stale_ms(stale_ms);
        }
    }

    /// Runs `f` inside one IMMEDIATE transaction (the write lock is taken up front, so
    /// `f` never fails half-way with a busy upgrade). Commits when `f` returns `Ok`,
    /// rolls back on `Err` or panic. Use it when several changes must land together,
    /// e.g. an input entering history and its recovery record being cleared.
    ///
    /// Within this process, writers queue at the file's write gate first (see
    /// [`write_gate`]). The busy timeout bounds the whole wait, gate and SQLite's lock
    /// together: time spent at the gate is taken off SQLite's busy timeout for this
    /// transaction, and a writer still at the gate when the timeout is over gets
    /// [`StoreError::Busy`] (the writer ahead of it is itself stuck on a lock held
    /// elsewhere).
    ///
    /// Errors: whatever `f` returns; [`StoreError::Busy`] when the write lock is not
    /// obtained within the busy timeout (at the gate or at SQLite's lock); SQLite
    /// errors from commit.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        self.write(Some(""), f)
    }

    /// [`Store::transaction`], announcing `notify` (a conversation id, `""` for any
    /// change, `None` for none) to other hosts with a PostgreSQL commit.
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) fn write<T>(
        &mut self,
        notify: Option<&str>,
        f: impl FnOnce(&Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        let lease_stale_ms = self.lease_stale_ms;
        match &mut self.backend {
            Backend::Sqlite(lite) => lite.transaction(lease_stale_ms, f),
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let value = pg.get_mut().transaction(notify, |ops| f(&Tx::over(ops)))?;
                if notify.is_some() {
                    crate::pg::note_change();
                }
                Ok(value)
            }
        }
    }

    /// Runs read-only `f` in one deferred transaction (a consistent snapshot).
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite(l) => {
                let tx = Open::begin(&l.conn, "BEGIN")?;
                let value = f(&Tx::sqlite(&l.conn, self.lease_stale_ms))?;
                tx.commit()?;
                Ok(value)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(pg) => {
                let mut pg = pg.try_borrow_mut().map_err(|_| {
                    StoreError::Invalid("a read inside a read of the same store".into())
                })?;
                pg.transaction(None, |ops| f(&Tx::over(ops)))
            }
        }
    }

    /// A read made of one statement. On SQLite it runs in autocommit mode, where the
    /// statement is its own read transaction: the same one snapshot [`Store::read`]
    /// gives, without executing `BEGIN` and `COMMIT` around it. On PostgreSQL, as
    /// [`Store::read`].
    pub(crate) fn read_one<T>(&self, f: impl FnOnce(&Tx<'_>) -> Result<T>) -> Result<T> {
        match &self.backend {
            Backend::Sqlite(l) => f(&Tx::sqlite(&l.conn, self.lease_stale_ms)),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => self.read(f),
        }
    }

    // ----- threads -------------------------------------------------------------------

    /// Inserts a new thread row. Errors: a constraint error ([`StoreError::Sqlite`]) when
    /// the id already exists.
    pub fn insert_thread(&mut self, t: &ThreadRow) -> Result<()> {
        self.write(Some(&t.id), |tx| tx.insert_thread(t))
    }

    /// Whether a thread with this id exists (a primary-key lookup; the row is not
    /// decoded, so a damaged row exists too).
    pub fn thread_exists(&self, id: &str) -> Result<bool> {
        let Some(lite) = self.lite() else {
            return self.read(|tx| tx.ops().thread_exists(id));
        };
        Ok(crate::util::query_row(
            &lite.conn,
            "SELECT EXISTS (SELECT 1 FROM threads WHERE id = ?1)",
            [id],
            |r| r.get(0),
        )?)
    }

    /// Reads a thread. `Ok(None)` when it does not exist; [`StoreError::Corrupt`] when its
    /// row cannot be decoded.
    pub fn get_thread(&self, id: &str) -> Result<Option<ThreadRow>> {
        self.read_one(|tx| tx.get_thread(id))
    }

    /// Overwrites the thread's columns from `t`: cwd, preview, selection (provider,
    /// model, variant, effort, permission_mode), engine_id, forked_from_*,
    /// updated_at_ms and extra. It deliberately does **not** write `title`/
    /// `title_revision` (use [`Store::set_title`]), `archived`/`archive_reason` (use
    /// [`Store::set_archived`]) or `created_at_ms`, so a stale snapshot cannot undo them.
    /// Errors: [`StoreError::NotFound`] when the thread does not exist.
    pub fn update_thread(&mut self, t: &ThreadRow) -> Result<()> {
        self.write(Some(&t.id), |tx| tx.update_thread(t))
    }

    /// Records activity: `updated_at_ms = max(updated_at_ms, updated_at_ms_arg)` (never
    /// moves backwards). Errors: [`StoreError::NotFound`] when the thread does not exist.
    pub fn touch_thread(&mut self, id: &str, updated_at_ms: i64) -> Result<()> {
        self.write(Some(id), |tx| tx.touch_thread(id, updated_at_ms))
    }

    /// Stores `title` (`None` clears it) with `revision`, but only if `revision >=` the
    /// stored `title_revision`; a lower revision changes nothing. Does not touch
    /// `updated_at_ms`. Returns the row after the call, so the caller sees the winning
    /// title; `Ok(None)` when the thread does not exist.
    pub fn set_title(
        &mut self,
        id: &str,
        title: Option<&str>,
        revision: u64,
    ) -> Result<Option<ThreadRow>> {
        self.write(Some(id), |tx| tx.set_title(id, title, revision))
    }

    /// Sets the archived flag; `reason` is stored when archiving and cleared when
    /// unarchiving. Returns the row after the call; `Ok(None)` when it does not exist.
    pub fn set_archived(
        &mut self,
        id: &str,
        archived: bool,
        reason: Option<&str>,
    ) -> Result<Option<ThreadRow>> {
        self.write(Some(id), |tx| tx.set_archived(id, archived, reason))
    }

    /// Permanently deletes a thread with its turns, items, usage, inputs, runs, continue
    /// sources and lease, in one transaction that first re-checks that the thread exists
    /// and, with `only_if_archived`, that it is still archived (a thread unarchived before
    /// the transaction began is kept: [`DeleteOutcome::NotArchived`]). Whether the thread
    /// is running is the caller's check.
    pub fn delete_thread(&mut self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome> {
        self.write(Some(id), |tx| tx.delete_thread(id, only_if_archived))
    }

    /// Threads matching `filter`, newest activity first (`updated_at_ms` desc, then id).
    /// A damaged row (corrupt JSON, wrong type, NULL) is skipped with a `log::warn!` and
    /// never hides the others; the limit counts returned rows.
    pub fn list_threads(&self, filter: &ThreadFilter) -> Result<Vec<ThreadRow>> {
        self.read(|tx| tx.list_threads(filter))
    }

    /// Visits the threads of [`Store::list_threads`] (same filter, order, limit and
    /// skipping of damaged rows) as borrowed [`ThreadView`]s, without copying their
    /// text: for listings that serialize each row at once. A row whose columns are all
    /// sound is viewed in place; any other row goes through the same decoding as
    /// [`Store::list_threads`] (a damaged `extra` reads as `{}` with `damage` set; a
    /// wrong type or NULL skips the row with a warning). Returns how many rows were
    /// visited. Errors: SQLite errors, and the first error `visit` returns (which ends
    /// the visit).
    pub fn visit_threads(
        &self,
        filter: &ThreadFilter,
        visit: impl FnMut(&ThreadView<'_>) -> Result<()>,
    ) -> Result<usize> {
        self.read(|tx| tx.visit_threads(filter, visit))
    }

    /// The most recently active unarchived thread whose cwd equals `cwd` (damaged rows
    /// skipped); `Ok(None)` when there is none.
    pub fn latest_thread(&self, cwd: &str) -> Result<Option<ThreadRow>> {
        self.read(|tx| tx.latest_thread(cwd))
    }

    /// Case-insensitive (Unicode lower-case) substring search, at most one hit per
    /// thread, newest activity first, at most `limit` hits.
    ///
    /// A thread matches on its title, else its preview, else the `text` of its
    /// `user_message`/`agent_message` items (the newest matching item wins). Archived
    /// threads are included. The snippet is ≤ [`crate::SNIPPET_CHARS`] (160) characters
    /// around the hit. An empty (or blank) query returns the newest unarchived threads
    /// with their title/preview as snippet. Damaged rows are skipped with a warning.
    ///
    /// Cost: the messages of the 32 newest conversations are read directly; past them,
    /// only the conversations the trigram text index (`item_text`, schema version 7)
    /// names as candidates and those with messages the index does not hold yet (see
    /// [`Store::index_text`]), so a query that matches little costs its matches and the
    /// backlog, not the history. Queries under 3 characters, or with a control
    /// character or a cased letter outside ASCII, read every conversation's messages
    /// (same answers, slower).
    pub fn search_threads(&self, query: &str, limit: u32) -> Result<Vec<SearchHit>> {
        self.read(|tx| tx.search_threads(query, limit))
    }

    /// Adds up to `max_rows` items past the text index's watermark to the index (the
    /// user and agent messages among them) and moves the watermark past them, in one
    /// transaction; returns how many items it moved past (0: the index is complete).
    ///
    /// A message stored by a turn does not enter the index in the turn's transaction
    /// (each transaction that writes the index writes a new segment, several pages):
    /// [`Store::search_threads`] reads the messages past the watermark directly, and the
    /// host calls this off the turn (its heartbeat thread) to write them in batches.
    /// On PostgreSQL, which has no such index, it does nothing and returns 0.
    pub fn index_text(&mut self, max_rows: usize) -> Result<usize> {
        if self.lite().is_none() {
            return Ok(0);
        }
        self.write(None, |tx| tx.index_text(max_rows))
    }

    // ----- turns and items -----------------------------------------------------------

    /// Appends a turn to its thread; turn order is insertion order (a per-thread
    /// `ordinal`). Errors: [`StoreError::NotFound`] when the thread does not exist; a
    /// constraint error when the turn id already exists in the thread.
    pub fn insert_turn(&mut self, t: &TurnRow) -> Result<()> {
        self.write(Some(&t.thread_id), |tx| tx.insert_turn(t))
    }

    /// Overwrites every column of the turn `(t.thread_id, t.id)` (its position is kept).
    /// Errors: [`StoreError::NotFound`] when it does not exist.
    pub fn update_turn(&mut self, t: &TurnRow) -> Result<()> {
        self.write(Some(&t.thread_id), |tx| tx.update_turn(t))
    }

    /// Reads one turn; `Ok(None)` when it does not exist.
    pub fn get_turn(&self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>> {
        self.read(|tx| tx.get_turn(thread_id, turn_id))
    }

    /// Inserts or replaces the item `(item.thread_id, item.id)` and returns its `seq`. A
    /// new item gets the next thread-wide sequence number (1, 2, …; numbers of deleted
    /// items are never reused); an update keeps its seq (and may move it to another turn).
    /// `item.seq` is ignored. Errors: [`StoreError::NotFound`] when the turn (or thread)
    /// does not exist.
    pub fn upsert_item(&mut self, item: &ItemRow) -> Result<u64> {
        self.write(Some(&item.thread_id), |tx| tx.upsert_item(item))
    }

    /// Deletes an item; deleting a missing item is not an error.
    pub fn delete_item(&mut self, thread_id: &str, item_id: &str) -> Result<()> {
        self.write(Some(thread_id), |tx| tx.delete_item(thread_id, item_id))
    }

    /// Reads one item; `Ok(None)` when it does not exist.
    pub fn get_item(&self, thread_id: &str, item_id: &str) -> Result<Option<ItemRow>> {
        self.read(|tx| tx.get_item(thread_id, item_id))
    }

    /// All turns of the thread in insertion order, each with its items in `seq` order
    /// (empty for an unknown thread). Unlike listings, history is all-or-nothing: a
    /// damaged turn or item fails the call with [`StoreError::Corrupt`] rather than
    /// silently dropping context.
    pub fn load_history(&self, thread_id: &str) -> Result<Vec<TurnWithItems>> {
        self.read(|tx| tx.load_history(thread_id))
    }

    /// Appends the history of `src` to `dst` (both must exist), in one transaction.
    ///
    /// Copies every turn up to and including `cut_turn` (all turns when `None`) and,
    /// inside that last turn, its items up to and including `cut_item` (all when `None`).
    /// With `cut_item` but no `cut_turn`, the cut turn is the one holding the item. Turn
    /// and item ids are kept (they only need to be unique per thread); items get fresh
    /// `seq`s in `dst`, in the same order; copied `in_progress` turns become
    /// `interrupted` (with `completed_at_ms` set to now if absent).
    /// Errors: [`StoreError::NotFound`] for a missing thread, cut turn or cut item; a
    /// constraint error when `dst` already has one of the ids.
    pub fn copy_history(
        &mut self,
        src: &str,
        dst: &str,
        cut_turn: Option<&str>,
        cut_item: Option<&str>,
    ) -> Result<()> {
        self.write(Some(dst), |tx| {
            tx.copy_history(src, dst, cut_turn, cut_item)
        })
    }

    // ----- usage -----------------------------------------------------------------------

    /// Appends a usage record. Errors: a foreign-key error when the thread does not exist.
    pub fn insert_usage(&mut self, u: &UsageRow) -> Result<()> {
        self.write(Some(&u.thread_id), |tx| tx.insert_usage(u))
    }

    /// Usage records of one thread (or of all threads with `None`), oldest first.
    pub fn list_usage(&self, thread_id: Option<&str>) -> Result<Vec<UsageRow>> {
        self.read(|tx| tx.list_usage(thread_id))
    }

    // ----- pending inputs --------------------------------------------------------------

    /// Inserts or updates the input `(i.thread_id, i.id)`: mode, state, body and
    /// updated_at_ms are overwritten, `created_at_ms` (and thus the queue position) of an
    /// existing input is kept. Errors: [`StoreError::Invalid`] for a mode other than
    /// `queue`/`steer` or a state other than `pending`/`held`/`consumed`/`cancelled`; a
    /// foreign-key error when the thread does not exist.
    pub fn upsert_input(&mut self, i: &InputRow) -> Result<()> {
        self.write(Some(&i.thread_id), |tx| tx.upsert_input(i))
    }

    /// Reads one input (in any state); `Ok(None)` when the id was never seen.
    pub fn get_input(&self, thread_id: &str, id: &str) -> Result<Option<InputRow>> {
        self.read_one(|tx| tx.get_input(thread_id, id))
    }

    /// The thread's inputs whose state is in `states` (all states when empty), in
    /// creation order (`created_at_ms`, then insertion).
    pub fn list_inputs(&self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
        self.read_one(|tx| tx.list_inputs(thread_id, states))
    }

    // ----- runs ------------------------------------------------------------------------

    /// Inserts or updates a run by id: status, owner_instance, body and updated_at_ms
    /// are overwritten; thread_id and created_at_ms of an existing run are kept.
    /// Errors: a foreign-key error when the thread does not exist.
    pub fn upsert_run(&mut self, r: &RunRow) -> Result<()> {
        self.write(Some(&r.thread_id), |tx| tx.upsert_run(r))
    }

    /// Reads a run; `Ok(None)` when it does not exist.
    pub fn get_run(&self, id: &str) -> Result<Option<RunRow>> {
        self.read(|tx| tx.get_run(id))
    }

    /// Runs of a thread, oldest first.
    pub fn list_runs(&self, thread_id: &str) -> Result<Vec<RunRow>> {
        self.read(|tx| tx.list_runs(thread_id))
    }

    // ----- continue sources ------------------------------------------------------------

    /// Claims `source_turn_id` as the source of an explicit continue of the thread.
    /// Returns `true` the first time, `false` forever after (across restarts and
    /// processes). Errors: a foreign-key error when the thread does not exist.
    pub fn claim_continue_source(&mut self, thread_id: &str, source_turn_id: &str) -> Result<bool> {
        self.write(Some(thread_id), |tx| {
            tx.claim_continue_source(thread_id, source_turn_id)
        })
    }

    // ----- leases and recovery ---------------------------------------------------------

    /// Tries to take the execution lease of a thread for `owner` (also registering
    /// `owner` as a live process).
    ///
    /// - free → [`LeaseOutcome::Acquired`] with `previous: None`;
    /// - held by `owner`'s instance → [`LeaseOutcome::AlreadyHeld`] (heartbeat bumped);
    /// - held by a dead owner (different instance whose heartbeat is older than the stale
    ///   limit, or whose pid is not alive on this host) → taken over:
    ///   [`LeaseOutcome::Acquired`] with `previous: Some(dead owner)`;
    /// - held by a live other owner → [`LeaseOutcome::Busy`] with that owner.
    ///
    /// On `Acquired`, in the same transaction, the thread's `in_progress` turns and its
    /// unfinished runs whose owner is not alive are settled as interrupted (nobody live
    /// can be running them); they are listed in `settled`.
    pub fn acquire_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<LeaseOutcome> {
        self.write(Some(thread_id), |tx| tx.acquire_lease(thread_id, owner))
    }

    /// Releases the lease if `owner`'s instance holds it; otherwise does nothing.
    pub fn release_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<()> {
        self.write(Some(thread_id), |tx| tx.release_lease(thread_id, owner))
    }

    /// Sets `heartbeat_at_ms = now` on every lease of `owner`'s instance and registers
    /// the instance as alive. Call it periodically (well within the stale limit) and
    /// once at startup, before creating runs.
    pub fn heartbeat(&mut self, owner: &LeaseOwner) -> Result<()> {
        self.write(None, |tx| tx.heartbeat(owner))
    }

    /// The leases whose holder is dead for `me` (heartbeat older than the stale limit, or
    /// a pid gone on this host), as `(thread_id, holder, last heartbeat in Unix ms)`,
    /// ordered by thread id. Read-only: taking one over is [`Store::acquire_lease`].
    pub fn dead_leases(&self, me: &LeaseOwner) -> Result<Vec<(String, LeaseOwner, i64)>> {
        self.read(|tx| tx.dead_leases(me))
    }

    /// Whether `holder`, last seen alive at `heartbeat_ms` (Unix ms), is dead for `me`
    /// under this connection's stale limit (as [`Store::acquire_lease`] judges).
    pub fn holder_dead(&self, holder: &LeaseOwner, heartbeat_ms: i64, me: &LeaseOwner) -> bool {
        crate::lease::holder_dead(holder, heartbeat_ms, me, self.lease_stale_ms)
    }

    /// The stale limit (ms) of this connection.
    pub fn lease_stale_ms(&self) -> i64 {
        self.lease_stale_ms
    }

    /// The holder of a thread's lease and its last heartbeat (Unix ms), if any.
    pub fn lease_of(&self, thread_id: &str) -> Result<Option<(LeaseOwner, i64)>> {
        self.read_one(|tx| tx.lease_of(thread_id))
    }

    /// Settles what this process left running in one conversation whose session failed
    /// (a panic), in one transaction: its `in_progress` turns become `interrupted` with
    /// `message` (their in-progress items settled as [`Store::recover`] does), its
    /// `accepted`/`running` runs owned by `me` become `interrupted`, and `me`'s lease is
    /// released.
    pub fn settle_abandoned(
        &mut self,
        thread_id: &str,
        me: &LeaseOwner,
        message: &str,
    ) -> Result<RecoveryReport> {
        self.write(Some(thread_id), |tx| {
            tx.settle_abandoned(thread_id, me, message)
        })
    }

    /// Crash recovery, in one transaction. Run it at startup (and whenever useful).
    ///
    /// 1. Deletes every lease whose owner is dead: a different instance than `me` whose
    ///    heartbeat is older than `stale_ms` or whose pid is not alive on this host, and
    ///    whose last heartbeat came before `started_at_ms` (Unix ms, when this process
    ///    started). An owner that heartbeat after it died while this process ran: its
    ///    lease, turns and runs are left to the takeover ([`Store::acquire_lease`]),
    ///    which a running host does as a survivor (`i64::MAX`: every dead owner).
    /// 2. Settles every `in_progress` turn of a thread without a live lease as
    ///    `interrupted` (error `{"message": "interrupted: the process that ran this turn
    ///    stopped"}` unless it already had one; `completed_at_ms` = now if absent).
    /// 3. Settles every `accepted`/`running` run of a thread without a live lease whose
    ///    owner instance is not alive (`me` is alive; an unregistered instance is dead
    ///    once the run is `stale_ms` old) as `interrupted` (also `body.status` when the
    ///    body has one).
    /// 4. Forgets dead instances.
    ///
    /// Work of live other processes and of `me` is never touched. In the transaction that
    /// settles a turn, its items left `in_progress` are settled too: a `tool_call` becomes
    /// `failed` with error [`crate::TOOL_OUTCOME_UNKNOWN`], any other item `completed`
    /// (column and body). Lease takeovers ([`Store::acquire_lease`]) do the same.
    pub fn recover(
        &mut self,
        me: &LeaseOwner,
        stale_ms: i64,
        started_at_ms: i64,
    ) -> Result<RecoveryReport> {
        self.transaction(|tx| tx.recover(me, stale_ms, started_at_ms))
    }
}
