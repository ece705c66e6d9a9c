//! SQLite persistence of wuu: threads, turns, items, pending inputs, runs, usage,
//! execution leases and crash recovery.
//!
//! One database file, `wuu.db` under the wuu home, in WAL mode. Every OS thread that
//! touches the store owns its own [`Store`] (one `rusqlite::Connection`); several wuu
//! processes may share the file. The store knows rows, not the wire: item bodies and
//! other flexible parts are JSON text (`serde_json::Value`), timestamps are Unix
//! milliseconds.
//!
//! ```no_run
//! use wuu_store::{Store, ThreadRow};
//! # fn main() -> Result<(), wuu_store::StoreError> {
//! let mut store = Store::open_home(std::path::Path::new("/home/me/.wuu"))?;
//! store.insert_thread(&ThreadRow::new("t1", "/work/project", 1_700_000_000_000))?;
//! let latest = store.latest_thread("/work/project")?;
//! # Ok(()) }
//! ```

// `unsafe` only in the documented libpq wrapper (`pg::ffi`, feature `postgres`).
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod history;
mod lease;
mod location;
mod organization;
mod pages;
#[cfg(feature = "postgres")]
pub mod pg;
mod processes;
mod records;
mod rows;
mod schema;
mod search;
mod side;
mod skills;
mod sql;
mod store;
mod threads;
mod usage;
mod util;

pub use error::{Result, StoreError};
pub use lease::{
    default_stale_ms, host_name, pid_alive, set_default_stale_ms, INTERRUPTED_MESSAGE,
    TOOL_OUTCOME_UNKNOWN,
};
pub use location::{is_postgres_url, redact_url, Location};
pub use organization::FolderRow;
pub use pages::{ItemHead, SMALL_BODY_BYTES};
pub use processes::ProcessGroupRow;
pub use rows::{
    input_mode, input_state, item_damage, turn_status, DeleteOutcome, InputRow, ItemRow,
    LeaseOutcome, LeaseOwner, RecoveryReport, RunRow, SearchHit, SettledTurn, ThreadFilter,
    ThreadRow, ThreadView, TurnRow, TurnWithItems, UsageRow,
};
pub use side::{SideMessageRow, SideThreadRow};
pub use skills::SkillUseCount;
pub use store::{Store, Tx, DB_FILE, DEFAULT_BUSY_TIMEOUT, DEFAULT_LEASE_STALE_MS, NO_POSTGRES};
pub use threads::SNIPPET_CHARS;
pub use usage::{EngineClaim, LatestTurn, UsageScanRow, UsageSnapshot};
pub use util::{set_text_filter, TextFilter};

#[cfg(test)]
mod history_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod ledger_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod thread_tests;
#[cfg(test)]
mod usage_tests;
