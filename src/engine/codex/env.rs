//! The environment of a Codex child (spec `engines.md` §1.4): built rather than
//! inherited (`engine::child::env`), with Codex's own configuration variables and the
//! keys its configured model providers read.

use super::super::child::{build_env, ChildSettings};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Codex's own variables (besides the shared base, `engine::child::BASE_ENV`): its
/// configuration (`CODEX_HOME`, whose `auth.json` holds its login, and
/// `OPENAI_BASE_URL`); `XDG_RUNTIME_DIR` and `DBUS_SESSION_BUS_ADDRESS` because Codex can
/// keep its login in the system keyring.
pub const CODEX_ENV: &[&str] = &[
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "CODEX_HOME",
    "OPENAI_BASE_URL",
];

/// The `env_key` variables of the model providers in Codex's `config.toml`
/// (`$CODEX_HOME`, else `~/.codex`): the credentials Codex reads from its environment
/// by its own configuration. Lines `env_key = "NAME"` (NAME of letters, digits and `_`).
fn codex_env_keys() -> Vec<String> {
    let dir = match std::env::var_os("CODEX_HOME").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(h) => PathBuf::from(h).join(".codex"),
            None => return Vec::new(),
        },
    };
    let Ok(text) = std::fs::read_to_string(dir.join("config.toml")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            if k.trim() != "env_key" {
                return None;
            }
            let name = v.trim().strip_prefix('"')?.strip_suffix('"')?;
            let ok =
                !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            ok.then(|| name.to_owned())
        })
        .collect()
}

/// The whole environment of a Codex child, built rather than inherited
/// ([`build_env`]): the shared base, [`CODEX_ENV`], the `env_key` variables of Codex's
/// own model providers ([`codex_env_keys`]), and those named in `agent.shell_env.keep`.
/// Codex's login (`codex login`, kept in `$CODEX_HOME/auth.json` or the keyring) needs
/// nothing else; `OPENAI_API_KEY` / `CODEX_API_KEY` reach it only through `keep`.
pub fn child_env(binary: &Path, settings: &ChildSettings) -> Vec<(OsString, OsString)> {
    let own: Vec<String> = CODEX_ENV
        .iter()
        .map(|s| s.to_string())
        .chain(codex_env_keys())
        .collect();
    build_env(binary, settings, &own)
}
