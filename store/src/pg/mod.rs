//! The PostgreSQL backend (feature `postgres`): conversations in one database shared by
//! several hosts. [`PgStore`] is one libpq connection (blocking, no async runtime), the
//! counterpart of [`crate::Store`]; its row methods are the store's shared logic
//! ([`crate::sql::Ops`]), so leases, takeovers and recovery behave as on SQLite, across
//! machines: a lease is a row with its owner (instance, host, pid) and heartbeat, lease
//! changes serialize on a cluster-wide advisory lock, and an owner whose heartbeat is
//! older than the stale limit is dead wherever it ran. Changes are announced on the
//! [`CHANNEL`] notification channel (`LISTEN`/`NOTIFY`) so other hosts can refresh
//! their views. See README "Several hosts, one database".

mod ffi;
mod history;
mod ledgers;
mod organization;
mod schema;
mod side;
mod threads;
mod usage;

use std::cell::Cell;
use std::ffi::CString;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::error::{Result, StoreError};
use crate::rows::{
    DeleteOutcome, InputRow, ItemRow, LeaseOutcome, LeaseOwner, RecoveryReport, RunRow,
    ThreadFilter, ThreadRow, TurnRow,
};
use crate::sql::{dollar_placeholders, Conn, Dialect, Ops, Value, ValueRow};

/// The notification channel a [`PgStore`] announces committed changes on; the payload
/// is the id of the thread that changed (`""` when not one thread).
pub const CHANNEL: &str = "wuu_changes";

/// How long [`PgStore`] keeps trying to reconnect a broken connection before a call
/// fails with [`StoreError::Unavailable`].
pub const RECONNECT_WINDOW: Duration = Duration::from_secs(5);

pub use crate::location::{is_postgres_url, redact_url};

/// Commits this process made and changes its listeners saw (see
/// [`crate::Store::data_version`]).
static CHANGES: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

/// The process-wide change count ([`crate::Store::data_version`] on PostgreSQL).
pub(crate) fn change_count() -> i64 {
    CHANGES.load(std::sync::atomic::Ordering::SeqCst)
}

/// Counts one change (a commit of this process, or other hosts' changes seen).
pub(crate) fn note_change() {
    CHANGES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
}

/// One libpq connection speaking the shared SQL ([`Conn`]).
struct PgConn {
    raw: ffi::RawConn,
    /// The URL without its password, for messages.
    shown: String,
    /// Set when a statement found the connection broken; the next transaction
    /// reconnects first.
    broken: Cell<bool>,
}

/// PostgreSQL type OIDs the row decoding distinguishes.
mod oid {
    pub const BOOL: u32 = 16;
    pub const INT8: u32 = 20;
    pub const INT2: u32 = 21;
    pub const INT4: u32 = 23;
    pub const OID: u32 = 26;
    pub const FLOAT4: u32 = 700;
    pub const FLOAT8: u32 = 701;
    pub const NUMERIC: u32 = 1700;
}

impl PgConn {
    fn connect(url: &str) -> Result<PgConn> {
        let shown = redact_url(url);
        let raw = ffi::RawConn::connect(url)
            .map_err(|e| StoreError::Unavailable(format!("{shown}: {}", scrub(&e, url))))?;
        Ok(PgConn {
            raw,
            shown,
            broken: Cell::new(false),
        })
    }

    /// The error of a failed statement: [`StoreError::Unavailable`] when the connection
    /// is gone (SQLSTATE class 08 or none at all), else [`StoreError::Postgres`].
    fn failure(&self, code: String, message: String) -> StoreError {
        if !self.raw.is_ok() || code.is_empty() || code.starts_with("08") {
            self.broken.set(true);
            return StoreError::Unavailable(format!("{}: {message}", self.shown));
        }
        StoreError::Postgres { code, message }
    }

