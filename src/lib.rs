//! wuu: an agent host. Runs an AI coding agent over a workspace, persists every
//! conversation in SQLite, and serves it over JSON lines (`wuu app-server`) and as a
//! JSONL event stream (`wuu exec --json`).
//!
//! Runtime rule: OS threads and bounded crossbeam channels, no async runtime
//! (DESIGN.md). The layers, top to bottom (an arrow only points down; ARCHITECTURE.md):
//! [`exec`]; [`server`]; [`panels`] and [`usage`]; [`session`]; [`engine`]; [`tools`];
//! [`provider`]; [`outbound`]; [`config`]; [`secrets`] and [`beneath`]; [`util`].

pub mod beneath;
pub mod config;
pub mod engine;
pub mod exec;
pub mod mcp;
pub mod outbound;
pub mod panels;
pub mod provider;
pub mod secrets;
pub mod server;
pub mod session;
pub mod tools;
pub mod usage;

pub mod util;
