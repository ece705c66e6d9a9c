//! The environment of a Codex child (spec `engines.md` §1.4): built rather than
//! inherited, so our provider keys, other credentials and agent sockets stay with us;
//! plus where the child's process-ledger row goes.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// How engine children are started: where their process-ledger rows go and which
/// further variables of ours they may see.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChildSettings {
    /// The wuu home whose store records the child (`tools::process`); None = not
    /// recorded.
    pub ledger: Option<PathBuf>,
    /// `agent.shell_env.keep`: variables passed to the child as well.
    pub env_keep: Vec<String>,
}

impl ChildSettings {
    /// The settings of `cfg` for a host whose wuu home is `home`.
    pub fn from_config(cfg: &crate::config::LoadedConfig, home: &Path) -> ChildSettings {
        ChildSettings {
            ledger: Some(home.to_path_buf()),
            env_keep: cfg
                .agent()
                .shell_env
                .and_then(|e| e.keep)
                .unwrap_or_default(),
        }
    }
}

/// Variables of ours a Codex child gets (when set): what any program needs to run as
/// the user (identity, locale, terminal, temp dir, time zone, XDG dirs), to reach the
/// network (proxies, CA bundles), and Codex's own configuration (`CODEX_HOME`, whose
/// `auth.json` holds its login, and `OPENAI_BASE_URL`). `XDG_RUNTIME_DIR` and
/// `DBUS_SESSION_BUS_ADDRESS` stay because Codex can keep its login in the system
/// keyring. `PATH` comes first, with the binary's directory.
pub const CHILD_ENV_BASE: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    "DBUS_SESSION_BUS_ADDRESS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
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

/// The whole environment of a Codex child, built rather than inherited (our provider
/// keys, other credentials and agent sockets stay with us): `PATH` with the binary's
/// directory first (a GUI launch may not see the directory of `node` and friends), the
/// variables of [`CHILD_ENV_BASE`] and every `LC_*`, the `env_key` variables of Codex's
/// own model providers ([`codex_env_keys`]), and those named in `agent.shell_env.keep`.
/// Codex's login (`codex login`, kept in `$CODEX_HOME/auth.json` or the keyring) needs
/// nothing else; `OPENAI_API_KEY` / `CODEX_API_KEY` reach it only through `keep`.
pub fn child_env(binary: &Path, settings: &ChildSettings) -> Vec<(OsString, OsString)> {
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
    let wanted: Vec<String> = CHILD_ENV_BASE
        .iter()
        .map(|s| s.to_string())
        .chain(codex_env_keys())
        .chain(settings.env_keep.iter().cloned())
        .collect();
    let mut out: Vec<(OsString, OsString)> = vec![("PATH".into(), path)];
    for (k, v) in std::env::vars_os() {
        let pass = k.to_str().is_some_and(|name| {
            name != "PATH" && (name.starts_with("LC_") || wanted.iter().any(|w| w == name))
        });
        if pass {
            out.push((k, v));
        }
    }
    out
}
