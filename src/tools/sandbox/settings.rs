//! The sandbox settings of a conversation: the user's extra read and write roots, the
//! environment variables kept and removed, and the host-owned paths no command may see
//! (spec: README § "Permission modes and the sandbox").

use std::path::PathBuf;

/// Per-conversation sandbox and environment settings (from `agent.sandbox` and
/// `agent.shell_env`, both user-owned).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SandboxSettings {
    /// Extra directories commands may read (`agent.sandbox.readable_roots`).
    pub readable_roots: Vec<PathBuf>,
    /// Extra directories commands may write (`agent.sandbox.writable_roots`; ignored in
    /// `read_only`).
    pub writable_roots: Vec<PathBuf>,
    /// Variables passed through although they look secret (`agent.shell_env.keep`).
    pub env_keep: Vec<String>,
    /// Variables always removed: the `api_key_env` of every configured provider.
    pub env_remove: Vec<String>,
    /// The wuu home whose store records each command's process group (`process`);
    /// None = not recorded.
    pub process_ledger: Option<PathBuf>,
    /// Host-owned paths no command may see even when they lie inside a root (the wuu
    /// home with its database, traces and config; the user config file): covered with
    /// an empty read-only directory or file in the command's mount namespace, and the
    /// command is refused when there is none (see the README).
    pub hidden: Vec<PathBuf>,
}

impl SandboxSettings {
    /// The settings of `cfg`: `agent.sandbox` roots (absolute or `~/…`; others are
    /// skipped with a warning), `agent.shell_env.keep`, and the `api_key_env` of every
    /// configured provider.
    pub fn from_config(cfg: &crate::config::LoadedConfig) -> SandboxSettings {
        let agent = cfg.agent();
        let roots = |list: Option<Vec<String>>| -> Vec<PathBuf> {
            list.unwrap_or_default()
                .into_iter()
                .filter_map(|r| {
                    let p = match (r.strip_prefix("~/"), home()) {
                        (Some(rest), Some(h)) => h.join(rest),
                        _ => PathBuf::from(&r),
                    };
                    if p.is_absolute() {
                        Some(p)
                    } else {
                        log::warn!("agent.sandbox: `{r}` is not an absolute path; ignored");
                        None
                    }
                })
                .collect()
        };
        let sb = agent.sandbox.clone().unwrap_or_default();
        SandboxSettings {
            readable_roots: roots(sb.readable_roots),
            writable_roots: roots(sb.writable_roots),
            env_keep: agent.shell_env.and_then(|e| e.keep).unwrap_or_default(),
            env_remove: cfg
                .config
                .providers
                .iter()
                .flatten()
                .filter_map(|(_, p)| p.api_key_env.clone())
                .collect(),
            process_ledger: None,
            hidden: vec![cfg.config_path.clone()],
        }
    }
}

pub(super) fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}
