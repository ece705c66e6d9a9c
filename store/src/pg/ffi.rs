//! The minimal safe wrapper of libpq (through `pq-sys`) the PostgreSQL backend needs:
//! connect, reset, one parameterized statement at a time (text format), results, and
//! notifications. This is the only `unsafe` code of the store; every block states the
//! invariant it relies on. libpq's API: <https://www.postgresql.org/docs/current/libpq.html>.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::ptr::NonNull;

use pq_sys as pq;

/// A libpq connection (`PGconn`). Not shared between threads (no `Sync`); it may move
/// to another thread (libpq connections are not tied to the thread that opened them).
pub(crate) struct RawConn(NonNull<pq::PGconn>);

// SAFETY: a PGconn has no thread affinity; `RawConn` is used by one thread at a time
// (`&mut`/`&` on a value that is not `Sync`).
unsafe impl Send for RawConn {}

impl RawConn {
    /// Opens a connection from a libpq connection string or URI. The password comes from
    /// the string, `PGPASSWORD` or `~/.pgpass`, as libpq resolves them. Errors: libpq's
    /// message (NUL in `conninfo`, unreachable server, authentication).
    pub(crate) fn connect(conninfo: &str) -> Result<RawConn, String> {
        let info = CString::new(conninfo).map_err(|_| "connection string contains NUL")?;
        // SAFETY: `info` is a valid NUL-terminated string for the duration of the call;
        // PQconnectdb returns NULL only when out of memory.
        let ptr = unsafe { pq::PQconnectdb(info.as_ptr()) };
        let conn = RawConn(NonNull::new(ptr).ok_or("libpq could not allocate a connection")?);
        if conn.is_ok() {
            Ok(conn)
        } else {
            Err(conn.error_message())
        }
    }

    /// Whether the connection is up (`CONNECTION_OK`).
    pub(crate) fn is_ok(&self) -> bool {
        // SAFETY: `self.0` is a live PGconn until drop.
        unsafe { pq::PQstatus(self.0.as_ptr()) == pq::ConnStatusType::CONNECTION_OK }
    }

    /// Closes and reopens the connection with the same parameters; true when it is up.
    pub(crate) fn reset(&mut self) -> bool {
        // SAFETY: `self.0` is a live PGconn; PQreset keeps the pointer valid.
        unsafe { pq::PQreset(self.0.as_ptr()) };
        self.is_ok()
    }

    /// libpq's last error message of this connection, trimmed.
    pub(crate) fn error_message(&self) -> String {
        // SAFETY: PQerrorMessage returns a NUL-terminated string owned by the PGconn,
        // valid until the next call on it; it is copied at once.
        unsafe { cstr(pq::PQerrorMessage(self.0.as_ptr())) }
            .trim()
            .to_string()
    }

    /// Runs one statement with text-format parameters (`None` = NULL) whose types are
    /// `types` (PostgreSQL type OIDs, 0 = inferred by the server). Returns the result,
    /// whatever its status; `Err` only when libpq produced none (out of memory, or the
    /// connection is gone), with libpq's message.
    pub(crate) fn exec(
        &self,
        sql: &str,
        params: &[Option<CString>],
        types: &[u32],
    ) -> Result<PgResult, String> {
        let sql = CString::new(sql).map_err(|_| "SQL contains NUL".to_string())?;
        let values: Vec<*const std::os::raw::c_char> = params
            .iter()
            .map(|p| p.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()))
            .collect();
        let n = c_int::try_from(params.len()).map_err(|_| "too many parameters".to_string())?;
        // SAFETY: every pointer outlives the call: `sql`, `values` (pointing into
        // `params`' CStrings or NULL) and `types` each hold `n` entries; lengths and
        // formats may be NULL for text parameters; result format 0 = text.
        let res = unsafe {
            pq::PQexecParams(
                self.0.as_ptr(),
                sql.as_ptr(),
                n,
                types.as_ptr(),
                values.as_ptr(),
                std::ptr::null(),
                std::ptr::null(),
                0,
            )
        };
        match NonNull::new(res) {
            Some(res) => Ok(PgResult(res)),
            None => Err(self.error_message()),
        }
    }

    /// Runs a script of several statements without parameters (`PQexec`), e.g. a
    /// migration. Same result rules as [`RawConn::exec`]; the result is the last
    /// statement's, or the first failure's.
    pub(crate) fn exec_script(&self, sql: &str) -> Result<PgResult, String> {
        let sql = CString::new(sql).map_err(|_| "SQL contains NUL".to_string())?;
        // SAFETY: `sql` is a valid NUL-terminated string for the call.
        let res = unsafe { pq::PQexec(self.0.as_ptr(), sql.as_ptr()) };
        match NonNull::new(res) {
            Some(res) => Ok(PgResult(res)),
            None => Err(self.error_message()),
        }
    }

    /// Reads what the server sent and returns the notifications received so far, as
    /// `(channel, payload)`. Errors: libpq's message when the connection broke.
    pub(crate) fn notifications(&self) -> Result<Vec<(String, String)>, String> {
        // SAFETY: `self.0` is live; PQconsumeInput returns 0 on a broken connection.
        if unsafe { pq::PQconsumeInput(self.0.as_ptr()) } == 0 {
            return Err(self.error_message());
        }
        let mut out = Vec::new();
        loop {
            // SAFETY: PQnotifies returns NULL or a PGnotify the caller frees with
            // PQfreemem; its strings are NUL-terminated and valid until then.
            let n = unsafe { pq::PQnotifies(self.0.as_ptr()) };
            let Some(n) = NonNull::new(n) else { break };
            // SAFETY: `n` is a valid PGnotify (see above); copied before it is freed.
            unsafe {
                let notify = n.as_ref();
                out.push((cstr(notify.relname), cstr(notify.extra)));
                pq::PQfreemem(n.as_ptr().cast());
            }
        }
        Ok(out)
    }

    /// The connection's socket (for waiting on notifications with `poll`), -1 when none.
    pub(crate) fn socket(&self) -> i32 {
        // SAFETY: `self.0` is live.
        unsafe { pq::PQsocket(self.0.as_ptr()) }
    }
}

