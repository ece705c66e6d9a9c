//! The environment of an external engine's child: built rather than inherited, so our
//! provider keys, other credentials and agent sockets stay with us (spec `engines.md`
//! §1.4, §1.5). Each engine names the variables it reads for its own configuration,
//! credentials and endpoint; the user adds more through `agent.shell_env.keep`.

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

/// Variables of ours every engine child gets (when set): what any program needs to
/// run as the user (identity, locale, terminal, temp dir, time zone, XDG dirs) and to
/// reach the network (proxies, CA bundles). Every `LC_*` passes too; `PATH` is built
/// (the binary's directory first).
pub const BASE_ENV: &[&str] = &[
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
];

/// The whole environment of an engine child: `PATH` with the binary's directory first
/// (a GUI launch may not see the directory of `node` and friends), the variables of
/// [`BASE_ENV`] and every `LC_*`, the engine's own variables `own`, and those named in
/// `agent.shell_env.keep` — each only when set in our environment. Nothing else of
/// ours passes: other providers' keys, tokens, secrets and agent sockets stay out.
pub fn build_env(
    binary: &Path,
    settings: &ChildSettings,
    own: &[String],
) -> Vec<(OsString, OsString)> {
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
    let wanted = |name: &str| {
        BASE_ENV.contains(&name)
            || own.iter().any(|w| w == name)
            || settings.env_keep.iter().any(|w| w == name)
    };
    let mut out: Vec<(OsString, OsString)> = vec![("PATH".into(), path)];
    for (k, v) in std::env::vars_os() {
        let pass = k
            .to_str()
            .is_some_and(|name| name != "PATH" && (name.starts_with("LC_") || wanted(name)));
        if pass {
            out.push((k, v));
        }
    }
    out
}
