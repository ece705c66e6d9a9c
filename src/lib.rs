//! wuu: an agent host. Runs an AI coding agent over a workspace, persists every
//! conversation in SQLite, and serves it over JSON lines (`wuu app-server`) and as a
//! JSONL event stream (`wuu exec --json`).
//!
//! Runtime rule: OS threads and bounded crossbeam channels, no async runtime
//! (DESIGN.md). Module map:
//! - [`server`]: transport (reader/writer threads, outbox), router, handlers.
//! - [`session`]: one thread per live conversation: inputs, turns, runs.
//! - [`engine`]: the built-in agent loop.
//! - [`provider`]: model providers over blocking `ureq`.
//! - [`tools`]: the built-in tools.
//! - [`exec`]: `wuu exec`, an in-process client projecting onto JSONL.
//! - [`config`]: configuration layers.
//! - [`usage`]: token usage views, engine ledgers and account quota.
//! - [`panels`]: settings, live configuration, skills, instructions, helpers.

pub mod beneath;
pub mod config;
pub mod engine;
pub mod exec;
pub mod outbound;
pub mod panels;
pub mod provider;
pub mod secrets;
pub mod server;
pub mod session;
pub mod tools;
pub mod usage;

pub mod util;
