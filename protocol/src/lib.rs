//! Wire types of the wuu app-server protocol (`wuu-app-server/v0.1`) and of the
//! `wuu exec --json` event stream. Pure data and serde: no I/O.
//!
//! Sources: `spec/app-server.md` (envelope §1, methods §3, notifications §4, shapes §5)
//! and the seeds, which win where they differ.

pub mod activity;
pub mod agents;
pub mod browser;
pub mod clients;
pub mod config;
pub mod engines;
pub mod envelope;
pub mod extras;
pub mod history;
pub mod input;
pub mod mcp;
pub mod methods;
pub mod notifications;
pub mod panels;
pub mod processes;
pub mod questions;
pub mod run;
pub mod schema;
pub mod side;
pub mod thread;
pub mod usage;
pub mod workspace;

pub use activity::*;
pub use agents::*;
pub use clients::*;
pub use config::*;
pub use engines::*;
pub use envelope::*;
pub use extras::*;
pub use history::*;
pub use input::*;
pub use mcp::*;
pub use methods::*;
pub use notifications::*;
pub use panels::*;
pub use processes::*;
pub use questions::*;
pub use run::*;
pub use side::*;
pub use thread::*;
pub use usage::*;
pub use workspace::*;
