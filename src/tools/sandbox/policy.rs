//! What a command may see, decided by the host: the launcher's `--read`, `--write`,
//! `--hide` and `--mask` arguments for a conversation's mode, workspace and settings
//! (spec: README § "Permission modes and the sandbox").

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::env::AGENT_VARS;
use super::settings::home;
use crate::tools::{PermissionMode, ToolContext};

/// System directories commands may read and execute from.
const SYSTEM_READ: &[&str] = &[
    "/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/nix",
    "/proc", "/sys", "/run",
];

/// Toolchain locations in `$HOME` commands may read and execute from (never written).
const HOME_READ: &[&str] = &[
    ".cargo",
    ".rustup",
    ".local/bin",
    ".local/lib",
    ".nvm",
    ".pyenv",
    ".rbenv",
    ".asdf",
    ".sdkman",
    "go/bin",
    ".gitconfig",
    ".config/git",
];

/// Sockets of system daemons that act for whoever connects with the caller's
/// privileges: a container engine (root on the host for its users), the system D-Bus
/// and systemd's private bus (`systemd-run` as root), snapd. Covered in every
/// command's mount namespace (best effort, like the agents' sockets).
const DAEMON_SOCKETS: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/crio/crio.sock",
    "/run/snapd.socket",
    "/run/snapd-snap.socket",
    "/run/dbus/system_bus_socket",
    "/run/systemd/private",
];

/// Where the user's credential agents listen, as far as the host can tell: the sockets
/// named by `SSH_AUTH_SOCK` and `GPG_AGENT_INFO` (`path:pid:version`), and the user's
/// runtime dir (`$XDG_RUNTIME_DIR`, `/run/user/UID`: gpg-agent, gcr's ssh agent, the
/// D-Bus session bus, keyrings). A pathname unix socket is reachable through any path
/// (Landlock before the unix-socket right does not confine `connect`), so the command's
/// mount namespace covers these with empty read-only ones.
fn agent_sockets() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(s) = std::env::var_os("SSH_AUTH_SOCK") {
        out.push(s.into());
    }
    if let Ok(g) = std::env::var("GPG_AGENT_INFO") {
        if let Some(path) = g.split(':').next().filter(|p| !p.is_empty()) {
            out.push(path.into());
        }
    }
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR") {
        out.push(x.into());
    }
    #[cfg(target_os = "linux")]
    out.push(PathBuf::from(format!(
        "/run/user/{}",
        rustix::process::getuid().as_raw()
    )));
    out.retain(|p| p.is_absolute() && p != Path::new("/"));
    out
}

/// The `--read` / `--write` roots of a command in `ctx` (see the README):
///
/// - read: [`SYSTEM_READ`], toolchain dirs in `$HOME` ([`HOME_READ`]), the absolute
///   `$PATH` directories, each canonicalized first (symlinks, `..`, `/proc/self/root`
///   resolved; entries that do not resolve are skipped), that are not `/`, `$HOME`,
///   `/tmp`, `/var/tmp` or an ancestor of one of them or of the workspace, and
///   `agent.sandbox.readable_roots`;
/// - write (`standard`): the workspace, the conversation's temp dir and spill dir, and
///   `agent.sandbox.writable_roots`; (`read_only`): the temp dir only, the workspace
///   and the spill dir becoming read roots;
/// - hide: `agent`'s [`super::SandboxSettings::hidden`] paths and the wuu home
///   (`process_ledger`), canonicalized;
/// - mask: [`DAEMON_SOCKETS`], and the credential agents' sockets ([`agent_sockets`])
///   unless one of [`AGENT_VARS`] is in `agent.shell_env.keep`.
pub(crate) fn policy_args(ctx: &ToolContext) -> Vec<OsString> {
    let mut read: Vec<PathBuf> = SYSTEM_READ.iter().map(PathBuf::from).collect();
    let home = home();
    if let Some(h) = &home {
        read.extend(HOME_READ.iter().map(|r| h.join(r)));
    }
    let ws = crate::tools::paths::workspace_root(ctx);
    if let Some(path) = std::env::var_os("PATH") {
        let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        let ws = canonical(&ws);
        let mut protected: Vec<PathBuf> = vec![
            ws.clone(),
            canonical(Path::new("/tmp")),
            canonical(Path::new("/var/tmp")),
        ];
        protected.extend(home.as_deref().map(canonical));
        for d in std::env::split_paths(&path) {
            if !d.is_absolute() {
                continue;
            }
            let Ok(d) = std::fs::canonicalize(&d) else {
                continue;
            };
            // `/` is an ancestor of everything.
            if !protected.iter().any(|p| p.starts_with(&d)) {
                read.push(d);
            }
        }
    }
    read.extend(ctx.sandbox.readable_roots.iter().cloned());
    let mut write = vec![ctx.temp_dir.clone()];
    if ctx.permission_mode == PermissionMode::ReadOnly {
        read.push(ws);
        read.push(ctx.spill_dir.clone());
    } else {
        write.push(ws);
        write.push(ctx.spill_dir.clone());
        write.extend(ctx.sandbox.writable_roots.iter().cloned());
    }
    let mut hide: Vec<PathBuf> = ctx.sandbox.hidden.clone();
    hide.extend(ctx.sandbox.process_ledger.iter().cloned());
    let mut args: Vec<OsString> = Vec::new();
    for h in hide {
        if let Ok(h) = std::fs::canonicalize(&h) {
            args.push("--hide".into());
            args.push(h.into_os_string());
        }
    }
    for m in DAEMON_SOCKETS {
        if let Ok(m) = std::fs::canonicalize(m) {
            args.push("--mask".into());
            args.push(m.into_os_string());
        }
    }
    let agents_kept = AGENT_VARS
        .iter()
        .any(|v| ctx.sandbox.env_keep.iter().any(|k| k == v));
    if !agents_kept {
        for m in agent_sockets() {
            if let Ok(m) = std::fs::canonicalize(&m) {
                args.push("--mask".into());
                args.push(m.into_os_string());
            }
        }
    }
    for r in read {
        args.push("--read".into());
        args.push(r.into_os_string());
    }
    for w in write {
        args.push("--write".into());
        args.push(w.into_os_string());
    }
    args
}
