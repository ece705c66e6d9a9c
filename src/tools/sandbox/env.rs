//! The environment a sandboxed command gets: the host's, without secret-looking
//! variables, the providers' keys and the credential agents' sockets (spec: README §
//! "Permission modes and the sandbox").

use std::ffi::OsString;

use crate::tools::ToolContext;

/// Variables that hand a command the user's credential agents (ssh-agent, gpg-agent):
/// removed from every command's environment unless named in `agent.shell_env.keep`.
pub const AGENT_VARS: &[&str] = &["SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO"];

/// Whether a variable name looks like it holds a secret: contains `KEY`, `TOKEN`,
/// `SECRET` or `PASSWORD` (case-insensitive).
pub fn looks_secret(name: &str) -> bool {
    let up = name.to_ascii_uppercase();
    ["KEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|w| up.contains(w))
}

/// The environment a command gets: the host's, minus every variable named in
/// `env_remove`, every name that [`looks_secret`] and the credential agents' sockets
/// ([`AGENT_VARS`]), except those in `env_keep`; plus `TMPDIR` (the conversation's
/// private temp dir) and `WUU_SANDBOX` (the mode).
pub fn command_env(ctx: &ToolContext) -> Vec<(OsString, OsString)> {
    let s = &ctx.sandbox;
    let mut out: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(k, _)| {
            let name = k.to_string_lossy();
            if s.env_keep.iter().any(|keep| *keep == name) {
                return true;
            }
            !(looks_secret(&name)
                || AGENT_VARS.contains(&name.as_ref())
                || s.env_remove.iter().any(|r| *r == name))
        })
        .filter(|(k, _)| k != "TMPDIR" && k != "WUU_SANDBOX")
        .collect();
    out.push(("TMPDIR".into(), ctx.temp_dir.clone().into_os_string()));
    out.push(("WUU_SANDBOX".into(), ctx.permission_mode.as_str().into()));
    out
}
