//! The error type of the store.

use std::fmt;
use std::path::PathBuf;

/// Result alias used by every store function.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything that can go wrong in the store.
///
/// [`StoreError::Busy`] is kept apart from the other SQLite failures so callers can tell
/// "another connection held the write lock longer than the busy timeout" (retry later,
/// answer `thread_busy`) from real failures ([`StoreError::is_busy`]).
#[derive(Debug)]
#[non_exhaustive]
pub enum StoreError {
    /// The database stayed locked by another connection or process for longer than the
    /// busy timeout (SQLite `SQLITE_BUSY` / `SQLITE_LOCKED`). Retrying later may succeed.
    Busy(rusqlite::Error),
    /// Any other SQLite failure (I/O, constraint violation, full disk, …).
    Sqlite(rusqlite::Error),
    /// A PostgreSQL statement failed (constraint violation, bad SQL, …). `code` is its
    /// SQLSTATE; serialization failures, deadlocks and lock timeouts (`40001`, `40P01`,
    /// `55P03`, `57014`) count as busy ([`StoreError::is_busy`]).
    Postgres {
        /// The five-character SQLSTATE.
        code: String,
        /// The server's message.
        message: String,
    },
    /// The PostgreSQL server cannot be reached or the connection broke (wire error
    /// `store_unavailable`). A write that fails with it was not acknowledged: it either
    /// did not commit or, when the connection broke during `COMMIT`, its outcome is
    /// unknown to this process (the next read tells). The message never contains a
    /// password.
    Unavailable(String),
    /// Creating the directory of the database file failed.
    Io {
        /// The path that could not be created.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The database was written by a newer wuu: its `PRAGMA user_version` is higher than
    /// the number of migrations this build knows. The file is left untouched.
    SchemaTooNew {
        /// `user_version` found in the file.
        found: i64,
        /// Highest version this build can migrate to.
        supported: i64,
    },
    /// A stored row could not be decoded (corrupt JSON, a value of the wrong type or
    /// range). `what` names the table and key.
    Corrupt {
        /// Table and key of the damaged row, e.g. `threads[t1].extra`.
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// A row that an update/insert needed does not exist (e.g. `update_thread` of an
    /// unknown thread, `upsert_item` into an unknown thread or turn).
    NotFound {
        /// Kind of row: `thread`, `turn`, `item`.
        kind: &'static str,
        /// Its id (`thread_id/turn_id` for child rows).
        id: String,
    },
    /// A caller passed a value the store refuses (unknown input mode/state, a value that
    /// does not fit SQLite's signed 64-bit integers, …).
    Invalid(String),
}

impl StoreError {
    /// True for [`StoreError::Busy`]: the database was locked for longer than the busy
    /// timeout.
    pub fn is_busy(&self) -> bool {
        match self {
            StoreError::Busy(_) => true,
            StoreError::Postgres { code, .. } => {
                matches!(code.as_str(), "40001" | "40P01" | "55P03" | "57014")
            }
            _ => false,
        }
    }

    /// True for [`StoreError::Unavailable`]: the database server could not be reached.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    pub(crate) fn corrupt(what: impl Into<String>, detail: impl fmt::Display) -> Self {
        StoreError::Corrupt {
            what: what.into(),
            detail: detail.to_string(),
        }
    }

    pub(crate) fn not_found(kind: &'static str, id: impl Into<String>) -> Self {
        StoreError::NotFound {
            kind,
            id: id.into(),
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Busy(e) => write!(f, "database is busy (locked by another connection): {e}"),
            StoreError::Sqlite(e) => write!(f, "database error: {e}"),
            StoreError::Postgres { code, message } => {
                write!(f, "database error ({code}): {message}")
            }
            StoreError::Unavailable(m) => write!(f, "database unavailable: {m}"),
            StoreError::Io { path, source } => {
                write!(f, "cannot create {}: {source}", path.display())
            }
            StoreError::SchemaTooNew { found, supported } => write!(
                f,
                "database schema version {found} is newer than this build supports ({supported}); upgrade wuu"
            ),
            StoreError::Corrupt { what, detail } => write!(f, "damaged row {what}: {detail}"),
            StoreError::NotFound { kind, id } => write!(f, "{kind} not found: {id}"),
            StoreError::Invalid(msg) => write!(f, "invalid value: {msg}"),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Busy(e) | StoreError::Sqlite(e) => Some(e),
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy(e),
            _ => StoreError::Sqlite(e),
        }
    }
}