    fn run(&self, sql: &str, params: &[Value]) -> Result<ffi::PgResult> {
        let mut texts = Vec::with_capacity(params.len());
        let mut types = Vec::with_capacity(params.len());
        for p in params {
            let (text, ty) = match p {
                Value::Null => (None, 0),
                Value::Int(i) => (Some(i.to_string()), oid::INT8),
                Value::Real(f) => (Some(f.to_string()), oid::FLOAT8),
                Value::Text(s) => (Some(s.clone()), 0),
                Value::Blob(_) => {
                    return Err(StoreError::Invalid(
                        "binary values are not stored on PostgreSQL".into(),
                    ))
                }
            };
            let text = text
                .map(CString::new)
                .transpose()
                .map_err(|_| StoreError::Invalid("text contains a NUL character".into()))?;
            texts.push(text);
            types.push(ty);
        }
        let res = self
            .raw
            .exec(&dollar_placeholders(sql), &texts, &types)
            .map_err(|e| self.failure(String::new(), e))?;
        match res.status() {
            ffi::Status::Failed => Err(self.failure(res.sqlstate(), res.error_message())),
            _ => Ok(res),
        }
    }

    fn script(&self, sql: &str) -> Result<()> {
        let res = self
            .raw
            .exec_script(sql)
            .map_err(|e| self.failure(String::new(), e))?;
        match res.status() {
            ffi::Status::Failed => Err(self.failure(res.sqlstate(), res.error_message())),
            _ => Ok(()),
        }
    }
}

/// Removes `url`'s password from a libpq message, should libpq ever quote it.
fn scrub(message: &str, url: &str) -> String {
    let password = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split(['/', '?']).next())
        .and_then(|auth| auth.rsplit_once('@'))
        .and_then(|(user, _)| user.split_once(':'))
        .map(|(_, pw)| pw)
        .filter(|pw| !pw.is_empty());
    match password {
        Some(pw) => message.replace(pw, "***"),
        None => message.to_string(),
    }
}

fn decode(ty: u32, text: String) -> Value {
    match ty {
        oid::BOOL => Value::Int(i64::from(text == "t")),
        oid::INT8 | oid::INT2 | oid::INT4 | oid::OID => {
            text.parse().map_or(Value::Text(text), Value::Int)
        }
        oid::NUMERIC => match text.parse::<i64>() {
            Ok(i) => Value::Int(i),
            Err(_) => text.parse().map_or(Value::Text(text), Value::Real),
        },
        oid::FLOAT4 | oid::FLOAT8 => text.parse().map_or(Value::Text(text), Value::Real),
        _ => Value::Text(text),
    }
}

impl Conn for PgConn {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn exec(&self, sql: &str, params: &[Value]) -> Result<usize> {
        Ok(self.run(sql, params)?.changed())
    }

    fn rows(&self, sql: &str, params: &[Value]) -> Result<Vec<ValueRow>> {
        let res = self.run(sql, params)?;
        let width = res.columns();
        let names: Rc<[String]> = (0..width).map(|c| res.column_name(c)).collect();
        let types: Vec<u32> = (0..width).map(|c| res.column_type(c)).collect();
        Ok((0..res.rows())
            .map(|r| ValueRow {
                names: names.clone(),
                cells: (0..width)
                    .map(|c| match res.value(r, c) {
                        None => Value::Null,
                        Some(text) => decode(types[c], text),
                    })
                    .collect(),
            })
            .collect())
    }
}