impl Drop for RawConn {
    fn drop(&mut self) {
        // SAFETY: `self.0` is live and never used after this.
        unsafe { pq::PQfinish(self.0.as_ptr()) }
    }
}

/// A copy of a NUL-terminated C string (`""` for NULL).
///
/// # Safety
/// `p` is NULL or points at a NUL-terminated string valid for this call.
unsafe fn cstr(p: *const std::os::raw::c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A statement's result (`PGresult`), freed on drop.
pub(crate) struct PgResult(NonNull<pq::PGresult>);

/// What a result says about its statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    /// Done, no rows (`PGRES_COMMAND_OK`, `PGRES_EMPTY_QUERY`).
    Command,
    /// Done with rows (`PGRES_TUPLES_OK`).
    Rows,
    /// Failed; see [`PgResult::sqlstate`] and [`PgResult::error_message`].
    Failed,
}

impl PgResult {
    /// The status of the statement.
    pub(crate) fn status(&self) -> Status {
        use pq::ExecStatusType::*;
        // SAFETY: `self.0` is a live PGresult until drop.
        match unsafe { pq::PQresultStatus(self.0.as_ptr()) } {
            PGRES_COMMAND_OK | PGRES_EMPTY_QUERY => Status::Command,
            PGRES_TUPLES_OK => Status::Rows,
            _ => Status::Failed,
        }
    }

    /// The five-character SQLSTATE of a failure (`""` when none, e.g. a lost connection).
    pub(crate) fn sqlstate(&self) -> String {
        // SAFETY: the field is NULL or a NUL-terminated string owned by the result.
        unsafe {
            cstr(pq::PQresultErrorField(
                self.0.as_ptr(),
                c_int::from(pq::PG_DIAG_SQLSTATE),
            ))
        }
    }

    /// The server's (or libpq's) error message of a failure, trimmed.
    pub(crate) fn error_message(&self) -> String {
        // SAFETY: a NUL-terminated string owned by the result.
        unsafe { cstr(pq::PQresultErrorMessage(self.0.as_ptr())) }
            .trim()
            .to_string()
    }

    /// Number of rows.
    pub(crate) fn rows(&self) -> usize {
        // SAFETY: `self.0` is live.
        usize::try_from(unsafe { pq::PQntuples(self.0.as_ptr()) }).unwrap_or(0)
    }

    /// Number of columns.
    pub(crate) fn columns(&self) -> usize {
        // SAFETY: `self.0` is live.
        usize::try_from(unsafe { pq::PQnfields(self.0.as_ptr()) }).unwrap_or(0)
    }

    /// Name of column `col` (< [`PgResult::columns`]).
    pub(crate) fn column_name(&self, col: usize) -> String {
        let Ok(c) = c_int::try_from(col) else {
            return String::new();
        };
        // SAFETY: NULL for an out-of-range column, else a string owned by the result.
        unsafe { cstr(pq::PQfname(self.0.as_ptr(), c)) }
    }

    /// Type OID of column `col`.
    pub(crate) fn column_type(&self, col: usize) -> u32 {
        let Ok(c) = c_int::try_from(col) else {
            return 0;
        };
        // SAFETY: returns 0 (InvalidOid) for an out-of-range column.
        unsafe { pq::PQftype(self.0.as_ptr(), c) }
    }

    /// The text of cell (`row`, `col`), `None` for NULL (or out of range).
    pub(crate) fn value(&self, row: usize, col: usize) -> Option<String> {
        let (Ok(r), Ok(c)) = (c_int::try_from(row), c_int::try_from(col)) else {
            return None;
        };
        if row >= self.rows() || col >= self.columns() {
            return None;
        }
        // SAFETY: `r`, `c` are in range (checked above); the value is a NUL-terminated
        // string owned by the result (text format), copied at once.
        unsafe {
            if pq::PQgetisnull(self.0.as_ptr(), r, c) != 0 {
                return None;
            }
            Some(cstr(pq::PQgetvalue(self.0.as_ptr(), r, c)))
        }
    }

    /// The number of rows a command changed (`PQcmdTuples`), 0 when it does not say.
    pub(crate) fn changed(&self) -> usize {
        // SAFETY: a NUL-terminated string owned by the result ("" when not applicable).
        unsafe { cstr(pq::PQcmdTuples(self.0.as_ptr())) }
            .parse()
            .unwrap_or(0)
    }
}

impl Drop for PgResult {
    fn drop(&mut self) {
        // SAFETY: `self.0` is live and never used after this.
        unsafe { pq::PQclear(self.0.as_ptr()) }
    }
}
