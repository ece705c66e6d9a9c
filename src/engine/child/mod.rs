//! What every external engine's child process shares (spec `engines.md` §1.4, §1.5):
//! its environment, built (never inherited) from a fixed base plus the variables that
//! engine reads for its own credentials and endpoint ([`env`]); its launch, lifetime and
//! stop ([`process`]): started through the command launcher so it dies with the host
//! (parent-death signal), recorded in the process ledger until it ends, its stderr
//! drained into a redacted tail for error messages; and the watch on a turn's controls
//! while its setup waits for the child ([`watch`]).

pub mod env;
pub mod process;
pub mod watch;

pub use env::{build_env, ChildSettings, BASE_ENV};
pub use process::{redact, Process};
pub use watch::{recv_watched, Waited, Watch};