/// One connection to a PostgreSQL wuu database.
///
/// Like [`crate::Store`], each OS thread that touches the store owns its own
/// `PgStore`; any number of processes on any number of hosts may open the same
/// database. Every call runs in one transaction (READ COMMITTED; lease changes and
/// recovery also hold the cluster-wide lease lock). A broken connection is reopened
/// with backoff at the start of the next call for up to [`RECONNECT_WINDOW`]; a call
/// that meets a broken connection fails with [`StoreError::Unavailable`] and is never
/// retried behind the caller's back (its write was not acknowledged).
pub struct PgStore {
    conn: PgConn,
    lease_stale_ms: i64,
    in_tx: bool,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("url", &self.conn.shown)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to `url` (`postgresql://user@host:port/db`; the password from
    /// `PGPASSWORD` or `~/.pgpass` as libpq resolves them) and migrates the schema to
    /// the current version under the migration lock.
    ///
    /// Errors: [`StoreError::Unavailable`] when the server cannot be reached or refuses
    /// the login; [`StoreError::SchemaTooNew`] when a newer wuu migrated the database;
    /// [`StoreError::Postgres`] from the migrations.
    pub fn open(url: &str) -> Result<PgStore> {
        let conn = PgConn::connect(url)?;
        let store = PgStore {
            conn,
            lease_stale_ms: crate::lease::default_stale_ms(),
            in_tx: false,
        };
        store.migrate()?;
        Ok(store)
    }

    /// The URL of the database without its password.
    pub fn url(&self) -> &str {
        &self.conn.shown
    }

    fn migrate(&self) -> Result<()> {
        let c = &self.conn;
        c.exec(
            "SELECT pg_advisory_lock(?1)",
            &[Value::Int(schema::MIGRATION_LOCK_KEY)],
        )?;
        let result = self.migrate_locked();
        let unlock = c.exec(
            "SELECT pg_advisory_unlock(?1)",
            &[Value::Int(schema::MIGRATION_LOCK_KEY)],
        );
        result.and(unlock.map(|_| ()))
    }

    fn migrate_locked(&self) -> Result<()> {
        let c = &self.conn;
        c.script(
            "CREATE TABLE IF NOT EXISTS wuu_schema (version BIGINT NOT NULL); \
             INSERT INTO wuu_schema (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM wuu_schema);",
        )?;
        let supported = schema::MIGRATIONS.len() as i64;
        let found = self.schema_version()?;
        if found > supported {
            return Err(StoreError::SchemaTooNew { found, supported });
        }
        for (index, sql) in schema::MIGRATIONS.iter().enumerate() {
            let target = index as i64 + 1;
            if target <= found {
                continue;
            }
            c.script("BEGIN")?;
            let step = c
                .script(sql)
                .and_then(|()| c.exec("UPDATE wuu_schema SET version = ?1", &[Value::Int(target)]))
                .and_then(|_| c.script("COMMIT"));
            if let Err(e) = step {
                let _ = c.script("ROLLBACK");
                return Err(e);
            }
            log::info!("store schema migrated to version {target} ({})", c.shown);
        }
        Ok(())
    }

    /// Schema version of the database (`wuu_schema.version`).
    pub fn schema_version(&self) -> Result<i64> {
        let rows = self.conn.rows("SELECT version FROM wuu_schema", &[])?;
        rows.first()
            .map(|r| crate::util::get(r, 0, "wuu_schema", "version"))
            .unwrap_or(Ok(0))
    }

    /// Changes the heartbeat age (ms) after which a lease owner counts as dead (default
    /// [`crate::DEFAULT_LEASE_STALE_MS`]). Hosts sharing a database should agree on it.
    pub fn set_lease_stale_ms(&mut self, stale_ms: i64) {
        self.lease_stale_ms = stale_ms;
    }

    /// Reopens a broken connection, with backoff (50 ms doubling to 1 s) for up to
    /// [`RECONNECT_WINDOW`].
    fn reconnect(&mut self) -> Result<()> {
        if self.conn.raw.is_ok() && !self.conn.broken.get() {
            return Ok(());
        }
        let deadline = Instant::now() + RECONNECT_WINDOW;
        let mut wait = Duration::from_millis(50);
        loop {
            if self.conn.raw.reset() {
                self.conn.broken.set(false);
                self.in_tx = false;
                log::info!("store: reconnected to {}", self.conn.shown);
                return Ok(());
            }
            if Instant::now() + wait > deadline {
                return Err(StoreError::Unavailable(format!(
                    "{}: {}",
                    self.conn.shown,
                    self.conn.raw.error_message()
                )));
            }
            std::thread::sleep(wait);
            wait = (wait * 2).min(Duration::from_secs(1));
        }
    }

    /// Runs `f` in one transaction: commits when it returns `Ok` (and only then is the
    /// write acknowledged), rolls back otherwise. `notify`: the thread id to announce on
    /// [`CHANNEL`] with the commit, if any.
    pub(crate) fn transaction<T>(
        &mut self,
        notify: Option<&str>,
        f: impl FnOnce(&Ops<'_>) -> Result<T>,
    ) -> Result<T> {
        self.reconnect()?;
        if self.in_tx {
            // A previous call panicked inside its transaction.
            self.conn.script("ROLLBACK")?;
        }
        self.conn.script("BEGIN")?;
        self.in_tx = true;
        let ops = Ops {
            conn: &self.conn,
            lease_stale_ms: self.lease_stale_ms,
        };
        let value = f(&ops).and_then(|v| {
            if let Some(thread_id) = notify {
                self.conn.exec(
                    "SELECT pg_notify(?1, ?2)",
                    &[Value::from(CHANNEL), Value::from(thread_id)],
                )?;
            }
            Ok(v)
        });
        let end = match &value {
            Ok(_) => self.conn.script("COMMIT"),
            Err(_) => self.conn.script("ROLLBACK"),
        };
        self.in_tx = false;
        let value = value?;
        end?;
        Ok(value)
    }

    /// See [`crate::Store::insert_thread`].
    pub fn insert_thread(&mut self, t: &ThreadRow) -> Result<()> {
        self.transaction(Some(&t.id), |ops| ops.insert_thread(t))
    }

    /// See [`crate::Store::get_thread`].
    pub fn get_thread(&mut self, id: &str) -> Result<Option<ThreadRow>> {
        self.transaction(None, |ops| ops.get_thread(id))
    }

    /// See [`crate::Store::delete_thread`].
    pub fn delete_thread(&mut self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome> {
        self.transaction(Some(id), |ops| ops.delete_thread(id, only_if_archived))
    }

    /// See [`crate::Store::insert_turn`].
    pub fn insert_turn(&mut self, t: &TurnRow) -> Result<()> {
        self.transaction(Some(&t.thread_id), |ops| ops.insert_turn(t))
    }

    /// See [`crate::Store::update_turn`].
    pub fn update_turn(&mut self, t: &TurnRow) -> Result<()> {
        self.transaction(Some(&t.thread_id), |ops| ops.update_turn(t))
    }

    /// See [`crate::Store::upsert_item`].
    pub fn upsert_item(&mut self, item: &ItemRow) -> Result<u64> {
        self.transaction(Some(&item.thread_id), |ops| ops.upsert_item(item))
    }

    /// See [`crate::Store::upsert_input`]: an input is acknowledged only once this
    /// returned `Ok` (committed).
    pub fn upsert_input(&mut self, i: &InputRow) -> Result<()> {
        self.transaction(Some(&i.thread_id), |ops| ops.upsert_input(i))
    }

    /// See [`crate::Store::list_inputs`].
    pub fn list_inputs(&mut self, thread_id: &str, states: &[&str]) -> Result<Vec<InputRow>> {
        self.transaction(None, |ops| ops.list_inputs(thread_id, states))
    }

    /// See [`crate::Store::touch_thread`].
    pub fn touch_thread(&mut self, id: &str, updated_at_ms: i64) -> Result<()> {
        self.transaction(Some(id), |ops| ops.touch_thread(id, updated_at_ms))
    }

    /// See [`crate::Store::list_threads`].
    pub fn list_threads(&mut self, filter: &ThreadFilter) -> Result<Vec<ThreadRow>> {
        self.transaction(None, |ops| ops.list_threads(filter))
    }

    /// Runs `f` with the shared row methods in one transaction, committed when it
    /// returns `Ok` (see [`crate::Store::transaction`]); the commit announces `thread_id`
    /// on [`CHANNEL`] when given.
    pub fn with_transaction<T>(
        &mut self,
        thread_id: Option<&str>,
        f: impl FnOnce(&PgTx<'_>) -> Result<T>,
    ) -> Result<T> {
        self.transaction(thread_id, |ops| f(&PgTx(ops)))
    }

    /// See [`crate::Store::get_turn`].
    pub fn get_turn(&mut self, thread_id: &str, turn_id: &str) -> Result<Option<TurnRow>> {
        self.transaction(None, |ops| ops.get_turn(thread_id, turn_id))
    }

    /// See [`crate::Store::upsert_run`].
    pub fn upsert_run(&mut self, r: &RunRow) -> Result<()> {
        self.transaction(Some(&r.thread_id), |ops| ops.upsert_run(r))
    }

    /// See [`crate::Store::get_run`].
    pub fn get_run(&mut self, id: &str) -> Result<Option<RunRow>> {
        self.transaction(None, |ops| ops.get_run(id))
    }

    /// See [`crate::Store::list_runs`].
    pub fn list_runs(&mut self, thread_id: &str) -> Result<Vec<RunRow>> {
        self.transaction(None, |ops| ops.list_runs(thread_id))
    }

    /// See [`crate::Store::get_input`].
    pub fn get_input(&mut self, thread_id: &str, id: &str) -> Result<Option<InputRow>> {
        self.transaction(None, |ops| ops.get_input(thread_id, id))
    }

    /// See [`crate::Store::claim_continue_source`].
    pub fn claim_continue_source(&mut self, thread_id: &str, source_turn_id: &str) -> Result<bool> {
        self.transaction(Some(thread_id), |ops| {
            ops.claim_continue_source(thread_id, source_turn_id)
        })
    }

    /// See [`crate::Store::acquire_lease`].
    pub fn acquire_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<LeaseOutcome> {
        self.transaction(Some(thread_id), |ops| ops.acquire_lease(thread_id, owner))
    }

    /// See [`crate::Store::release_lease`].
    pub fn release_lease(&mut self, thread_id: &str, owner: &LeaseOwner) -> Result<()> {
        self.transaction(Some(thread_id), |ops| ops.release_lease(thread_id, owner))
    }

    /// See [`crate::Store::heartbeat`].
    pub fn heartbeat(&mut self, owner: &LeaseOwner) -> Result<()> {
        self.transaction(None, |ops| ops.heartbeat(owner))
    }

    /// See [`crate::Store::dead_leases`].
    pub fn dead_leases(&mut self, me: &LeaseOwner) -> Result<Vec<(String, LeaseOwner, i64)>> {
        self.transaction(None, |ops| ops.dead_leases(me))
    }

    /// See [`crate::Store::holder_dead`].
    pub fn holder_dead(&self, holder: &LeaseOwner, heartbeat_ms: i64, me: &LeaseOwner) -> bool {
        crate::lease::holder_dead(holder, heartbeat_ms, me, self.lease_stale_ms)
    }

    /// See [`crate::Store::lease_of`].
    pub fn lease_of(&mut self, thread_id: &str) -> Result<Option<(LeaseOwner, i64)>> {
        self.transaction(None, |ops| ops.lease_of(thread_id))
    }

    /// See [`crate::Store::settle_abandoned`].
    pub fn settle_abandoned(
        &mut self,
        thread_id: &str,
        me: &LeaseOwner,
        message: &str,
    ) -> Result<RecoveryReport> {
        self.transaction(Some(thread_id), |ops| {
            ops.settle_abandoned(thread_id, me, message)
        })
    }

    /// See [`crate::Store::recover`]: on a shared database, takes over the leases of
    /// owners on any host whose heartbeat is older than `stale_ms` and settles their work.
    pub fn recover(
        &mut self,
        me: &LeaseOwner,
        stale_ms: i64,
        started_at_ms: i64,
    ) -> Result<RecoveryReport> {
        self.transaction(Some(""), |ops| ops.recover(me, stale_ms, started_at_ms))
    }

    /// Subscribes this connection to [`CHANNEL`]; [`PgStore::changes`] then reports the
    /// threads other connections changed.
    pub fn listen(&mut self) -> Result<()> {
        self.reconnect()?;
        self.conn.script(&format!("LISTEN {CHANNEL}"))
    }

    /// The thread ids announced on [`CHANNEL`] since the last call (`""` for a change
    /// not about one thread), without waiting. Errors: [`StoreError::Unavailable`] when
    /// the connection broke (changes may have been missed: reread what is cached).
    pub fn changes(&mut self) -> Result<Vec<String>> {
        match self.conn.raw.notifications() {
            Ok(n) => Ok(n
                .into_iter()
                .filter(|(channel, _)| channel == CHANNEL)
                .map(|(_, payload)| payload)
                .collect()),
            Err(e) => {
                self.conn.broken.set(true);
                Err(StoreError::Unavailable(format!("{}: {e}", self.conn.shown)))
            }
        }
    }

    /// The connection's socket, readable when a notification may have arrived (for
    /// `poll`); -1 while disconnected.
    pub fn socket(&self) -> i32 {
        self.conn.raw.socket()
    }
}

/// The row methods of [`PgStore`] inside one transaction
/// ([`PgStore::with_transaction`]): nothing is committed until the closure returns `Ok`.
pub struct PgTx<'a>(&'a Ops<'a>);

impl PgTx<'_> {
    /// See [`crate::Store::insert_turn`].
    pub fn insert_turn(&self, t: &TurnRow) -> Result<()> {
        self.0.insert_turn(t)
    }

    /// See [`crate::Store::update_turn`].
    pub fn update_turn(&self, t: &TurnRow) -> Result<()> {
        self.0.update_turn(t)
    }

    /// See [`crate::Store::upsert_item`].
    pub fn upsert_item(&self, item: &ItemRow) -> Result<u64> {
        self.0.upsert_item(item)
    }

    /// See [`crate::Store::touch_thread`].
    pub fn touch_thread(&self, id: &str, updated_at_ms: i64) -> Result<()> {
        self.0.touch_thread(id, updated_at_ms)
    }

    /// See [`crate::Store::set_archived`].
    pub fn set_archived(
        &self,
        id: &str,
        archived: bool,
        reason: Option<&str>,
    ) -> Result<Option<ThreadRow>> {
        self.0.set_archived(id, archived, reason)
    }

    /// See [`crate::Store::delete_thread`].
    pub fn delete_thread(&self, id: &str, only_if_archived: bool) -> Result<DeleteOutcome> {
        self.0.delete_thread(id, only_if_archived)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_shown_without_passwords() {
        assert_eq!(
            redact_url("postgresql://wuu:s3cret@db.example:5432/wuu?sslmode=require"),
            "postgresql://wuu@db.example:5432/wuu?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://db/wuu?password=s3cret&application_name=x"),
            "postgres://db/wuu?application_name=x"
        );
        assert_eq!(
            redact_url("postgresql://wuu@/wuu?host=/tmp"),
            "postgresql://wuu@/wuu?host=/tmp"
        );
        assert_eq!(
            scrub("password s3cret rejected", "postgresql://u:s3cret@h/d"),
            "password *** rejected"
        );
    }

    fn thread(id: &str) -> ThreadRow {
        ThreadRow::new(id, "/w", 1_000)
    }

    /// Polls `store` for notifications until `want` arrives (up to 5 s).
    fn await_change(store: &mut PgStore, want: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if store.changes().unwrap().iter().any(|c| c == want) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn hosts_migrate_once_and_see_each_others_conversations() {
        let Some(first) = crate::lease_tests::pg_backend::pg() else {
            return;
        };
        // a fresh schema, opened by several hosts at once: one migrates, all agree
        let url = first.url.replace("search_path%3D", "search_path%3Dfresh_");
        let schema = url
            .rsplit("search_path%3D")
            .next()
            .unwrap_or_default()
            .to_string();
        let base = first.url.split("?options").next().unwrap_or_default();
        let created = std::process::Command::new("psql")
            .args([base, "-qc", &format!("CREATE SCHEMA {schema}")])
            .status()
            .unwrap();
        assert!(created.success());
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let url = url.clone();
                std::thread::spawn(move || PgStore::open(&url))
            })
            .collect();
        let mut hosts: Vec<PgStore> = opens
            .into_iter()
            .map(|h| h.join().unwrap().unwrap())
            .collect();
        for h in &hosts {
            assert_eq!(h.schema_version().unwrap(), schema::MIGRATIONS.len() as i64);
        }
        let mut b = hosts.pop().unwrap();
        let mut a = hosts.pop().unwrap();
        a.listen().unwrap();
        assert!(a.changes().unwrap().is_empty());

        // host b starts a conversation and runs a turn's writes
        b.insert_thread(&thread("t1")).unwrap();
        let mut turn = TurnRow::new("t1", "u1", "user", 2_000);
        b.insert_turn(&turn).unwrap();
        let item = ItemRow {
            thread_id: "t1".into(),
            turn_id: "u1".into(),
            id: "i1".into(),
            item_type: "agent_message".into(),
            status: Some("completed".into()),
            seq: 0,
            body: serde_json::json!({"id": "i1", "type": "agent_message", "text": "hi"}),
        };
        assert_eq!(b.upsert_item(&item).unwrap(), 1);
        assert_eq!(b.upsert_item(&item).unwrap(), 1, "an update keeps its seq");
        turn.status = "completed".into();
        b.update_turn(&turn).unwrap();
        b.touch_thread("t1", 5_000).unwrap();
        b.touch_thread("t1", 4_000).unwrap();

        // host a is told, and its listing shows it
        assert!(await_change(&mut a, "t1"), "no notification for t1");
        let listed = a
            .list_threads(&ThreadFilter {
                cwd: Some("/w".into()),
                archived: Some(false),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].id, "t1");
        assert_eq!(listed[0].updated_at_ms, 5_000, "activity never moves back");
        assert_eq!(a.get_turn("t1", "u1").unwrap().unwrap().status, "completed");
    }

    #[test]
    fn a_lost_connection_fails_the_call_clearly_and_the_next_reconnects() {
        let Some(first) = crate::lease_tests::pg_backend::pg() else {
            return;
        };
        let mut store = first.store;
        let killer = PgStore::open(&first.url).unwrap();
        let pid: i64 = {
            let rows = store.conn.rows("SELECT pg_backend_pid()", &[]).unwrap();
            crate::util::get(&rows[0], 0, "pg", "pid").unwrap()
        };
        store.insert_thread(&thread("before")).unwrap();
        killer
            .conn
            .rows(
                "SELECT pg_terminate_backend(CAST(?1 AS INTEGER))",
                &[Value::Int(pid)],
            )
            .unwrap();
        let err = store.insert_thread(&thread("lost")).unwrap_err();
        assert!(err.is_unavailable(), "{err:?}");
        assert!(err.to_string().contains(store.url()), "{err}");
        // the failed write did not commit; the next call reconnects and works
        store.insert_thread(&thread("after")).unwrap();
        assert!(store.get_thread("before").unwrap().is_some());
        assert!(store.get_thread("lost").unwrap().is_none());
        assert!(store.get_thread("after").unwrap().is_some());
    }

    #[test]
    fn a_store_opened_on_postgres_lists_searches_and_counts_changes() {
        let Some(first) = crate::lease_tests::pg_backend::pg() else {
            return;
        };
        let location = crate::Location::Postgres(first.url.clone());
        let mut a = crate::Store::open_location(&location).unwrap();
        let mut b = crate::Store::open_location(&location).unwrap();
        assert!(a.is_shared());
        b.listen().unwrap();
        let before = a.data_version().unwrap();
        let mut t1 = thread("t1");
        t1.title = Some("Renaming the Parser".into());
        a.insert_thread(&t1).unwrap();
        let mut t2 = thread("t2");
        t2.updated_at_ms = 2_000;
        a.insert_thread(&t2).unwrap();
        a.insert_turn(&TurnRow::new("t2", "u1", "user", 2_000))
            .unwrap();
        let text = "Ünïcode and \"quotes\" then the NEEDLE here";
        a.upsert_item(&ItemRow {
            thread_id: "t2".into(),
            turn_id: "u1".into(),
            id: "m1".into(),
            item_type: "user_message".into(),
            status: Some("completed".into()),
            seq: 0,
            body: serde_json::json!({"id": "m1", "type": "user_message", "text": text}),
        })
        .unwrap();
        assert!(a.data_version().unwrap() > before, "own commits count");
        // another connection hears of them
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut heard = vec![];
        while !heard.iter().any(|c| c == "t2") && Instant::now() < deadline {
            heard.extend(b.changes().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(heard.iter().any(|c| c == "t1"), "{heard:?}");
        assert!(heard.iter().any(|c| c == "t2"), "{heard:?}");

        // search: title, message (narrowed and not), nothing, blank
        let hit = b.search_threads("parser", 10).unwrap();
        assert_eq!(hit.len(), 1);
        assert_eq!(hit[0].thread.id, "t1");
        assert_eq!(hit[0].item_id, None);
        let hit = b.search_threads("needle", 10).unwrap();
        assert_eq!(hit.len(), 1);
        assert_eq!(hit[0].thread.id, "t2");
        assert_eq!(hit[0].item_id.as_deref(), Some("m1"));
        assert_eq!(hit[0].item_seq, Some(1));
        assert!(hit[0].snippet.contains("NEEDLE"), "{}", hit[0].snippet);
        let hit = b.search_threads("ünïcode", 10).unwrap();
        assert_eq!(hit.len(), 1, "a non-ASCII query reads every conversation");
        let hit = b.search_threads("\"quotes\"", 10).unwrap();
        assert_eq!(hit.len(), 1, "a quoted query reads every conversation");
        assert!(b.search_threads("absent", 10).unwrap().is_empty());
        let newest: Vec<_> = b
            .search_threads(" ", 10)
            .unwrap()
            .into_iter()
            .map(|h| h.thread.id)
            .collect();
        assert_eq!(newest, ["t2", "t1"]);
        assert_eq!(b.search_threads("needle", 0).unwrap().len(), 0);

        // the listing visitor: same rows and order as list_threads
        let filter = ThreadFilter {
            cwd: Some("/w".into()),
            archived: Some(false),
            limit: None,
        };
        let mut seen = vec![];
        let n = b
            .visit_threads(&filter, |v| {
                seen.push(v.id.to_string());
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(seen, ["t2", "t1"]);

        // a transaction through Tx commits together
        b.transaction(|tx| {
            tx.touch_thread("t1", 9_000)?;
            tx.set_archived("t2", true, None).map(|_| ())
        })
        .unwrap();
        let listed = a.list_threads(&filter).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].updated_at_ms, 9_000);
        assert!(a.thread_exists("t2").unwrap());
        assert!(!a.thread_exists("nope").unwrap());
        assert_eq!(a.load_history("t2").unwrap()[0].items.len(), 1);
    }

    #[test]
    fn values_decode_by_column_type() {
        assert_eq!(decode(oid::BOOL, "t".into()), Value::Int(1));
        assert_eq!(decode(oid::INT8, "-42".into()), Value::Int(-42));
        assert_eq!(decode(oid::NUMERIC, "7".into()), Value::Int(7));
        assert_eq!(decode(25, "x".into()), Value::Text("x".into()));
    }

    #[test]
    fn a_database_of_version_9_migrates_keeping_its_rows() {
        let Ok(base) = std::env::var("WUU_TEST_PG_URL") else {
            eprintln!("skipped on PostgreSQL: WUU_TEST_PG_URL is not set (.ci/run sets it)");
            return;
        };
        let schema_name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let psql = |sql: &str| {
            let out = std::process::Command::new("psql")
                .args([&base, "-qtA", "-v", "ON_ERROR_STOP=1", "-c", sql])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        let mut old = format!("CREATE SCHEMA {schema_name}; SET search_path TO {schema_name};");
        for sql in &schema::MIGRATIONS[..9] {
            old.push_str(sql);
        }
        old.push_str(
            "CREATE TABLE wuu_schema (version BIGINT NOT NULL); \
             INSERT INTO wuu_schema (version) VALUES (9); \
             INSERT INTO threads (id, cwd, created_at_ms, updated_at_ms) VALUES ('old', '/w', 1, 5); \
             INSERT INTO leases (thread_id, pid, instance, host, acquired_at_ms, heartbeat_at_ms) \
                 VALUES ('old', 4242, 'inst-a', 'host-a', 7, 8);",
        );
        psql(&old);
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-csearch_path%3D{schema_name}");
        let mut store = PgStore::open(&url).unwrap();
        assert_eq!(
            store.schema_version().unwrap(),
            schema::MIGRATIONS.len() as i64
        );
        let indexes = psql(&format!(
            "SELECT count(*) FROM pg_indexes WHERE schemaname = '{schema_name}' \
             AND indexname IN ('threads_by_cwd', 'leases_by_instance')"
        ));
        assert_eq!(indexes, "0");
        let listed = store
            .list_threads(&ThreadFilter {
                cwd: Some("/w".into()),
                archived: Some(false),
                limit: None,
            })
            .unwrap();
        assert_eq!(listed.len(), 1);
        let (holder, heartbeat) = store.lease_of("old").unwrap().unwrap();
        assert_eq!(
            (holder.pid, holder.instance.as_str(), heartbeat),
            (4242, "inst-a", 8)
        );
    }
}
