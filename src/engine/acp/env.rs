//! The environment of an ACP agent child (spec `engines.md` §1.6, issue rule "built, not
//! inherited"): the fixed base every engine child gets, the variables the engine reads
//! for its own credentials and configuration, and `agent.shell_env.keep`; nothing else.

use crate::engine::codex::{ChildSettings, CHILD_ENV_BASE};
use std::ffi::OsString;
use std::path::Path;

/// Variables catalogue engine `id` reads for its own login, endpoint and config
/// directory (passed when set): Cursor `CURSOR_API_KEY`; Grok `XAI_API_KEY`,
/// `GROK_API_KEY`; Pi `PI_CODING_AGENT_DIR`; Devin, Hermes and Antigravity keep their
/// login in their own files below `HOME`.
pub fn engine_vars(id: &str) -> &'static [&'static str] {
    match id {
        "cursor" => &["CURSOR_API_KEY"],
        "grok" => &["XAI_API_KEY", "GROK_API_KEY"],
        "pi" => &["PI_CODING_AGENT_DIR"],
        _ => &[],
    }
}

/// The whole environment of an ACP child of engine `id`: `PATH` with the binary's
/// directory first, the base of every engine child ([`CHILD_ENV_BASE`] without Codex's
/// own `CODEX_HOME` / `OPENAI_BASE_URL`) and every `LC_*`, [`engine_vars`], and the
/// variables named in `agent.shell_env.keep`.
pub fn child_env(id: &str, binary: &Path, settings: &ChildSettings) -> Vec<(OsString, OsString)> {
    let mut path = binary
        .parent()
        .map(|d| d.as_os_str().to_owned())
        .unwrap_or_default();
    if let Some(p) = std::env::var_os("PATH") {
        if !path.is_empty() {
            path.push(":");
        }
        path.push(p);
    }
    let wanted: Vec<&str> = CHILD_ENV_BASE
        .iter()
        .copied()
        .filter(|v| !matches!(*v, "CODEX_HOME" | "OPENAI_BASE_URL"))
        .chain(engine_vars(id).iter().copied())
        .chain(settings.env_keep.iter().map(String::as_str))
        .collect();
    let mut out: Vec<(OsString, OsString)> = vec![("PATH".into(), path)];
    for (k, v) in std::env::vars_os() {
        let pass = k.to_str().is_some_and(|name| {
            name != "PATH" && (name.starts_with("LC_") || wanted.contains(&name))
        });
        if pass {
            out.push((k, v));
        }
    }
    out
}
